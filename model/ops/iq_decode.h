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
// The decoders are plain functions compiled once (portable code) and shared
// by every kernel set, so they cannot differ between sets.
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

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_IQ_DECODE_H_
