// Conversion between float32 and the block formats of model/ops/tensor_type.h.
//
// Dequantization follows GGML's block layouts exactly (a file written by
// llama.cpp decodes to the same floats). Quantization is a straightforward
// round-to-nearest encoder per block (what llama.cpp calls the reference
// quantizer); it is used for synthetic models and tests, not for producing
// release-quality quantized models.
#ifndef COLIBRI_MODEL_OPS_QUANTIZE_H_
#define COLIBRI_MODEL_OPS_QUANTIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/ops/tensor_type.h"

namespace colibri::ops {

// src: RowBytes(type, n) bytes; dst: [n]. n must be a multiple of the block size
// and type supported (checked by the caller: these are hot paths).
void DequantizeRow(TensorType type, const void* src, float* dst, int64_t n);

// src: [n]; dst: RowBytes(type, n) bytes. InvalidArgument for an unsupported type
// or a bad n; Unimplemented for the grid-based i-quants (IQ1_*, IQ2_*, IQ3_*),
// which are decoded but not encoded here.
absl::Status QuantizeRow(TensorType type, const float* src, void* dst, int64_t n);

// IEEE half and bfloat16 conversions (round to nearest even).
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
float Bf16ToFp32(uint16_t h);
uint16_t Fp32ToBf16(float f);

}  // namespace colibri::ops

#endif  // COLIBRI_MODEL_OPS_QUANTIZE_H_
