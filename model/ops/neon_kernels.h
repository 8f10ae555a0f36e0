// The NEON kernel sets (64-bit ARM), written once over the instruction that
// multiplies int8 vectors: vec_dot_neon.cc instantiates them with widening
// multiplies and pairwise adds (every AArch64 CPU), vec_dot_neon_dotprod.cc,
// built for ARMv8.2 with the dot-product extension, with SDOT. Internal to
// model/ops; include only from those two files (everything here is in an
// anonymous namespace: each file gets its own copy, compiled for its own
// instructions).
//
// Same arithmetic as every set (vec_dot.h's canonical order): the integer
// sums are exact whatever the lanes hold, and the float steps per block and
// token are the portable ones, in the same order. A tile decodes each block of
// a weight row once into int8 vectors and runs every token of the tile
// against them.
#ifndef COLIBRI_MODEL_OPS_NEON_KERNELS_H_
#define COLIBRI_MODEL_OPS_NEON_KERNELS_H_

#if !defined(__aarch64__)
#error "neon_kernels.h is for 64-bit ARM targets"
#endif

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "model/ops/activation_quant.h"
#include "model/ops/attend_neon.h"
#include "model/ops/iq_decode.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/tensor_type.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {
namespace {

// Float dot in the canonical order: lanes 0-3 and 4-7 in two vectors, each
// lane + w*x as a product then a sum (no fused multiply-add).
float NeonFloatDot(const float* w, const float* x, int64_t n) {
  float32x4_t lo = vdupq_n_f32(0.0f);
  float32x4_t hi = vdupq_n_f32(0.0f);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    lo = vaddq_f32(lo, vmulq_f32(vld1q_f32(w + c), vld1q_f32(x + c)));
    hi = vaddq_f32(hi, vmulq_f32(vld1q_f32(w + c + 4), vld1q_f32(x + c + 4)));
  }
  float lanes[8];
  vst1q_f32(lanes, lo);
  vst1q_f32(lanes + 4, hi);
  for (; c < n; ++c) lanes[c & 7] = lanes[c & 7] + w[c] * x[c];
  return ReduceLanes(lanes);
}

void NeonFloatTile(const float* w, int64_t w_stride, int64_t n_rows, const float* x,
                   int64_t x_stride, int64_t cols, int64_t n_tokens, float* y, int64_t y_stride) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[t * y_stride + r] = NeonFloatDot(w + r * w_stride, x + t * x_stride, cols);
    }
  }
}

// Weight bytes a tile prefetches ahead of the row it computes (as the other
// sets do: a row of 2,048 columns is too short a stream on its own).
constexpr uint64_t kNeonPrefetchBytes = 12 * 1024;

inline void PrefetchRow(const uint8_t* w, uint64_t offset, uint64_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(w) + offset;
  for (uint64_t b = 0; b < bytes; b += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(at + b), 0, 3);
  }
}

inline int64_t RowsAhead(uint64_t row_bytes) {
  return static_cast<int64_t>((kNeonPrefetchBytes + row_bytes - 1) / row_bytes);
}

inline int8x16_t LowNibbles(uint8x16_t x) {
  return vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0F)));
}
inline int8x16_t HighNibbles(uint8x16_t x) { return vreinterpretq_s8_u8(vshrq_n_u8(x, 4)); }

// ---- 32-element blocks, against Q8_0 activations (Q8_1 for the types with a
// min). Each decoder gives the block's 32 signed quants (element j < 16 in
// q[0], j + 16 in q[1]) and its float scale; kHasMin decoders also the block's
// min, which the tile sums apart and adds last (vec_dot.h).

struct NeonQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int8x16_t q[2]) {
    q[0] = vld1q_s8(b.qs);
    q[1] = vld1q_s8(b.qs + 16);
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

struct NeonQ4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int8x16_t q[2]) {
    const uint8x16_t x = vld1q_u8(b.qs);
    q[0] = vsubq_s8(LowNibbles(x), vdupq_n_s8(8));
    q[1] = vsubq_s8(HighNibbles(x), vdupq_n_s8(8));
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

// Codes looked up in a 16-entry table of int8 values.
template <const int8_t (&kValues)[16]>
inline void DecodeTableNibbles(const uint8_t qs[16], int8x16_t q[2]) {
  const int8x16_t table = vld1q_s8(kValues);
  const uint8x16_t x = vld1q_u8(qs);
  q[0] = vqtbl1q_s8(table, vandq_u8(x, vdupq_n_u8(0x0F)));
  q[1] = vqtbl1q_s8(table, vshrq_n_u8(x, 4));
}

struct NeonQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kHasMin = true;
  static void Decode(const Block& b, int8x16_t q[2]) {
    const uint8x16_t x = vld1q_u8(b.qs);
    q[0] = LowNibbles(x);
    q[1] = HighNibbles(x);
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

// Bit j of the little-endian 32 bits qh as bit 4 of byte j: q[0] gets bits
// 0-15, q[1] bits 16-31.
inline void FifthBits32(const uint8_t qh[4], uint8x16_t bits[2]) {
  uint32_t word;
  std::memcpy(&word, qh, sizeof(word));
  const uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(word));
  static constexpr uint8_t kLow[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static constexpr uint8_t kHigh[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bit = vld1q_u8(kBit);
  const uint8x16_t ten = vdupq_n_u8(0x10);
  bits[0] = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kLow)), bit), ten);
  bits[1] = vandq_u8(vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kHigh)), bit), ten);
}

template <typename BlockT, int kOffset, bool kMin>
struct NeonQ5 {
  using Block = BlockT;
  static constexpr bool kHasMin = kMin;
  static void Decode(const Block& b, int8x16_t q[2]) {
    const uint8x16_t x = vld1q_u8(b.qs);
    uint8x16_t bits[2];
    FifthBits32(b.qh, bits);
    const int8x16_t offset = vdupq_n_s8(kOffset);
    q[0] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(x, vdupq_n_u8(0x0F)), bits[0])), offset);
    q[1] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(x, 4), bits[1])), offset);
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};
using NeonQ5_0 = NeonQ5<BlockQ5_0, 16, false>;
using NeonQ5_1 = NeonQ5<BlockQ5_1, 0, true>;

struct NeonMXFP4 {
  using Block = BlockMXFP4;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int8x16_t q[2]) { DecodeTableNibbles<kMxfp4Values>(b.qs, q); }
  static float Scale(const Block& b) { return E8M0Half(b.e); }
};

struct NeonIQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int8x16_t q[2]) { DecodeTableNibbles<kIq4nlValues>(b.qs, q); }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

// Mul is the instruction policy: Mul::Dot(acc, a, b) adds the 16 products
// a[i] * b[i] into the four int32 lanes of acc (which lane takes which product
// is the policy's business; the total is exact).
template <typename Mul, typename Decoder>
void NeonTile32(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
                const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  QuantizedRow a[kMaxTokenTile];
  QuantizedRow::AtEach(layout, act, n_tokens, a);
  const int64_t n_blocks = layout.cols / kQK;
  const int64_t ahead = RowsAhead(row_bytes);
  for (int64_t r = 0; r < n_rows; ++r) {
    PrefetchRow(w, (r + ahead) * row_bytes, row_bytes);
    const auto* x = reinterpret_cast<const typename Decoder::Block*>(w + r * row_bytes);
    float acc[kMaxTokenTile] = {};
    float summs[kMaxTokenTile] = {};
    for (int64_t b = 0; b < n_blocks; ++b) {
      int8x16_t q[2];
      Decoder::Decode(x[b], q);
      const float dw = Decoder::Scale(x[b]);
      float mw = 0.0f;  // the block's min, decoded once for all tokens
      if constexpr (Decoder::kHasMin) mw = HalfToFloat(x[b].m);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const int8_t* qa = a[t].qs + b * kQK;
        int32x4_t p = Mul::Dot(vdupq_n_s32(0), q[0], vld1q_s8(qa));
        p = Mul::Dot(p, q[1], vld1q_s8(qa + 16));
        acc[t] = acc[t] + (dw * a[t].d[b]) * static_cast<float>(vaddvq_s32(p));
        if constexpr (Decoder::kHasMin) summs[t] = summs[t] + mw * a[t].s[b];
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[t * y_stride + r] = Decoder::kHasMin ? acc[t] + summs[t] : acc[t];
    }
  }
}

// ---- K-quants and the 256-element i-quants against Q8_K activations. A
// decoder gives the super-block's 256 signed quants as 16 groups of 16 (group
// g = elements 16g..16g+15), the group scales and mins, and the two float
// factors. For the i-quants (kIq) their power of two, Final(), multiplies the
// row's sum at the end (iq_decode.h).

struct NeonSuperBlock {
  int8x16_t q[16];
  int16_t scale[16];
  int16_t min[16];
  float d;
  float dmin;
};

// The scales and mins of a Q4_K / Q5_K super-block: sub-block j (32
// elements) covers groups 2j and 2j + 1.
inline void Q45KScales(const uint8_t* packed, NeonSuperBlock* s) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    GetScaleMinK4(j, packed, &sc, &m);
    s->scale[2 * j] = s->scale[2 * j + 1] = sc;
    s->min[2 * j] = s->min[2 * j + 1] = m;
  }
}

// Q2_K: element 32k + l of half h (l < 32) is bits 2k..2k+1 of qs[32h + l];
// each group's 4-bit scale and min share a byte.
struct NeonQ2_K {
  static constexpr bool kHasMin = true;
  static constexpr uint64_t kBytes = sizeof(BlockQ2_K);
  static constexpr bool kIq = false;
  static void Decode(const uint8_t* p, NeonSuperBlock* s) {
    const auto& b = *reinterpret_cast<const BlockQ2_K*>(p);
    const uint8x16_t m2 = vdupq_n_u8(3);
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t x0 = vld1q_u8(b.qs + 32 * h);
      const uint8x16_t x1 = vld1q_u8(b.qs + 32 * h + 16);
      for (int k = 0; k < 4; ++k) {
        const int8x16_t shift = vdupq_n_s8(static_cast<int8_t>(-2 * k));
        s->q[8 * h + 2 * k] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(x0, shift), m2));
        s->q[8 * h + 2 * k + 1] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(x1, shift), m2));
      }
    }
    for (int g = 0; g < 16; ++g) {
      s->scale[g] = b.scales[g] & 0xF;
      s->min[g] = b.scales[g] >> 4;
    }
    s->d = HalfToFloat(b.d);
    s->dmin = HalfToFloat(b.dmin);
  }
};

// Q3_K: as Q2_K's two bits, plus bit 4h + k of hmask[l] as the third (its
// absence subtracts 4); 6-bit signed scales.
struct NeonQ3_K {
  static constexpr bool kHasMin = false;
  static constexpr uint64_t kBytes = sizeof(BlockQ3_K);
  static constexpr bool kIq = false;
  static void Decode(const uint8_t* p, NeonSuperBlock* s) {
    const auto& b = *reinterpret_cast<const BlockQ3_K*>(p);
    const uint8x16_t m2 = vdupq_n_u8(3);
    const uint8x16_t bit2 = vdupq_n_u8(4);
    const int8x16_t four = vdupq_n_s8(4);
    const uint8x16_t hm0 = vld1q_u8(b.hmask);
    const uint8x16_t hm1 = vld1q_u8(b.hmask + 16);
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t x0 = vld1q_u8(b.qs + 32 * h);
      const uint8x16_t x1 = vld1q_u8(b.qs + 32 * h + 16);
      for (int k = 0; k < 4; ++k) {
        const int8x16_t shift = vdupq_n_s8(static_cast<int8_t>(-2 * k));
        // hmask bit 4h + k moved to bit 2.
        const int8x16_t hshift = vdupq_n_s8(static_cast<int8_t>(2 - (4 * h + k)));
        const uint8x16_t v0 =
            vorrq_u8(vandq_u8(vshlq_u8(x0, shift), m2), vandq_u8(vshlq_u8(hm0, hshift), bit2));
        const uint8x16_t v1 =
            vorrq_u8(vandq_u8(vshlq_u8(x1, shift), m2), vandq_u8(vshlq_u8(hm1, hshift), bit2));
        s->q[8 * h + 2 * k] = vsubq_s8(vreinterpretq_s8_u8(v0), four);
        s->q[8 * h + 2 * k + 1] = vsubq_s8(vreinterpretq_s8_u8(v1), four);
      }
    }
    int8_t sc[16];
    UnpackQ3KScales(b.scales, sc);
    for (int g = 0; g < 16; ++g) {
      s->scale[g] = sc[g];
      s->min[g] = 0;
    }
    s->d = HalfToFloat(b.d);
    s->dmin = 0.0f;
  }
};

struct NeonQ4_K {
  static constexpr bool kHasMin = true;
  static constexpr bool kIq = false;
  static constexpr uint64_t kBytes = sizeof(BlockQ4_K);
  // Chunk c of 32 bytes: low nibbles are elements 64c..64c+31, high nibbles
  // 64c+32..64c+63.
  static void Decode(const uint8_t* p, NeonSuperBlock* s) {
    const auto& b = *reinterpret_cast<const BlockQ4_K*>(p);
    for (int c = 0; c < 4; ++c) {
      const uint8x16_t x0 = vld1q_u8(b.qs + 32 * c);
      const uint8x16_t x1 = vld1q_u8(b.qs + 32 * c + 16);
      s->q[4 * c + 0] = LowNibbles(x0);
      s->q[4 * c + 1] = LowNibbles(x1);
      s->q[4 * c + 2] = HighNibbles(x0);
      s->q[4 * c + 3] = HighNibbles(x1);
    }
    Q45KScales(b.scales, s);
    s->d = HalfToFloat(b.d);
    s->dmin = HalfToFloat(b.dmin);
  }
};

// Bit `bit` of each byte of qh, moved to bit 4 (vshlq_u8 shifts right for a
// negative count).
inline uint8x16_t FifthBit(uint8x16_t qh, int bit) {
  return vandq_u8(vshlq_u8(qh, vdupq_n_s8(static_cast<int8_t>(4 - bit))), vdupq_n_u8(0x10));
}

struct NeonQ5_K {
  static constexpr bool kHasMin = true;
  static constexpr bool kIq = false;
  static constexpr uint64_t kBytes = sizeof(BlockQ5_K);
  // As Q4_K, plus the fifth bit of element l of chunk c from bit 2c (low
  // nibbles) or 2c + 1 (high nibbles) of qh[l].
  static void Decode(const uint8_t* p, NeonSuperBlock* s) {
    const auto& b = *reinterpret_cast<const BlockQ5_K*>(p);
    const uint8x16_t h0 = vld1q_u8(b.qh);
    const uint8x16_t h1 = vld1q_u8(b.qh + 16);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const uint8x16_t x0 = vld1q_u8(b.qs + 32 * c);
      const uint8x16_t x1 = vld1q_u8(b.qs + 32 * c + 16);
      s->q[4 * c + 0] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(x0, m4), FifthBit(h0, 2 * c)));
      s->q[4 * c + 1] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(x1, m4), FifthBit(h1, 2 * c)));
      s->q[4 * c + 2] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(x0, 4), FifthBit(h0, 2 * c + 1)));
      s->q[4 * c + 3] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(x1, 4), FifthBit(h1, 2 * c + 1)));
    }
    Q45KScales(b.scales, s);
    s->d = HalfToFloat(b.d);
    s->dmin = HalfToFloat(b.dmin);
  }
};

struct NeonQ6_K {
  static constexpr bool kHasMin = false;
  static constexpr bool kIq = false;
  static constexpr uint64_t kBytes = sizeof(BlockQ6_K);
  // Half h (128 elements) from ql[64h..64h+63] and qh[32h..32h+31]: element
  // l < 32 is ql[l]'s low nibble with qh[l] bits 0-1, l + 32 ql[l + 32]'s low
  // nibble with bits 2-3, l + 64 ql[l]'s high nibble with bits 4-5, l + 96
  // ql[l + 32]'s high nibble with bits 6-7; minus 32.
  static void Decode(const uint8_t* p, NeonSuperBlock* s) {
    const auto& b = *reinterpret_cast<const BlockQ6_K*>(p);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const uint8x16_t m2 = vdupq_n_u8(0x30);
    const int8x16_t offset = vdupq_n_s8(32);
    for (int h = 0; h < 2; ++h) {
      for (int half16 = 0; half16 < 2; ++half16) {
        const uint8x16_t a = vld1q_u8(b.ql + 64 * h + 16 * half16);
        const uint8x16_t c = vld1q_u8(b.ql + 64 * h + 32 + 16 * half16);
        const uint8x16_t hb = vld1q_u8(b.qh + 32 * h + 16 * half16);
        const uint8x16_t v0 = vorrq_u8(vandq_u8(a, m4), vandq_u8(vshlq_n_u8(hb, 4), m2));
        const uint8x16_t v1 = vorrq_u8(vandq_u8(c, m4), vandq_u8(vshlq_n_u8(hb, 2), m2));
        const uint8x16_t v2 = vorrq_u8(vshrq_n_u8(a, 4), vandq_u8(hb, m2));
        const uint8x16_t v3 = vorrq_u8(vshrq_n_u8(c, 4), vandq_u8(vshrq_n_u8(hb, 2), m2));
        int8x16_t* q = s->q + 8 * h + half16;
        q[0] = vsubq_s8(vreinterpretq_s8_u8(v0), offset);
        q[2] = vsubq_s8(vreinterpretq_s8_u8(v1), offset);
        q[4] = vsubq_s8(vreinterpretq_s8_u8(v2), offset);
        q[6] = vsubq_s8(vreinterpretq_s8_u8(v3), offset);
      }
    }
    for (int g = 0; g < 16; ++g) {
      s->scale[g] = b.scales[g];
      s->min[g] = 0;
    }
    s->d = HalfToFloat(b.d);
    s->dmin = 0.0f;
  }
};

// The i-quants through the portable decoders' integer form (iq_decode.h):
// the grids and signs unpack in scalar code, the products run in NEON.
template <TensorType kType, typename Block>
struct NeonIq {
  static constexpr bool kHasMin = false;
  static constexpr uint64_t kBytes = sizeof(Block);
  static constexpr bool kIq = true;
  static float Final() {
    static const float final_scale = GetIqTypeInfo(kType).final_scale;
    return final_scale;
  }
  static void Decode(const uint8_t* p, NeonSuperBlock* s) {
    static const IqDecodeFn decode = GetIqTypeInfo(kType).decode;
    IqSuperBlock iq;
    decode(p, &iq);
    for (int g = 0; g < 16; ++g) {
      s->q[g] = vld1q_s8(iq.q + 16 * g);
      s->scale[g] = iq.scale[g];
      s->min[g] = 0;
    }
    s->d = iq.d;
    s->dmin = 0.0f;
  }
};

// Σ_g scale[g] * Σ_{e in g} q[e] * qa[e] over one super-block: exact in int32
// (|scale| <= 127, |q| <= 63, |qa| <= 127: under 2^27).
template <typename Mul>
inline int32_t ScaledSum(const NeonSuperBlock& s, const int8_t* qa) {
  int32x4_t isum = vdupq_n_s32(0);
  for (int g = 0; g < 16; ++g) {
    const int32x4_t p = Mul::Dot(vdupq_n_s32(0), s.q[g], vld1q_s8(qa + 16 * g));
    isum = vmlaq_n_s32(isum, p, s.scale[g]);
  }
  return vaddvq_s32(isum);
}

// Σ_g min[g] * bsums[g] over one super-block's 16 group sums of activations.
inline int32_t MinSum(const NeonSuperBlock& s, const int16_t* bsums) {
  const int16x8_t m0 = vld1q_s16(s.min), m1 = vld1q_s16(s.min + 8);
  const int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
  int32x4_t sum = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
  sum = vmlal_high_s16(sum, m0, b0);
  sum = vmlal_s16(sum, vget_low_s16(m1), vget_low_s16(b1));
  sum = vmlal_high_s16(sum, m1, b1);
  return vaddvq_s32(sum);
}

template <typename Mul, typename Decoder>
void NeonTileK(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
               const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  QuantizedRow a[kMaxTokenTile];
  QuantizedRow::AtEach(layout, act, n_tokens, a);
  const int64_t n_blocks = layout.cols / kQK_K;
  const int64_t ahead = RowsAhead(row_bytes);
  NeonSuperBlock s;
  for (int64_t r = 0; r < n_rows; ++r) {
    PrefetchRow(w, (r + ahead) * row_bytes, row_bytes);
    const uint8_t* row = w + r * row_bytes;
    float acc[kMaxTokenTile] = {};
    for (int64_t b = 0; b < n_blocks; ++b) {
      Decoder::Decode(row + b * Decoder::kBytes, &s);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const int32_t isum = ScaledSum<Mul>(s, a[t].qs + b * kQK_K);
        acc[t] = acc[t] + (s.d * a[t].d[b]) * static_cast<float>(isum);
        if constexpr (Decoder::kHasMin) {
          const int32_t summs = MinSum(s, a[t].bsums + 16 * b);
          acc[t] = acc[t] - (s.dmin * a[t].d[b]) * static_cast<float>(summs);
        }
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
      if constexpr (Decoder::kIq) {
        y[t * y_stride + r] = acc[t] * Decoder::Final();
      } else {
        y[t * y_stride + r] = acc[t];
      }
    }
  }
}

// The set: the portable one's decoders, NEON tiles for every quantized type,
// NEON attention over q8_0 rows (attend_neon.h).
template <typename Mul>
KernelSet MakeNeonKernelSet(const char* name) {
  KernelSet k = PortableKernels();
  k.name = name;
  k.float_tile = &NeonFloatTile;
  k.dot = &NeonFloatDot;
  k.attend_dots_q8_0 = &NeonAttendDotsQ8;
  k.attend_values_q8_0 = &NeonAttendValuesQ8;
  k.quant_tile[Slot(TensorType::kQ8_0)] = &NeonTile32<Mul, NeonQ8_0>;
  k.quant_tile[Slot(TensorType::kQ4_0)] = &NeonTile32<Mul, NeonQ4_0>;
  k.quant_tile[Slot(TensorType::kQ4_1)] = &NeonTile32<Mul, NeonQ4_1>;
  k.quant_tile[Slot(TensorType::kQ5_0)] = &NeonTile32<Mul, NeonQ5_0>;
  k.quant_tile[Slot(TensorType::kQ5_1)] = &NeonTile32<Mul, NeonQ5_1>;
  k.quant_tile[Slot(TensorType::kMXFP4)] = &NeonTile32<Mul, NeonMXFP4>;
  k.quant_tile[Slot(TensorType::kIQ4_NL)] = &NeonTile32<Mul, NeonIQ4_NL>;
  k.quant_tile[Slot(TensorType::kQ4_K)] = &NeonTileK<Mul, NeonQ4_K>;
  k.quant_tile[Slot(TensorType::kQ5_K)] = &NeonTileK<Mul, NeonQ5_K>;
  k.quant_tile[Slot(TensorType::kQ6_K)] = &NeonTileK<Mul, NeonQ6_K>;
  k.quant_tile[Slot(TensorType::kQ2_K)] = &NeonTileK<Mul, NeonQ2_K>;
  k.quant_tile[Slot(TensorType::kQ3_K)] = &NeonTileK<Mul, NeonQ3_K>;
  k.quant_tile[Slot(TensorType::kIQ2_XXS)] =
      &NeonTileK<Mul, NeonIq<TensorType::kIQ2_XXS, BlockIQ2_XXS>>;
  k.quant_tile[Slot(TensorType::kIQ2_XS)] =
      &NeonTileK<Mul, NeonIq<TensorType::kIQ2_XS, BlockIQ2_XS>>;
  k.quant_tile[Slot(TensorType::kIQ2_S)] = &NeonTileK<Mul, NeonIq<TensorType::kIQ2_S, BlockIQ2_S>>;
  k.quant_tile[Slot(TensorType::kIQ3_XXS)] =
      &NeonTileK<Mul, NeonIq<TensorType::kIQ3_XXS, BlockIQ3_XXS>>;
  k.quant_tile[Slot(TensorType::kIQ3_S)] = &NeonTileK<Mul, NeonIq<TensorType::kIQ3_S, BlockIQ3_S>>;
  k.quant_tile[Slot(TensorType::kIQ1_S)] = &NeonTileK<Mul, NeonIq<TensorType::kIQ1_S, BlockIQ1_S>>;
  k.quant_tile[Slot(TensorType::kIQ1_M)] = &NeonTileK<Mul, NeonIq<TensorType::kIQ1_M, BlockIQ1_M>>;
  k.quant_tile[Slot(TensorType::kIQ4_XS)] =
      &NeonTileK<Mul, NeonIq<TensorType::kIQ4_XS, BlockIQ4_XS>>;
  return k;
}

}  // namespace
}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_NEON_KERNELS_H_
