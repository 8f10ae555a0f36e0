// Building blocks of the AVX-512 VNNI K-quant GEMM tiles (gemm_avx512.cc,
// gemm_avx512_wide.cc): super-block decoders for Q4_K, Q5_K and Q6_K, the
// scale layout their integer sums use, and the lane reduction. Internal to
// model/ops; include only from translation units compiled with the AVX-512
// flags (everything here is forced inline, see avx2_common.h).
//
// The integer scheme (per super-block and (row, token) pair) is described at
// the top of gemm_avx512.cc; the wide tiles of gemm_avx512_wide.cc form the
// same exact integers and run the same float update per output.
#ifndef COLIBRI_MODEL_OPS_GEMM_AVX512_BLOCKS_H_
#define COLIBRI_MODEL_OPS_GEMM_AVX512_BLOCKS_H_

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "model/ops/activation_quant.h"
#include "model/ops/avx2_common.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal::gemm_avx512 {

COLIBRI_INLINE __m512i Broadcast32Bytes(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

COLIBRI_INLINE __m512i HalfBytes(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(lo)),
                            _mm256_set1_epi8(static_cast<char>(hi)), 1);
}

COLIBRI_INLINE __m512i HalfWords(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)),
                            _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
}

// Decoders. Quants(p): part p's 64 unsigned quants in element order.
// GroupScales(): the 16 int16 scales of the 16-element groups. MinFactor():
// the 16 int16 mins per group (types with mins). d(), dmin(): block factors.

template <bool kFiveBit>
struct Q45K {
  using Block = std::conditional_t<kFiveBit, BlockQ5_K, BlockQ4_K>;
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;
  const Block& b;
  __m128i packed;  // 8 scales, 8 mins
  COLIBRI_INLINE explicit Q45K(const Block& block)
      : b(block), packed(avx2::K4ScalesMins(block.scales)) {}
  // Low nibbles of qs[32p..32p+31] (sub-block 2p), then their high nibbles
  // (sub-block 2p + 1); for Q5_K bit 2p resp. 2p + 1 of qh[l] is bit 4.
  COLIBRI_INLINE __m512i Quants(int p) const {
    const __m512i q = Broadcast32Bytes(b.qs + 32 * p);
    const __m512i u =
        _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xFFFF0000u, q, 4), _mm512_set1_epi8(0x0F));
    if constexpr (!kFiveBit) {
      return u;
    } else {
      const __mmask64 set =
          _mm512_test_epi8_mask(Broadcast32Bytes(b.qh), HalfBytes(1 << (2 * p), 1 << (2 * p + 1)));
      return _mm512_mask_add_epi8(u, set, u, _mm512_set1_epi8(0x10));
    }
  }
  COLIBRI_INLINE __m256i GroupScales() const {
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(packed, packed));
  }
  COLIBRI_INLINE __m256i MinFactor() const {
    return _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(packed, packed));
  }
  COLIBRI_INLINE float d() const { return avx2::Half(b.d); }
  COLIBRI_INLINE float dmin() const { return avx2::Half(b.dmin); }
};

struct Q6K {
  using Block = BlockQ6_K;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 32;
  const Block& b;
  COLIBRI_INLINE explicit Q6K(const Block& block) : b(block) {}
  // Part p = 2 * half + k2: low (k2 = 0) or high (k2 = 1) nibbles of
  // ql[64 half..64 half + 63], with bits 4 k2 + 0, 1 (low 256 bits) or
  // 4 k2 + 2, 3 (high) of qh[32 half + l] as bits 4, 5.
  COLIBRI_INLINE __m512i Quants(int p) const {
    const int half = p / 2;
    const __m512i l = _mm512_loadu_si512(b.ql + 64 * half);
    const __m512i h = Broadcast32Bytes(b.qh + 32 * half);
    __m512i low, high;
    if (p % 2 == 0) {
      low = l;
      high = _mm512_sllv_epi16(h, HalfWords(4, 2));
    } else {
      low = _mm512_srli_epi16(l, 4);
      high = _mm512_srlv_epi16(h, HalfWords(0, 2));
    }
    high = _mm512_and_si512(high, _mm512_set1_epi8(0x30));
    return _mm512_ternarylogic_epi32(low, high, _mm512_set1_epi8(0x0F), 0xEC);
  }
  COLIBRI_INLINE __m256i GroupScales() const {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  }
  COLIBRI_INLINE __m256i MinFactor() const { return _mm256_setzero_si256(); }
  COLIBRI_INLINE float d() const { return avx2::Half(b.d); }
  COLIBRI_INLINE float dmin() const { return 0.0f; }
};

// int16 index vectors that spread the 16 group scales over vpackssdw's
// layout: 128-bit lane k of packs(v_a, v_b) holds four quads of group
// 4a' + k, then four of group 4b' + k.
alignas(64) inline constexpr int16_t kScaleIndex01[32] = {
    0, 0, 0, 0, 4, 4, 4, 4, 1, 1, 1, 1, 5, 5, 5, 5, 2, 2, 2, 2, 6, 6, 6, 6, 3, 3, 3, 3, 7, 7, 7, 7};
alignas(64) inline constexpr int16_t kScaleIndex23[32] = {
    8,  8,  8,  8,  12, 12, 12, 12, 9,  9,  9,  9,  13, 13, 13, 13,
    10, 10, 10, 10, 14, 14, 14, 14, 11, 11, 11, 11, 15, 15, 15, 15};

// One vector of the 16 lane totals of v[0..15]: lane i = Σ of v[i]'s lanes.
COLIBRI_INLINE __m512i SumLanes16(const __m512i* v) {
  __m512i t[8], u[4];
  for (int k = 0; k < 8; ++k) {
    t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                            _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
  }
  for (int k = 0; k < 4; ++k) {
    u[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]),
                            _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
  }
  // u[k], 128-bit lane L: the lane-L sums of v[4k..4k+3].
  const __m512i x = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i y = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Tokens a wide tile takes at most, and at least (fewer go to the 4 x 4
// tiles, which do less work per token for so few).
inline constexpr int kWideTokens = 16;
inline constexpr int kWideMinTokens = 5;

// Wide tiles: y[t * y_stride + r] for r < n_rows (any count) and t <
// n_tokens (1..kWideTokens; meant for kWideMinTokens and up), each
// super-block of a weight row decoded once for all n_tokens tokens. Bitwise the 4 x 4 tiles'
// results. Thread-safe (per-thread scratch). D: Q45K<false>, Q45K<true> or Q6K.
template <typename D>
void WideTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
              const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace colibri::ops::internal::gemm_avx512

#endif  // COLIBRI_MODEL_OPS_GEMM_AVX512_BLOCKS_H_
