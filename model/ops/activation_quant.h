// Quantization of activation rows for the kFast path of MatMul, the way
// llama.cpp's x86 CPU backend quantizes them (ggml-cpu quantize_row_q8_*).
// Internal to model/ops.
//
// A quantized row is stored structure-of-arrays so that SIMD kernels can load
// the int8 quants and the per-block factors directly:
//   [cols] int8 quants | pad | [nb] float d | [nb] float s (Q8_1) or
//                                             [nb][16] int16 bsums (Q8_K)
// with nb = cols / block. d and s hold the fp16-rounded values llama.cpp
// stores (Q8_K's d is a plain float, as in GGML).
//
// Each row is quantized on its own, so a token's quantized row does not depend
// on the batch it is in.
#ifndef COLIBRI_MODEL_OPS_ACTIVATION_QUANT_H_
#define COLIBRI_MODEL_OPS_ACTIVATION_QUANT_H_

#include <cstdint>

#include "model/ops/tensor_type.h"

namespace colibri::ops::internal {

enum class ActivationFormat {
  kFloat,  // float32 rows, unquantized (F32/F16/BF16 weights)
  kQ8_0,   // 32 quants per fp16 scale: d = amax / 127, q = round_half_even(x * 127 / amax)
  kQ8_1,   // Q8_0 plus s = fp16(d * Σq) per block, for the weight types with a min
  kQ8_K,   // 256 quants per float scale: d = max / -127 (max: signed value of largest
           // magnitude), q = min(127, round_half_even(x / d)); bsums per 16 quants
};

// The activation format the kFast path uses for weights of `type`.
ActivationFormat ActivationFormatFor(TensorType type);

struct ActivationLayout {
  ActivationFormat format = ActivationFormat::kFloat;
  int64_t cols = 0;
  int64_t block = 1;         // 32 or 256 elements per scale
  uint64_t d_offset = 0;     // byte offset of float d[nb]
  uint64_t aux_offset = 0;   // byte offset of float s[nb] or int16 bsums[nb][16]
  uint64_t row_bytes = 0;    // stride between rows, a multiple of 64
};

// Layout of a quantized row of `cols` elements (a multiple of the block size).
ActivationLayout MakeActivationLayout(ActivationFormat format, int64_t cols);

// Pointers into one quantized row.
struct QuantizedRow {
  const int8_t* qs;
  const float* d;
  const float* s;         // Q8_1 only
  const int16_t* bsums;   // Q8_K only

  static QuantizedRow At(const ActivationLayout& layout, const uint8_t* row) {
    return QuantizedRow{reinterpret_cast<const int8_t*>(row),
                        reinterpret_cast<const float*>(row + layout.d_offset),
                        reinterpret_cast<const float*>(row + layout.aux_offset),
                        reinterpret_cast<const int16_t*>(row + layout.aux_offset)};
  }
  // a[t] = At(layout, rows + t * layout.row_bytes) for t < n: the rows of
  // a tile's tokens.
  static void AtEach(const ActivationLayout& layout, const uint8_t* rows, int64_t n,
                     QuantizedRow* a) {
    for (int64_t t = 0; t < n; ++t) a[t] = At(layout, rows + t * layout.row_bytes);
  }
};

// x: [layout.cols]; row: layout.row_bytes bytes, 64-byte aligned.
void QuantizeActivationRow(const ActivationLayout& layout, const float* x, uint8_t* row);

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_ACTIVATION_QUANT_H_
