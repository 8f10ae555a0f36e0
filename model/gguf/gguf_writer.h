// Writing GGUF v3 files: metadata, tensor infos, aligned tensor data.
//
// Used by tests (including the hostile-file tests, which damage its output) and
// by the synthetic-model generator. Tensors are appended with their bytes already
// encoded in their type (see model/ops/quantize.h).
//
// Thread-safety: none; one writer per thread.
#ifndef COLIBRI_MODEL_GGUF_GGUF_WRITER_H_
#define COLIBRI_MODEL_GGUF_GGUF_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/gguf/gguf_value.h"
#include "model/ops/tensor_type.h"

namespace colibri::gguf {

class GgufWriter {
 public:
  // alignment: data alignment written as general.alignment when != 32.
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
  // Writes the image to `path` (via a temporary file renamed into place).
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    ops::TensorType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace colibri::gguf

#endif  // COLIBRI_MODEL_GGUF_GGUF_WRITER_H_
