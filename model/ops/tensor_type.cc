#include "model/ops/tensor_type.h"

#include <cctype>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace colibri::ops {
namespace {

// Block layouts are GGML's (ggml-common.h). Sizes in bytes.
constexpr TensorTypeTraits kTypes[] = {
    {TensorType::kF32, "F32", 1, 4, true},
    {TensorType::kF16, "F16", 1, 2, true},
    {TensorType::kQ4_0, "Q4_0", 32, 18, true},
    {TensorType::kQ4_1, "Q4_1", 32, 20, true},
    {TensorType::kQ5_0, "Q5_0", 32, 22, true},
    {TensorType::kQ5_1, "Q5_1", 32, 24, true},
    {TensorType::kQ8_0, "Q8_0", 32, 34, true},
    {TensorType::kQ8_1, "Q8_1", 32, 36, false},
    {TensorType::kQ2_K, "Q2_K", 256, 84, true},
    {TensorType::kQ3_K, "Q3_K", 256, 110, true},
    {TensorType::kQ4_K, "Q4_K", 256, 144, true},
    {TensorType::kQ5_K, "Q5_K", 256, 176, true},
    {TensorType::kQ6_K, "Q6_K", 256, 210, true},
    {TensorType::kQ8_K, "Q8_K", 256, 292, false},
    {TensorType::kIQ2_XXS, "IQ2_XXS", 256, 66, true},
    {TensorType::kIQ2_XS, "IQ2_XS", 256, 74, true},
    {TensorType::kIQ3_XXS, "IQ3_XXS", 256, 98, true},
    {TensorType::kIQ1_S, "IQ1_S", 256, 50, true},
    {TensorType::kIQ4_NL, "IQ4_NL", 32, 18, true},
    {TensorType::kIQ3_S, "IQ3_S", 256, 110, true},
    {TensorType::kIQ2_S, "IQ2_S", 256, 82, true},
    {TensorType::kIQ4_XS, "IQ4_XS", 256, 136, true},
    {TensorType::kI8, "I8", 1, 1, false},
    {TensorType::kI16, "I16", 1, 2, false},
    {TensorType::kI32, "I32", 1, 4, false},
    {TensorType::kI64, "I64", 1, 8, false},
    {TensorType::kF64, "F64", 1, 8, false},
    {TensorType::kIQ1_M, "IQ1_M", 256, 56, true},
    {TensorType::kBF16, "BF16", 1, 2, true},
    {TensorType::kTQ1_0, "TQ1_0", 256, 54, false},
    {TensorType::kTQ2_0, "TQ2_0", 256, 66, false},
    {TensorType::kMXFP4, "MXFP4", 32, 17, true},
};

}  // namespace

const TensorTypeTraits* FindTensorType(uint32_t id) {
  for (const TensorTypeTraits& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const TensorTypeTraits& GetTraits(TensorType type) {
  return *FindTensorType(static_cast<uint32_t>(type));
}

absl::StatusOr<TensorType> ParseTensorType(absl::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const TensorTypeTraits& t : kTypes) {
    if (upper == t.name) return t.type;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown tensor type name '", name, "'"));
}

absl::StatusOr<uint64_t> RowBytes(TensorType type, int64_t n) {
  const TensorTypeTraits& t = GetTraits(type);
  if (n < 0 || n % t.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("row of ", n, " elements is not a multiple of the ",
                                                   t.name, " block size ", t.block_size));
  }
  return RowBytesUnchecked(type, n);
}

}  // namespace colibri::ops
