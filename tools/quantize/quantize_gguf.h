// Re-encodes the weight matrices of a float GGUF model in another tensor type
// (F16, Q8_0, Q4_K, ...) with colibri's own quantizer (model/ops/quantize.h),
// copying every metadata key and every other tensor unchanged.
//
// Which tensors change: those of 2 or more dimensions, except the MoE routers
// (`*ffn_gate_inp*`, kept F32 as llama.cpp does: they are small and decide the
// routing). Norms and biases are vectors and stay as they are. A matrix whose
// row length is not a multiple of the type's block size falls back to the
// first of Q8_0, F16, F32 that fits (the report lists each fallback).
//
// The converted tensors are held in memory until the file is written, so the
// tool suits models that fit in RAM (the demo and test models).
//
// Thread-safety: the functions are reentrant.
#ifndef COLIBRI_TOOLS_QUANTIZE_QUANTIZE_GGUF_H_
#define COLIBRI_TOOLS_QUANTIZE_QUANTIZE_GGUF_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/ops/tensor_type.h"

namespace colibri::quantize {

struct QuantizeOptions {
  std::string input_path;   // a GGUF whose tensors are F32, F16 or BF16
  std::string output_path;  // written via a temporary file renamed into place
  // Target type of the matrices. Default: Q8_0.
  ops::TensorType type = ops::TensorType::kQ8_0;
};

struct QuantizeReport {
  int tensors = 0;                     // tensors written
  int converted = 0;                   // tensors re-encoded (target or fallback type)
  std::vector<std::string> fallbacks;  // "name: TYPE (row length N)"
  uint64_t input_bytes = 0;            // tensor bytes read
  uint64_t output_bytes = 0;           // tensor bytes written
};

// The type `name` gets: the target, a fallback, or its own type when it is not
// converted. row_length is dims[0].
ops::TensorType ChooseType(const std::string& name, int n_dims, int64_t row_length,
                           ops::TensorType source, ops::TensorType target);

// Reads, converts and writes. NotFound / InvalidArgument from opening the input
// (a bad file), InvalidArgument when the target type cannot be encoded or an
// input tensor is not F32/F16/BF16, Internal on write errors.
absl::StatusOr<QuantizeReport> QuantizeGguf(const QuantizeOptions& options);

}  // namespace colibri::quantize

#endif  // COLIBRI_TOOLS_QUANTIZE_QUANTIZE_GGUF_H_
