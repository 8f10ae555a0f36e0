#include "model/ops/quantize.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/quant_reference.h"

namespace colibri::ops {

float Fp16ToFp32(uint16_t h) { return HalfToFloat(h); }
uint16_t Fp32ToFp16(float f) { return FloatToHalf(f); }
float Bf16ToFp32(uint16_t h) { return BfloatToFloat(h); }
uint16_t Fp32ToBf16(float f) { return FloatToBfloat(f); }

namespace internal {

void DequantizeF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeF16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(h[i]);
}

void DequantizeBF16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = BfloatToFloat(h[i]);
}

}  // namespace internal

void DequantizeRow(TensorType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case TensorType::kF32: return internal::DequantizeF32(src, dst, n);
    case TensorType::kF16: return internal::DequantizeF16(src, dst, n);
    case TensorType::kBF16: return internal::DequantizeBF16(src, dst, n);
    case TensorType::kQ4_0: return internal::DequantizeQ4_0(src, dst, n);
    case TensorType::kQ4_1: return internal::DequantizeQ4_1(src, dst, n);
    case TensorType::kQ5_0: return internal::DequantizeQ5_0(src, dst, n);
    case TensorType::kQ5_1: return internal::DequantizeQ5_1(src, dst, n);
    case TensorType::kQ8_0: return internal::DequantizeQ8_0(src, dst, n);
    case TensorType::kQ2_K: return internal::DequantizeQ2_K(src, dst, n);
    case TensorType::kQ3_K: return internal::DequantizeQ3_K(src, dst, n);
    case TensorType::kQ4_K: return internal::DequantizeQ4_K(src, dst, n);
    case TensorType::kQ5_K: return internal::DequantizeQ5_K(src, dst, n);
    case TensorType::kQ6_K: return internal::DequantizeQ6_K(src, dst, n);
    case TensorType::kMXFP4: return internal::DequantizeMXFP4(src, dst, n);
    case TensorType::kIQ4_NL: return internal::DequantizeIQ4_NL(src, dst, n);
    case TensorType::kIQ4_XS: return internal::DequantizeIQ4_XS(src, dst, n);
    case TensorType::kIQ2_XXS: return internal::DequantizeIQ2_XXS(src, dst, n);
    case TensorType::kIQ2_XS: return internal::DequantizeIQ2_XS(src, dst, n);
    case TensorType::kIQ2_S: return internal::DequantizeIQ2_S(src, dst, n);
    case TensorType::kIQ3_XXS: return internal::DequantizeIQ3_XXS(src, dst, n);
    case TensorType::kIQ3_S: return internal::DequantizeIQ3_S(src, dst, n);
    case TensorType::kIQ1_S: return internal::DequantizeIQ1_S(src, dst, n);
    case TensorType::kIQ1_M: return internal::DequantizeIQ1_M(src, dst, n);
    default:
      // Unsupported types are rejected by the caller; zeros keep a bug visible
      // without reading past the row.
      std::memset(dst, 0, static_cast<size_t>(n) * sizeof(float));
      return;
  }
}

absl::Status QuantizeRow(TensorType type, const float* src, void* dst, int64_t n) {
  const TensorTypeTraits& traits = GetTraits(type);
  if (!traits.supported) {
    return absl::InvalidArgumentError(
        absl::StrCat("QuantizeRow: type ", traits.name, " is not supported"));
  }
  if (n < 0 || n % traits.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("QuantizeRow: row of ", n,
                                                   " elements is not a multiple of the ",
                                                   traits.name, " block size ", traits.block_size));
  }
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case TensorType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = FloatToHalf(src[i]);
      break;
    }
    case TensorType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = FloatToBfloat(src[i]);
      break;
    }
    case TensorType::kQ4_0: internal::QuantizeQ4_0(src, dst, n); break;
    case TensorType::kQ4_1: internal::QuantizeQ4_1(src, dst, n); break;
    case TensorType::kQ5_0: internal::QuantizeQ5_0(src, dst, n); break;
    case TensorType::kQ5_1: internal::QuantizeQ5_1(src, dst, n); break;
    case TensorType::kQ8_0: internal::QuantizeQ8_0(src, dst, n); break;
    case TensorType::kQ2_K: internal::QuantizeQ2_K(src, dst, n); break;
    case TensorType::kQ3_K: internal::QuantizeQ3_K(src, dst, n); break;
    case TensorType::kQ4_K: internal::QuantizeQ4_K(src, dst, n); break;
    case TensorType::kQ5_K: internal::QuantizeQ5_K(src, dst, n); break;
    case TensorType::kQ6_K: internal::QuantizeQ6_K(src, dst, n); break;
    case TensorType::kMXFP4: internal::QuantizeMXFP4(src, dst, n); break;
    case TensorType::kIQ4_NL: internal::QuantizeIQ4_NL(src, dst, n); break;
    case TensorType::kIQ4_XS: internal::QuantizeIQ4_XS(src, dst, n); break;
    default:
      return absl::UnimplementedError(absl::StrCat("QuantizeRow: no encoder for ", traits.name,
                                                   " (decoding and dot products only)"));
  }
  return absl::OkStatus();
}

}  // namespace colibri::ops
