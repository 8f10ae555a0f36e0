// Reading GGUF files (versions 2 and 3): metadata, tensor infos, mmapped data.
//
// Everything in the file is validated before it is trusted: magic, version,
// counts, string lengths, value types, array nesting, dimensions and their
// product, tensor types, data offsets and sizes, duplicate keys and tensor names.
// A damaged or hostile file yields an absl::Status naming the file and the field,
// never a crash or an out-of-bounds read.
//
// Split models (`name-00001-of-00003.gguf` with `split.count`, `split.no`,
// `split.tensors.count`): opening the first file opens and checks the others and
// presents one tensor table; metadata comes from the first file.
//
// Error codes: NotFound when a file (or a split sibling) does not exist;
// InvalidArgument when the file is not one this reader reads (magic is not
// "GGUF", version other than 2 or 3, a split file other than the first opened);
// DataLoss for anything damaged or inconsistent inside the bytes (truncation,
// counts or lengths that cannot fit, unknown value or tensor types, arrays
// nested deeper than 8 or longer than 2^28 elements, bad dims, sizes, offsets or
// alignment, overlapping tensors, duplicate keys or tensor names, split files
// that do not match). Messages start with the file's path and name the field.
// Tensor types that GGML defines but the kernels do not implement are accepted
// here (the model loader rejects them). Dims of 0 are accepted (empty tensor).
//
// Thread-safety: a GgufFile is immutable after Open; any number of threads may
// read it concurrently.
#ifndef COLIBRI_MODEL_GGUF_GGUF_FILE_H_
#define COLIBRI_MODEL_GGUF_GGUF_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/mapped_file.h"
#include "model/gguf/gguf_value.h"
#include "model/ops/tensor_type.h"

namespace colibri::gguf {

struct TensorInfo {
  std::string name;
  ops::TensorType type;
  // GGML order: dims[0] is the fastest-varying (row length); at most 4 dims.
  std::vector<int64_t> dims;
  int64_t n_elements = 0;
  uint64_t n_bytes = 0;
  int split_index = 0;            // which file of a split model holds it
  uint64_t offset_in_file = 0;    // absolute byte offset of the data in that file
  const uint8_t* data = nullptr;  // n_bytes bytes, inside the mapping

  int64_t rows() const;  // product of dims[1..] (1 for a vector)
  int64_t row_length() const { return dims.empty() ? 0 : dims[0]; }
};

class GgufFile {
 public:
  // Opens, maps and validates `path` (and, for a split model, its siblings).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Validates an in-memory GGUF image (tests, fuzzers). `name` is used in errors.
  // The bytes must outlive the returned object. Split siblings are not opened:
  // the result holds this image's tensors only, split_count() is 1 and
  // mapping(0) is null.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(absl::Span<const uint8_t> bytes,
                                                             std::string name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  int split_count() const;  // number of files opened (1 unless split)

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* FindValue(absl::string_view key) const;

  // Typed getters. NotFound if absent; InvalidArgument (naming key and file) if
  // the stored type does not convert: GetInt accepts any integer type whose value
  // fits int64; GetUint any non-negative integer; GetFloat F32/F64 (and integers);
  // GetBool BOOL only; arrays must have the matching element kind: GetIntArray
  // takes any integer or bool array (every element must fit int64), GetFloatArray
  // takes F32/F64 arrays and also integer arrays (converted).
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<const std::vector<std::string>*> GetStringArray(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(absl::string_view key) const;

  // As above, but an absent key yields `fallback` (a present key of the wrong
  // type is still an error).
  absl::StatusOr<int64_t> GetIntOr(absl::string_view key, int64_t fallback) const;
  absl::StatusOr<double> GetFloatOr(absl::string_view key, double fallback) const;
  absl::StatusOr<bool> GetBoolOr(absl::string_view key, bool fallback) const;
  absl::StatusOr<std::string> GetStringOr(absl::string_view key, std::string fallback) const;

  // Tensors in file order (split files in order).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(absl::string_view name) const;

  // The mapping of split file i (0 for a single file); null when out of range
  // or for FromBytes.
  const MappedFile* mapping(int split_index) const;

  // Start of the data section of split file i (what tensor offsets count from).
  uint64_t data_offset(int split_index) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> metadata_;
  absl::flat_hash_map<std::string, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
  std::vector<std::unique_ptr<MappedFile>> mappings_;
  std::vector<uint64_t> data_offsets_;  // per split file
};

}  // namespace colibri::gguf

#endif  // COLIBRI_MODEL_GGUF_GGUF_FILE_H_
