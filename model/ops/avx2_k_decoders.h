// AVX2 decoders of the K-quant (Q2_K to Q6_K) super-blocks, shared by the per-row
// kernels (vec_dot_avx2_k.cc) and the GEMM tiles (gemm_avx2.cc). Include only
// from translation units compiled with -mavx2 -mfma -mf16c (see
// avx2_common.h: every function here is forced inline for that reason).
//
// A decoder is constructed from one super-block and then yields, for chunk c
// (elements 32c..32c+31), the unsigned quants u (Quants) and their int16
// scales (Scales); BsumFactor() gives the int16 factors of the 16 activation
// group sums (the mins, or the group scales when kOffset is not 0: the true
// quant is u - kOffset).
#ifndef COLIBRI_MODEL_OPS_AVX2_K_DECODERS_H_
#define COLIBRI_MODEL_OPS_AVX2_K_DECODERS_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "model/ops/avx2_common.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/weight_layout.h"

namespace colibri::ops::internal::avx2 {

// int16 word `lo` of v's low lane repeated across the low lane and word `hi`
// of the high lane across the high lane. lo and hi are constants once the
// chunk loop is unrolled, so the shuffle mask is a constant.
COLIBRI_INLINE __m256i BroadcastWords(__m256i v, int lo, int hi) {
  const char a = static_cast<char>(2 * lo), b = static_cast<char>(2 * lo + 1);
  const char c = static_cast<char>(2 * hi), d = static_cast<char>(2 * hi + 1);
  return _mm256_shuffle_epi8(v, _mm256_setr_epi8(a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, c,
                                                 d, c, d, c, d, c, d, c, d, c, d, c, d, c, d));
}

// v's bytes with bit `from` of each (and the bits above it) moved to bit kTo
// by one 16-bit shift, none when they are equal; `from` is a constant once
// loops are unrolled. A shift by s carries bits across a word's two bytes:
// left, into the s lowest bits of the high byte; right, into the s highest
// bits of the low byte. Masking the w moved bits (kTo .. kTo + w - 1) drops
// those carries when s <= kTo (left) and kTo + w <= 8 - s (right), which
// every caller's shifts satisfy (Q3_K: w 1, kTo 2, s <= 5; Q5_K: w 1, kTo 4,
// s <= 4; Q6_K: w 2, kTo 4, s <= 4 left, 2 right).
template <int kTo>
COLIBRI_INLINE __m256i ShiftBitTo(__m256i v, int from) {
  if (from < kTo) return _mm256_slli_epi16(v, kTo - from);
  if (from > kTo) return _mm256_srli_epi16(v, from - kTo);
  return v;
}

// 16 signed 8-bit group scales, widened for Chunk(): the int16 scales of
// groups 0..7 in both lanes of `low`, of groups 8..15 in both lanes of `high`.
struct GroupScales {
  __m256i low, high;
  COLIBRI_INLINE explicit GroupScales(__m128i scales8) {
    const __m256i s16 = _mm256_cvtepi8_epi16(scales8);
    low = _mm256_permute4x64_epi64(s16, 0x44);
    high = _mm256_permute4x64_epi64(s16, 0xEE);
  }
  // Chunk c covers groups 2c (first 16 elements) and 2c + 1.
  COLIBRI_INLINE __m256i Chunk(int c) const {
    return BroadcastWords(c < 4 ? low : high, (2 * c) % 8, (2 * c + 1) % 8);
  }
};

// Q4_K / Q5_K: the 8 6-bit scales as int16 in both lanes, and the 8 6-bit
// mins each repeated for the two 16-element groups of its sub-block.
struct K4Scales {
  __m256i scales;
  __m256i mins;
};

// v: K4ScalesMins of the block's packed scales.
COLIBRI_INLINE K4Scales UnpackK4(__m128i v) {
  const __m128i m8 = _mm_unpackhi_epi8(v, v);  // m0 m0 m1 m1 ... m7 m7
  return K4Scales{_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(v)), _mm256_cvtepu8_epi16(m8)};
}

template <bool kFiveBit>
struct Q45KAvx2 {
  using Block = std::conditional_t<kFiveBit, BlockQ5_K, BlockQ4_K>;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  const Block& b;
  __m128i scales_mins;  // K4ScalesMins: the 8 scale bytes, then the 8 mins
  K4Scales k4;
  COLIBRI_INLINE explicit Q45KAvx2(const Block& block)
      : b(block), scales_mins(K4ScalesMins(block.scales)), k4(UnpackK4(scales_mins)) {}
  COLIBRI_INLINE __m256i Quants(int c) const {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c / 2)));
    __m256i u = _mm256_and_si256(c % 2 == 0 ? q : _mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
    if constexpr (kFiveBit) {
      // Bit c of qh to bit 4 in one shift (ShiftBitTo), masked.
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
      u = _mm256_or_si256(u, _mm256_and_si256(ShiftBitTo<4>(h, c), _mm256_set1_epi8(0x10)));
    }
    return u;
  }
  COLIBRI_INLINE __m256i Scales(int c) const { return BroadcastWords(k4.scales, c, c); }
  COLIBRI_INLINE __m256i BsumFactor() const { return k4.mins; }
  COLIBRI_INLINE float d() const { return Half(b.d); }
  COLIBRI_INLINE float dmin() const { return Half(b.dmin); }
};

using Q4_KAvx2 = Q45KAvx2<false>;
using Q5_KAvx2 = Q45KAvx2<true>;

struct Q6_KAvx2 {
  using Block = BlockQ6_K;
  static constexpr int kOffset = 32;
  static constexpr bool kHasMin = false;
  const Block& b;
  __m128i scales8;
  GroupScales scales;
  COLIBRI_INLINE explicit Q6_KAvx2(const Block& block)
      : b(block),
        scales8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block.scales))),
        scales(scales8) {}
  // Chunk c = 4 * half + k: low nibbles of ql[64 half + 32 (k % 2)] (high
  // nibbles for k >= 2), and bits 2k, 2k+1 of qh[32 half] as bits 4, 5 (one
  // shift moves both; the mask keeps the two).
  COLIBRI_INLINE __m256i Quants(int c) const {
    const int half = c / 4, k = c % 4;
    const __m256i l =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * half + 32 * (k % 2)));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * half));
    const __m256i low =
        _mm256_and_si256(k < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0F));
    return _mm256_or_si256(low, _mm256_and_si256(ShiftBitTo<4>(h, 2 * k), _mm256_set1_epi8(0x30)));
  }
  COLIBRI_INLINE __m256i Scales(int c) const { return scales.Chunk(c); }
  COLIBRI_INLINE __m256i BsumFactor() const { return _mm256_cvtepi8_epi16(scales8); }
  COLIBRI_INLINE float d() const { return Half(b.d); }
  COLIBRI_INLINE float dmin() const { return 0.0f; }
};

struct Q2_KAvx2 {
  using Block = BlockQ2_K;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  const Block& b;
  __m128i packed;
  GroupScales scales;
  COLIBRI_INLINE explicit Q2_KAvx2(const Block& block)
      : b(block),
        packed(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block.scales))),
        scales(_mm_and_si128(packed, _mm_set1_epi8(0x0F))) {}
  COLIBRI_INLINE __m256i Quants(int c) const {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c / 4)));
    return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (c % 4)), _mm256_set1_epi8(3));
  }
  COLIBRI_INLINE __m256i Scales(int c) const { return scales.Chunk(c); }
  COLIBRI_INLINE __m256i BsumFactor() const {
    return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
  }
  COLIBRI_INLINE float d() const { return Half(b.d); }
  COLIBRI_INLINE float dmin() const { return Half(b.dmin); }
};

// The 16 6-bit Q3_K scales, unpacked four bytes at a time (same values as
// UnpackQ3KScales), minus 32. The four words go to the vector register
// directly: stored and reloaded as 16 bytes they stalled the load (four
// 4-byte stores cannot be forwarded to one 16-byte load).
COLIBRI_INLINE __m128i Q3KScales(const uint8_t* packed) {
  uint32_t a0, a1, tmp;
  std::memcpy(&a0, packed, 4);
  std::memcpy(&a1, packed + 4, 4);
  std::memcpy(&tmp, packed + 8, 4);
  const uint32_t kmask1 = 0x03030303u, kmask2 = 0x0f0f0f0fu;
  const uint32_t w0 = (a0 & kmask2) | (((tmp >> 0) & kmask1) << 4);
  const uint32_t w1 = (a1 & kmask2) | (((tmp >> 2) & kmask1) << 4);
  const uint32_t w2 = ((a0 >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  const uint32_t w3 = ((a1 >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  const __m128i v = _mm_setr_epi32(static_cast<int>(w0), static_cast<int>(w1),
                                   static_cast<int>(w2), static_cast<int>(w3));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

struct Q3_KAvx2 {
  using Block = BlockQ3_K;
  static constexpr int kOffset = 4;
  static constexpr bool kHasMin = false;
  const Block& b;
  __m128i scales8;
  GroupScales scales;
  __m256i hmask;
  COLIBRI_INLINE explicit Q3_KAvx2(const Block& block)
      : b(block),
        scales8(Q3KScales(block.scales)),
        scales(scales8),
        hmask(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.hmask))) {}
  // u = low 2 bits | hmask bit c << 2 (the quant plus 4).
  COLIBRI_INLINE __m256i Quants(int c) const {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c / 4)));
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (c % 4)), _mm256_set1_epi8(3));
    return _mm256_or_si256(low, _mm256_and_si256(ShiftBitTo<2>(hmask, c), _mm256_set1_epi8(4)));
  }
  COLIBRI_INLINE __m256i Scales(int c) const { return scales.Chunk(c); }
  COLIBRI_INLINE __m256i BsumFactor() const { return _mm256_cvtepi8_epi16(scales8); }
  COLIBRI_INLINE float d() const { return Half(b.d); }
  COLIBRI_INLINE float dmin() const { return 0.0f; }
};

// The 6-bit scales and mins of one super-block of 8 rows in the
// kInterleaved8 layout (weight_layout.h's Q4KRows8::scales), unpacked with
// the rows in byte order: byte 8 c + r of sc[h] is the scale of chunk 4 h + c
// of row r, of mn[h] its min (vec_dot.h's GetScaleMinK4 on 8 rows at once).
// For the interleaved tiles of interleaved_avx2.cc and interleaved_avx512.cc.
struct Rows8Scales {
  __m256i sc[2];
  __m256i mn[2];
  COLIBRI_INLINE explicit Rows8Scales(const uint8_t (&scales)[12][8]) {
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[0]));
    const __m256i q4 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[4]));
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales[8]));
    const __m256i low6 = _mm256_set1_epi8(0x3F), low4 = _mm256_set1_epi8(0x0F);
    // Bits 6 and 7 of a byte to bits 4 and 5: a 16-bit shift by 2 brings in
    // bits of the byte above only at bits 6 and 7, which the mask drops.
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    sc[0] = _mm256_and_si256(q0, low6);
    mn[0] = _mm256_and_si256(q4, low6);
    sc[1] = _mm256_or_si256(_mm256_and_si256(q8, low4),
                            _mm256_and_si256(_mm256_srli_epi16(q0, 2), bits45));
    mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q8, 4), low4),
                            _mm256_and_si256(_mm256_srli_epi16(q4, 2), bits45));
  }
  // Chunk c's scales as 16 words, row r's in words 2r and 2r+1.
  COLIBRI_INLINE __m256i Scale(int c) const {
    const __m256i v = sc[c / 4];
    const __m128i half = (c % 4) < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
    const __m128i dup = c % 2 == 0 ? _mm_unpacklo_epi8(half, half) : _mm_unpackhi_epi8(half, half);
    return _mm256_cvtepu8_epi16(dup);
  }
  // The scales of chunks c and c+1 (c even) as 16 words: row r's in words 2r
  // (chunk c) and 2r+1 (chunk c+1).
  COLIBRI_INLINE __m256i ScalePair(int c) const { return Pair(sc, c); }
  // The same for the mins.
  COLIBRI_INLINE __m256i MinPair(int c) const { return Pair(mn, c); }
  // Lane r: Σ_c min(c, r) * (bsum of chunk c) over a token's super-block
  // (bsums: its 16 sums of 16 elements; a chunk's two at most 4064).
  COLIBRI_INLINE __m256i MinSums(const int16_t* bsums) const {
    const __m128i* bs = reinterpret_cast<const __m128i*>(bsums);
    // Word c: bsum of chunk c.
    const __m256i chunk =
        _mm256_broadcastsi128_si256(_mm_hadd_epi16(_mm_loadu_si128(bs), _mm_loadu_si128(bs + 1)));
    __m256i msum = _mm256_madd_epi16(MinPair(0), _mm256_shuffle_epi32(chunk, 0x00));
    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(MinPair(2), _mm256_shuffle_epi32(chunk, 0x55)));
    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(MinPair(4), _mm256_shuffle_epi32(chunk, 0xAA)));
    return _mm256_add_epi32(msum, _mm256_madd_epi16(MinPair(6), _mm256_shuffle_epi32(chunk, 0xFF)));
  }

 private:
  COLIBRI_INLINE static __m256i Pair(const __m256i (&bytes)[2], int c) {
    const __m256i v = bytes[c / 4];
    const __m128i half = (c % 4) < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(half, _mm_srli_si128(half, 8)));
  }
};

// Lane r of dot[t]: Σ_s sc(s, r) * bsum_s over the 16 groups of super-block
// i of a Q6_K group of 8 interleaved rows (scales: Q6KRows8::scales, [p][r][h]
// for group 2p + h) against token t's 16 group sums, two groups per
// vpmaddwd, each pair of scales widened once for all NT tokens: the offset
// term of Σ sc (u - 32) a = Σ sc u a - 32 Σ_s sc_s bsum_s.
template <int NT>
COLIBRI_INLINE void Q6KBsumDots(const int8_t (&scales)[8][8][2], const QuantizedRow* a, int64_t i,
                                __m256i* dot) {
  for (int t = 0; t < NT; ++t) dot[t] = _mm256_setzero_si256();
  for (int p = 0; p < 8; ++p) {
    const __m256i pair =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales[p])));
    for (int t = 0; t < NT; ++t) {
      int32_t two;
      std::memcpy(&two, a[t].bsums + 16 * i + 2 * p, sizeof(two));
      dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(pair, _mm256_set1_epi32(two)));
    }
  }
}

// vec_dot.h's float update of 8 rows (lanes) by one super-block of a
// K-quant without mins: acc + (d * da) * float(isum - 32 * bsum_dot).
COLIBRI_INLINE __m256 AddQ6KSuperBlock8(__m256 acc, __m256 d, float da, __m256i isum,
                                        __m256i bsum_dot) {
  isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(bsum_dot, 5));
  return _mm256_add_ps(
      acc, _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(da)), _mm256_cvtepi32_ps(isum)));
}

// vec_dot.h's float update of 8 rows (lanes) by one super-block of a
// K-quant with mins: acc + (d * da) * float(isum), then - (dmin * da) *
// float(msum).
COLIBRI_INLINE __m256 AddSuperBlock8(__m256 acc, __m256 d, __m256 dmin, float da, __m256i isum,
                                     __m256i msum) {
  const __m256 dav = _mm256_set1_ps(da);
  acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d, dav), _mm256_cvtepi32_ps(isum)));
  return _mm256_sub_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dmin, dav), _mm256_cvtepi32_ps(msum)));
}

// QuantTileFn over full groups of 8 interleaved rows (weight_layout.h) for
// the K-quant tiles of interleaved_avx2.cc and interleaved_avx512.cc: each
// group against the tokens in passes of up to four, so that a group's
// weights stay in L1 across passes (passes of six or eight, which the AVX2
// by-chunk sums would allow, measured level with four for Q4_K).
// G::Block is the type's 8-row super-block, G::Group<NT, kLocality>(blk,
// nb, a, y, y_stride) one group against NT tokens.
template <typename G>
void InterleavedGroupsTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
                           const ActivationLayout& layout, int64_t n_tokens, float* y,
                           int64_t y_stride) {
  QuantizedRow a[kMaxTokenTile];
  QuantizedRow::AtEach(layout, act, n_tokens, a);
  const int64_t nb = layout.cols / kQK_K;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kInterleaveRows) {
    const auto* blk = reinterpret_cast<const typename G::Block*>(w + r0 * row_bytes);
    float* yr = y + r0;
    if (n_tokens == 1) {
      G::template Group<1, kReadOnce>(blk, nb, a, yr, y_stride);
      continue;
    }
    int64_t t0 = 0;
    for (; t0 + 4 <= n_tokens; t0 += 4) {
      G::template Group<4, 3>(blk, nb, a + t0, yr + t0 * y_stride, y_stride);
    }
    switch (n_tokens - t0) {
      case 3:
        G::template Group<3, 3>(blk, nb, a + t0, yr + t0 * y_stride, y_stride);
        break;
      case 2:
        G::template Group<2, 3>(blk, nb, a + t0, yr + t0 * y_stride, y_stride);
        break;
      case 1:
        G::template Group<1, 3>(blk, nb, a + t0, yr + t0 * y_stride, y_stride);
        break;
      default:
        break;
    }
  }
}

}  // namespace colibri::ops::internal::avx2

#endif  // COLIBRI_MODEL_OPS_AVX2_K_DECODERS_H_
