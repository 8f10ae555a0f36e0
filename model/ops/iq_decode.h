// The i-quant super-blocks (256 elements) as integers, the form every kernel
// set's dot product uses. Internal to model/ops.
//
// Every element decodes to an int8 quant q and every 16-element group to an
// int16 scale s, so that the weight is exactly d * s * q * kFinal with d the
// block's fp16 scale and kFinal a power of two per type:
//   IQ2_XXS, IQ2_XS, IQ2_S: q = ±grid (8, 25, 43), s = 2*scale+1, kFinal 1/8
//   IQ3_XXS: q = ±grid (4..62), s = 2*scale+1, kFinal 1/4
//   IQ3_S:   q = ±grid (1..15), s = 2*scale+1, kFinal 1
//   IQ1_S, IQ1_M: q = 8*grid ± 1 (grid -1, 0, 1; the ±1/8 shift times 8),
//            s = 2*scale+1, kFinal 1/8
//   IQ4_XS:  q = kIq4nlValues[code], s = scale - 32, kFinal 1
// The dot product of a row with Q8_K activations (vec_dot.h) is then
//   acc += (d * da) * float(Σ_g s_g * Σ_{e in g} q_e * qa_e) per super-block,
//   result = acc * kFinal,
// with exact int32 sums (|Σ| < 2^27 for every type).
//
// The portable kernels use these decoders; the AVX2 kernels rebuild the same
// integers in registers (vec_dot_avx2_iq.cc), and the kernel-set tests check
// that every set's results are bitwise the portable ones.
#ifndef COLIBRI_MODEL_OPS_IQ_DECODE_H_
#define COLIBRI_MODEL_OPS_IQ_DECODE_H_

#include <cstdint>

#include "model/ops/tensor_type.h"

namespace colibri::ops::internal {

struct IqSuperBlock {
  alignas(32) int8_t q[256];
  alignas(32) int16_t scale[16];
  float d;
};

using IqDecodeFn = void (*)(const uint8_t* block, IqSuperBlock* out);

struct IqTypeInfo {
  IqDecodeFn decode;
  int block_bytes;
  float final_scale;  // kFinal above
};

// Null decode for types that are not 256-element i-quants.
IqTypeInfo GetIqTypeInfo(TensorType type);

// Tables the decoders use, for SIMD decoders that must give the same bytes:
// byte j of IqSignMasks()[s] is 0xFF where bit j of s is set; byte j of
// Iq1Entries(negative)[i] is 8 * iq1s_grid[i] byte j + (negative ? -1 : 1).
// The two IQ1 tables are one array: Iq1Entries(true) == Iq1Entries(false) +
// 2048, so the shift sign can be index bit 11 (the AVX2 kernels rely on it).
const uint64_t* IqSignMasks();
const uint64_t* Iq1Entries(bool negative_shift);

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_IQ_DECODE_H_
