// AVX2 kernels for the 256-element i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS) against Q8_K activations.
//
// Each 32-weight sub-block is decoded in registers to the integer form of
// iq_decode.h (int8 weights, an int16 scale per 16 weights) and dotted with
// each token's int8 activations: |q| and |qa| are at most 127, so
// vpmaddubsw's pair sums (at most 2 * 127 * 127) never saturate, and vpmaddwd
// by the scales yields exact int32 sums. The float part per super-block is
// vec_dot.h's.
#include <immintrin.h>

#include <cstring>

#include "model/ops/avx2_common.h"
#include "model/ops/iq_decode.h"
#include "model/ops/iq_grids.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal::avx2 {
namespace {

// ---- The grid types decoded in registers, 32 weights (one sub-block) at a
// time: four grid entries and four sign masks as 64-bit lanes, negated where
// the mask is set ((g ^ m) - m per byte). The index and scale logic restates
// iq_decode.cc's; the kernel-set tests hold the two to the same integers.

COLIBRI_INLINE uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

COLIBRI_INLINE __m256i Signed4(const uint64_t* masks, uint64_t e0, uint64_t e1, uint64_t e2,
                               uint64_t e3, int s0, int s1, int s2, int s3) {
  const __m256i g = _mm256_setr_epi64x(static_cast<int64_t>(e0), static_cast<int64_t>(e1),
                                       static_cast<int64_t>(e2), static_cast<int64_t>(e3));
  const __m256i m =
      _mm256_setr_epi64x(static_cast<int64_t>(masks[s0]), static_cast<int64_t>(masks[s1]),
                         static_cast<int64_t>(masks[s2]), static_cast<int64_t>(masks[s3]));
  return _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
}

// Each decoder: d(), Chunk(c) -> 32 int8 weights of sub-block c, and the
// int16 scales of its two 16-weight halves.
struct IQ2_XXSAvx2 {
  using Block = BlockIQ2_XXS;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  static constexpr float kFinal = 0.125f;
  COLIBRI_INLINE static __m256i Chunk(const Block& b, const uint64_t* masks, int c, int* s_lo,
                                      int* s_hi) {
    const auto* qs = reinterpret_cast<const uint8_t*>(b.qs) + 8 * c;
    const uint32_t aux = Load32(qs + 4);
    *s_lo = *s_hi = static_cast<int>(2 * (aux >> 28) + 1);
    return Signed4(masks, kIq2xxsGrid[qs[0]], kIq2xxsGrid[qs[1]], kIq2xxsGrid[qs[2]],
                   kIq2xxsGrid[qs[3]], kSignsFrom7.v[aux & 127], kSignsFrom7.v[(aux >> 7) & 127],
                   kSignsFrom7.v[(aux >> 14) & 127], kSignsFrom7.v[(aux >> 21) & 127]);
  }
};

struct IQ2_XSAvx2 {
  using Block = BlockIQ2_XS;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  static constexpr float kFinal = 0.125f;
  COLIBRI_INLINE static __m256i Chunk(const Block& b, const uint64_t* masks, int c, int* s_lo,
                                      int* s_hi) {
    uint16_t v[4];
    std::memcpy(v, reinterpret_cast<const uint8_t*>(b.qs) + 8 * c, sizeof(v));
    *s_lo = 2 * (b.scales[c] & 0xF) + 1;
    *s_hi = 2 * (b.scales[c] >> 4) + 1;
    return Signed4(masks, kIq2xsGrid[v[0] & 511], kIq2xsGrid[v[1] & 511], kIq2xsGrid[v[2] & 511],
                   kIq2xsGrid[v[3] & 511], kSignsFrom7.v[v[0] >> 9], kSignsFrom7.v[v[1] >> 9],
                   kSignsFrom7.v[v[2] >> 9], kSignsFrom7.v[v[3] >> 9]);
  }
};

struct IQ2_SAvx2 {
  using Block = BlockIQ2_S;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  static constexpr float kFinal = 0.125f;
  COLIBRI_INLINE static __m256i Chunk(const Block& b, const uint64_t* masks, int c, int* s_lo,
                                      int* s_hi) {
    const uint8_t* qs = b.qs + 4 * c;
    const int h = b.qh[c];
    *s_lo = 2 * (b.scales[c] & 0xF) + 1;
    *s_hi = 2 * (b.scales[c] >> 4) + 1;
    return Signed4(masks, kIq2sGrid[qs[0] | ((h << 8) & 0x300)],
                   kIq2sGrid[qs[1] | ((h << 6) & 0x300)], kIq2sGrid[qs[2] | ((h << 4) & 0x300)],
                   kIq2sGrid[qs[3] | ((h << 2) & 0x300)], qs[32], qs[33], qs[34], qs[35]);
  }
};

struct IQ3_XXSAvx2 {
  using Block = BlockIQ3_XXS;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  static constexpr float kFinal = 0.25f;
  COLIBRI_INLINE static uint64_t Pair(const uint8_t* q) {
    return kIq3xxsGrid[q[0]] | (static_cast<uint64_t>(kIq3xxsGrid[q[1]]) << 32);
  }
  COLIBRI_INLINE static __m256i Chunk(const Block& b, const uint64_t* masks, int c, int* s_lo,
                                      int* s_hi) {
    const uint8_t* qs = b.qs + 8 * c;
    const uint32_t aux = Load32(b.qs + 64 + 4 * c);
    *s_lo = *s_hi = static_cast<int>(2 * (aux >> 28) + 1);
    return Signed4(masks, Pair(qs), Pair(qs + 2), Pair(qs + 4), Pair(qs + 6),
                   kSignsFrom7.v[aux & 127], kSignsFrom7.v[(aux >> 7) & 127],
                   kSignsFrom7.v[(aux >> 14) & 127], kSignsFrom7.v[(aux >> 21) & 127]);
  }
};

struct IQ3_SAvx2 {
  using Block = BlockIQ3_S;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  static constexpr float kFinal = 1.0f;
  COLIBRI_INLINE static uint64_t Pair(const uint8_t* q, int h, int l) {
    return kIq3sGrid[q[0] | ((h << (8 - 2 * l)) & 256)] |
           (static_cast<uint64_t>(kIq3sGrid[q[1] | ((h << (7 - 2 * l)) & 256)]) << 32);
  }
  COLIBRI_INLINE static __m256i Chunk(const Block& b, const uint64_t* masks, int c, int* s_lo,
                                      int* s_hi) {
    const uint8_t* qs = b.qs + 8 * c;
    const int h = b.qh[c];
    const uint8_t* sg = b.signs + 4 * c;
    *s_lo = *s_hi = 2 * ((b.scales[c / 2] >> (4 * (c % 2))) & 0xF) + 1;
    return Signed4(masks, Pair(qs, h, 0), Pair(qs + 2, h, 1), Pair(qs + 4, h, 2),
                   Pair(qs + 6, h, 3), sg[0], sg[1], sg[2], sg[3]);
  }
};

// IQ1_S / IQ1_M: 8 * grid ± 1 straight from the expanded tables, no signs.
COLIBRI_INLINE __m256i Iq1Chunk(const uint64_t* plus, const uint64_t* minus, const int idx[4],
                                const bool neg[4]) {
  return _mm256_setr_epi64x(static_cast<int64_t>((neg[0] ? minus : plus)[idx[0]]),
                            static_cast<int64_t>((neg[1] ? minus : plus)[idx[1]]),
                            static_cast<int64_t>((neg[2] ? minus : plus)[idx[2]]),
                            static_cast<int64_t>((neg[3] ? minus : plus)[idx[3]]));
}

struct IQ1_SAvx2 {
  using Block = BlockIQ1_S;
  static constexpr float kFinal = 0.125f;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  COLIBRI_INLINE static __m256i Chunk(const Block& b, const uint64_t* /*masks*/, int c, int* s_lo,
                                      int* s_hi) {
    uint16_t qh;
    std::memcpy(&qh, reinterpret_cast<const uint8_t*>(b.qh) + 2 * c, sizeof(qh));
    const bool n = (qh & 0x8000) != 0;
    const bool neg[4] = {n, n, n, n};
    int idx[4];
    for (int l = 0; l < 4; ++l) idx[l] = b.qs[4 * c + l] | (((qh >> (3 * l)) & 7) << 8);
    *s_lo = *s_hi = 2 * ((qh >> 12) & 7) + 1;
    return Iq1Chunk(Iq1Entries(false), Iq1Entries(true), idx, neg);
  }
};

struct IQ1_MAvx2 {
  using Block = BlockIQ1_M;
  static constexpr float kFinal = 0.125f;
  COLIBRI_INLINE static float Scale(const Block& b) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof(sc));
    return Half(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                      ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
  }
  COLIBRI_INLINE static __m256i Chunk(const Block& b, const uint64_t* /*masks*/, int c, int* s_lo,
                                      int* s_hi) {
    const uint8_t* qh = b.qh + 2 * c;
    int idx[4];
    bool neg[4];
    for (int l = 0; l < 4; ++l) {
      const int h = qh[l / 2] >> (4 * (l % 2));
      idx[l] = b.qs[4 * c + l] | ((h & 7) << 8);
      neg[l] = (h & 8) != 0;
    }
    uint16_t word;
    std::memcpy(&word, b.scales + 2 * (c / 2), sizeof(word));
    const int w = word >> (6 * (c % 2));
    *s_lo = 2 * (w & 7) + 1;
    *s_hi = 2 * ((w >> 3) & 7) + 1;
    return Iq1Chunk(Iq1Entries(false), Iq1Entries(true), idx, neg);
  }
};

template <typename D>
struct GridKernel {
  template <int T>
  static void Run(const uint8_t* row, const QuantizedRow* a, int64_t cols, float* out) {
    const auto* x = reinterpret_cast<const typename D::Block*>(row);
    const uint64_t* masks = IqSignMasks();
    float acc[T];
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    for (int64_t b = 0; b < cols / kQK_K; ++b) {
      __m256i sum[T];
      for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        int s_lo, s_hi;
        const __m256i q = D::Chunk(x[b], masks, c, &s_lo, &s_hi);
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s_hi)),
                                                _mm_set1_epi16(static_cast<int16_t>(s_lo)));
        const __m256i aq = _mm256_sign_epi8(q, q);
        for (int t = 0; t < T; ++t) {
          const __m256i av =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + b * kQK_K + 32 * c));
          const __m256i pairs = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(av, q));
          sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(pairs, scales));
        }
      }
      const float d = D::Scale(x[b]);
      for (int t = 0; t < T; ++t) {
        __m128i r =
            _mm_add_epi32(_mm256_castsi256_si128(sum[t]), _mm256_extracti128_si256(sum[t], 1));
        r = _mm_hadd_epi32(r, r);
        r = _mm_hadd_epi32(r, r);
        acc[t] = acc[t] + (d * a[t].d[b]) * static_cast<float>(_mm_cvtsi128_si32(r));
      }
    }
    for (int t = 0; t < T; ++t) out[t] = acc[t] * D::kFinal;
  }
};

// IQ4_XS decodes in registers: 32 nibbles per sub-block looked up in the
// IQ4_NL table (vpshufb), the same integers as DecodeIQ4_XS.
struct IQ4_XSKernel {
  template <int T>
  static void Run(const uint8_t* row, const QuantizedRow* a, int64_t cols, float* out) {
    const auto* x = reinterpret_cast<const BlockIQ4_XS*>(row);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    float acc[T];
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    for (int64_t b = 0; b < cols / kQK_K; ++b) {
      __m256i q[8], scales[8];
      for (int ib = 0; ib < 8; ++ib) {
        q[ib] = _mm256_shuffle_epi8(table, Nibbles32(x[b].qs + 16 * ib));
        const int ls = ((x[b].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                       (((x[b].scales_h >> (2 * ib)) & 3) << 4);
        scales[ib] = _mm256_set1_epi16(static_cast<int16_t>(ls - 32));
      }
      const float d = Half(x[b].d);
      for (int t = 0; t < T; ++t) {
        const int8_t* qa = a[t].qs + b * kQK_K;
        __m256i sum = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) {
          const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa + 32 * ib));
          const __m256i pairs =
              _mm256_maddubs_epi16(_mm256_sign_epi8(q[ib], q[ib]), _mm256_sign_epi8(av, q[ib]));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, scales[ib]));
        }
        __m128i r = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        r = _mm_hadd_epi32(r, r);
        r = _mm_hadd_epi32(r, r);
        acc[t] = acc[t] + (d * a[t].d[b]) * static_cast<float>(_mm_cvtsi128_si32(r));
      }
    }
    for (int t = 0; t < T; ++t) out[t] = acc[t];  // kFinal is 1
  }
};

}  // namespace

void FillIqKernels(KernelSet* k) {
  const KernelSet& portable = PortableKernels();  // the scalar decoders serve dequant
  for (TensorType type :
       {TensorType::kIQ2_XXS, TensorType::kIQ2_XS, TensorType::kIQ2_S, TensorType::kIQ3_XXS,
        TensorType::kIQ3_S, TensorType::kIQ1_S, TensorType::kIQ1_M, TensorType::kIQ4_XS}) {
    k->dequant[Slot(type)] = portable.dequant[Slot(type)];
  }
  k->quant_tile[Slot(TensorType::kIQ2_XXS)] = &QuantTile<GridKernel<IQ2_XXSAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ2_XS)] = &QuantTile<GridKernel<IQ2_XSAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ2_S)] = &QuantTile<GridKernel<IQ2_SAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ3_XXS)] = &QuantTile<GridKernel<IQ3_XXSAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ3_S)] = &QuantTile<GridKernel<IQ3_SAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ1_S)] = &QuantTile<GridKernel<IQ1_SAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ1_M)] = &QuantTile<GridKernel<IQ1_MAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ4_XS)] = &QuantTile<IQ4_XSKernel>;
}

}  // namespace colibri::ops::internal::avx2
