// Writing GGUF v3 files: metadata, tensor infos, aligned tensor data.
//
// Used by tests (including the hostile-file tests, which damage its output) and
// by the synthetic-model generator. Tensors are appended with their bytes already
// encoded in their type (see model/ops/quantize.h).
//
// Layout written: header, metadata in SetValue order (general.alignment first
// when the alignment is not 32 and the caller did not set that key), tensor infos
// in AddTensor order, zero padding to the alignment, then each tensor's bytes
// padded with zeros to the alignment. A caller-set `general.alignment` is
// written as given (tests use this to produce bad files); padding always uses the
// constructor's alignment.
//
// Thread-safety: none; one writer per thread.
#ifndef COLIBRI_MODEL_GGUF_GGUF_WRITER_H_
#define COLIBRI_MODEL_GGUF_GGUF_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/gguf/gguf_value.h"
#include "model/ops/tensor_type.h"

namespace colibri::gguf {

class GgufWriter {
 public:
  // alignment: data alignment written as general.alignment when != 32. Must be a
  // nonzero power of two; WriteFile and WriteSplitFiles return InvalidArgument
  // otherwise (Serialize writes it anyway, treating 0 as 1, for hostile tests).
  explicit GgufWriter(uint64_t alignment = 32);

  void SetValue(std::string key, Value value);  // replaces an existing key
  // dims in GGML order (dims[0] = row length). InvalidArgument if the byte count
  // does not match type and dims, or the name is already used.
  absl::Status AddTensor(std::string name, ops::TensorType type, std::vector<int64_t> dims,
                         std::vector<uint8_t> bytes);
  // Convenience for F32 tensors.
  absl::Status AddF32Tensor(std::string name, std::vector<int64_t> dims,
                            absl::Span<const float> values);

  // The complete file image.
  std::vector<uint8_t> Serialize() const;
  // Writes the image to `path` (via a temporary file renamed into place). Streams
  // the tensor bytes: only the header and metadata are assembled in memory.
  // Internal on I/O errors.
  absl::Status WriteFile(const std::string& path) const;

  // Writes a split model as llama.cpp's gguf-split does: files
  // `<prefix>-00001-of-0000N.gguf` ... with the tensors cut into `split_count`
  // contiguous runs of near-equal length, every file carrying split.no (uint16,
  // 0-based), split.count (uint16) and split.tensors.count (int32); the other
  // metadata goes into the first file only. Returns the paths written.
  // InvalidArgument unless 1 <= split_count <= 65535.
  absl::StatusOr<std::vector<std::string>> WriteSplitFiles(const std::string& prefix,
                                                           int split_count) const;

  size_t tensor_count() const { return tensors_.size(); }

 private:
  struct PendingTensor {
    std::string name;
    ops::TensorType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  using Metadata = std::vector<std::pair<std::string, Value>>;

  // metadata_ with general.alignment added when needed.
  Metadata MetadataToWrite() const;
  // Everything before the data section of a file holding tensors [first, last).
  std::vector<uint8_t> EncodeHead(const Metadata& metadata, size_t first, size_t last) const;
  absl::Status WriteRange(const std::string& path, const Metadata& metadata, size_t first,
                          size_t last) const;

  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
  absl::flat_hash_set<std::string> tensor_names_;
};

}  // namespace colibri::gguf

#endif  // COLIBRI_MODEL_GGUF_GGUF_WRITER_H_
