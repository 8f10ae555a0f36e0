// Reference (plain C++) encoders and decoders per block family. Internal to
// model/ops; the public entry points are DequantizeRow / QuantizeRow in
// quantize.h. n is a multiple of the type's block size.
//
// The decoders reproduce GGML's dequantize_row_* bit for bit, including the
// order of the float operations (d * scale first, then times the quant, then
// minus the min), so the library is built with -ffp-contract=off.
#ifndef COLIBRI_MODEL_OPS_QUANT_REFERENCE_H_
#define COLIBRI_MODEL_OPS_QUANT_REFERENCE_H_

#include <cstdint>

namespace colibri::ops::internal {

// quantize.cc: the float types.
void DequantizeF32(const void* src, float* dst, int64_t n);
void DequantizeF16(const void* src, float* dst, int64_t n);
void DequantizeBF16(const void* src, float* dst, int64_t n);

// quant_legacy.cc
void DequantizeQ4_0(const void* src, float* dst, int64_t n);
void DequantizeQ4_1(const void* src, float* dst, int64_t n);
void DequantizeQ5_0(const void* src, float* dst, int64_t n);
void DequantizeQ5_1(const void* src, float* dst, int64_t n);
void DequantizeQ8_0(const void* src, float* dst, int64_t n);
void QuantizeQ4_0(const float* src, void* dst, int64_t n);
void QuantizeQ4_1(const float* src, void* dst, int64_t n);
void QuantizeQ5_0(const float* src, void* dst, int64_t n);
void QuantizeQ5_1(const float* src, void* dst, int64_t n);
void QuantizeQ8_0(const float* src, void* dst, int64_t n);

// quant_k.cc
void DequantizeQ2_K(const void* src, float* dst, int64_t n);
void DequantizeQ3_K(const void* src, float* dst, int64_t n);
void DequantizeQ4_K(const void* src, float* dst, int64_t n);
void DequantizeQ5_K(const void* src, float* dst, int64_t n);
void DequantizeQ6_K(const void* src, float* dst, int64_t n);
void QuantizeQ2_K(const float* src, void* dst, int64_t n);
void QuantizeQ3_K(const float* src, void* dst, int64_t n);
void QuantizeQ4_K(const float* src, void* dst, int64_t n);
void QuantizeQ5_K(const float* src, void* dst, int64_t n);
void QuantizeQ6_K(const float* src, void* dst, int64_t n);

// quant_mxfp4.cc
void DequantizeMXFP4(const void* src, float* dst, int64_t n);
void QuantizeMXFP4(const float* src, void* dst, int64_t n);

// quant_iq.cc. Only IQ4_NL and IQ4_XS have encoders.
void DequantizeIQ4_NL(const void* src, float* dst, int64_t n);
void DequantizeIQ4_XS(const void* src, float* dst, int64_t n);
void DequantizeIQ2_XXS(const void* src, float* dst, int64_t n);
void DequantizeIQ2_XS(const void* src, float* dst, int64_t n);
void DequantizeIQ2_S(const void* src, float* dst, int64_t n);
void DequantizeIQ3_XXS(const void* src, float* dst, int64_t n);
void DequantizeIQ3_S(const void* src, float* dst, int64_t n);
void DequantizeIQ1_S(const void* src, float* dst, int64_t n);
void DequantizeIQ1_M(const void* src, float* dst, int64_t n);
void QuantizeIQ4_NL(const float* src, void* dst, int64_t n);
void QuantizeIQ4_XS(const float* src, void* dst, int64_t n);

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_QUANT_REFERENCE_H_
