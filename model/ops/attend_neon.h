// NEON attention products over a KV cache of q8_0 blocks (model/ops/attend.h),
// for the NEON kernel sets. Internal to model/ops; include only from
// neon_kernels.h (everything here is in an anonymous namespace).
//
// Canonical order (vec_dot.h): a dot keeps lanes 0-3 and 4-7 in two vectors,
// each lane + q*k as a product then a sum (no fused multiply-add), reduced as
// ReduceLanes; a weighted sum adds p_j * v_j[e] in order of j. The quants are
// widened to int32, converted (exact) and multiplied by their block's scale
// (exact: 11 by 8 significant bits), which gives the dequantized floats, so
// the results equal the float products over the dequantized rows.
#ifndef COLIBRI_MODEL_OPS_ATTEND_NEON_H_
#define COLIBRI_MODEL_OPS_ATTEND_NEON_H_

#if !defined(__aarch64__)
#error "attend_neon.h is for 64-bit ARM targets"
#endif

#include <arm_neon.h>

#include <algorithm>
#include <cstdint>

#include "model/ops/quant_blocks.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {
namespace {

// A block's 32 elements as floats, in 8 vectors of 4.
inline void NeonWidenQ8(const BlockQ8_0& block, float32x4_t out[8]) {
  const float32x4_t d = vdupq_n_f32(HalfToFloat(block.d));
  for (int s = 0; s < 4; ++s) {
    const int16x8_t w = vmovl_s8(vld1_s8(block.qs + 8 * s));
    out[2 * s] = vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))));
    out[2 * s + 1] = vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_high_s16(w))));
  }
}

// Queries in groups of up to 4 against one key at a time: each key block is
// widened once per group.
void NeonAttendDotsQ8(const float* q, int64_t q_stride, int n_q, const BlockQ8_0* keys,
                      int64_t key_stride, int n_keys, int dim, float* dots, int64_t dots_stride) {
  constexpr int kGroup = 4;
  for (int t0 = 0; t0 < n_q; t0 += kGroup) {
    const int nt = std::min(kGroup, n_q - t0);
    for (int j = 0; j < n_keys; ++j) {
      const BlockQ8_0* key = keys + j * key_stride;
      float32x4_t lo[kGroup], hi[kGroup];
      for (int t = 0; t < kGroup; ++t) lo[t] = hi[t] = vdupq_n_f32(0.0f);
      for (int b = 0; b < dim / kQK; ++b) {
        float32x4_t k[8];
        NeonWidenQ8(key[b], k);
        for (int t = 0; t < nt; ++t) {
          const float* qt = q + (t0 + t) * q_stride + b * kQK;
          for (int s = 0; s < 4; ++s) {
            lo[t] = vaddq_f32(lo[t], vmulq_f32(vld1q_f32(qt + 8 * s), k[2 * s]));
            hi[t] = vaddq_f32(hi[t], vmulq_f32(vld1q_f32(qt + 8 * s + 4), k[2 * s + 1]));
          }
        }
      }
      for (int t = 0; t < nt; ++t) {
        float lanes[8];
        vst1q_f32(lanes, lo[t]);
        vst1q_f32(lanes + 4, hi[t]);
        dots[(t0 + t) * dots_stride + j] = ReduceLanes(lanes);
      }
    }
  }
}

// Per query, 32 output columns (one block of every value row) at a time in
// 8 vectors while its rows stream past.
void NeonAttendValuesQ8(const float* const* p, const int* n, int n_q, const BlockQ8_0* values,
                        int64_t value_stride, int dim, float* const* out) {
  for (int i = 0; i < n_q; ++i) {
    for (int b = 0; b < dim / kQK; ++b) {
      float* o = out[i] + b * kQK;
      float32x4_t acc[8];
      for (int k = 0; k < 8; ++k) acc[k] = vld1q_f32(o + 4 * k);
      for (int j = 0; j < n[i]; ++j) {
        float32x4_t v[8];
        NeonWidenQ8(values[j * value_stride + b], v);
        const float32x4_t pj = vdupq_n_f32(p[i][j]);
        for (int k = 0; k < 8; ++k) acc[k] = vaddq_f32(acc[k], vmulq_f32(pj, v[k]));
      }
      for (int k = 0; k < 8; ++k) vst1q_f32(o + 4 * k, acc[k]);
    }
  }
}

}  // namespace
}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_ATTEND_NEON_H_
