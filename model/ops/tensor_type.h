// GGML tensor types as stored in GGUF files: ids, block layouts and names.
//
// Every id GGML defines is known here, so that a file can be parsed and its
// sizes checked even when it holds types the kernels do not implement;
// `supported` says which ones the kernels implement.
#ifndef COLIBRI_MODEL_OPS_TENSOR_TYPE_H_
#define COLIBRI_MODEL_OPS_TENSOR_TYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::ops {

// Values are the on-disk ids (ggml_type).
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct TensorTypeTraits {
  TensorType type;
  const char* name;     // "Q4_K", as llama.cpp prints it
  int64_t block_size;   // elements per block
  int64_t type_size;    // bytes per block
  bool supported;       // implemented by the kernels (dequantize + dot)
};

// Traits of the type with on-disk id `id`, or nullptr when GGML defines no such id.
const TensorTypeTraits* FindTensorType(uint32_t id);
// Traits of a known type (never null for a TensorType value listed above).
const TensorTypeTraits& GetTraits(TensorType type);
inline const char* TypeName(TensorType type) { return GetTraits(type).name; }

// Looks a type up by its name ("q4_k" or "Q4_K"); InvalidArgument if unknown.
absl::StatusOr<TensorType> ParseTensorType(absl::string_view name);

// Bytes of a row of n elements; InvalidArgument unless n is a multiple of the
// block size.
absl::StatusOr<uint64_t> RowBytes(TensorType type, int64_t n);

// Row bytes when n is known to be a multiple of the block size.
inline uint64_t RowBytesUnchecked(TensorType type, int64_t n) {
  const TensorTypeTraits& t = GetTraits(type);
  return static_cast<uint64_t>(n / t.block_size) * static_cast<uint64_t>(t.type_size);
}

}  // namespace colibri::ops

#endif  // COLIBRI_MODEL_OPS_TENSOR_TYPE_H_
