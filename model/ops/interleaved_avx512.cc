// AVX-512 VNNI tiles for Q4_K, Q5_K and Q6_K weights in the kInterleaved8
// layout (weight_layout.h), 8 rows against 1-4 tokens at a time.
//
// Why the layout: a one-token product is bound by how fast the weights
// stream from memory. The row-major 4-row tiles of gemm_avx512.cc read four
// rows 1-2 KiB apart, plus a software prefetch stream; a group of 8
// interleaved rows is one contiguous run of bytes, which streams faster even
// where the row-major tile computes faster in cache. These tiles read the
// interleaved bytes with the AVX-512 instructions (docs/benchmarks.md,
// 2026-12-06, has the rates against row order).
//
// The integers, per super-block of 8 rows. A 64-byte load holds Q4KRows8's
// qs[p][g] and qs[p][g+1] (g even): 4 quant bytes of each row for g, then
// for g+1. One vpermd puts them as (row r, g) in dword 2r and (row r, g+1) in
// 2r+1, so that the token's 8 activation bytes 4g .. 4g+7, broadcast as one
// qword, meet them in every lane. The low nibbles (chunk 2p) and the high
// nibbles (chunk 2p+1; Q5_K adds its 5th bits) each go through vpdpbusd into
// int32 lanes; after four loads (Q5_K: two) every lane holds 16 (8) products
// of one row, at most 16 * 15 * 128 = 30720 (8 * 31 * 128 = 31744) in
// magnitude, so the chunk 2p sums fit the low word and the chunk 2p+1 sums
// the high word of one dword, and a vpdpwssd by the two chunks' scales (the
// same word pair) adds Σ sc * sum for the row into its lane. Adding the two lanes of a row gives
// the row's Σ_c sc_c Σ q*qa: the exact integer every other kernel forms. The mins term and the
// float update are interleaved_avx2.cc's,
//   acc = acc + (d * da) * float(isum);  acc = acc - (dmin * da) * float(msum),
// in vec_dot.h's canonical order for the 8 rows at once, so every output is
// bitwise the other tiles' and MatMulReference's.
//
// Batches (prompts, speculative and batched decode steps) take the tokens in
// passes of up to four over each group, whose weights stay in L1 across the
// passes; the unpacking of a load serves every token of a pass. That beat
// the row-order AVX-512 tiles (the 4 x 4 and the wide ones) at every batch
// size measured on a Zen 5 (docs/benchmarks.md).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "model/ops/activation_quant.h"
#include "model/ops/avx2_common.h"
#include "model/ops/avx2_k_decoders.h"
#include "model/ops/gemm.h"
#include "model/ops/vec_dot.h"
#include "model/ops/weight_layout.h"

namespace colibri::ops::internal {
namespace interleaved_avx512 {
namespace {

// The token's 8 activation bytes at p as the qword of every lane pair.
COLIBRI_INLINE __m512i Broadcast8(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi64(v);
}

// Dword 2r + h of a load's permutation: dword r + 8h of the loaded 64 bytes
// (row r of the first group of 4 bytes per row, then of the second).
COLIBRI_INLINE __m512i RowPairs(const void* p) {
  const __m512i pair_rows = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  return _mm512_permutexvar_epi32(pair_rows, _mm512_loadu_si512(p));
}

// How a type's 8-row super-block gives the quants of loads g and g+1 (g
// even) of pair p in RowPairs order: lo the elements 64 p + 4 g' + (0..3)
// (chunk 2p), hi those 32 further on (chunk 2p+1), as unsigned bytes.
// kLoadsPerSum: the loads whose vpdpbusd sums stay within int16, each lane
// taking 4 products per load (4 loads * 4 * 15 * 128 = 30720 for Q4_K's
// 4-bit quants, 2 * 4 * 31 * 128 = 31744 for Q5_K's 5-bit ones).
struct Q4KQuants {
  using Block = Q4KRows8;
  static constexpr int kLoadsPerSum = 4;
  COLIBRI_INLINE static void Quants(const Block& b, int p, int g, __m512i* lo, __m512i* hi) {
    const __m512i q = RowPairs(b.qs[p][g]);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    *lo = _mm512_and_si512(q, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
  }
};

struct Q5KQuants {
  using Block = Q5KRows8;
  static constexpr int kLoadsPerSum = 2;
  COLIBRI_INLINE static void Quants(const Block& b, int p, int g, __m512i* lo, __m512i* hi) {
    const __m512i q = RowPairs(b.qs[p][g]);
    const __m512i h = RowPairs(b.qh[g]);
    const __m512i m4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    // Bits 2p and 2p+1 of the elements' qh bytes to bit 4 in one 16-bit
    // shift each: what crosses a byte lands below bit 4 (left) or above it
    // (right), and the mask drops it (as avx2::ShiftBitTo).
    *lo = _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_and_si512(ShiftBitTo4(h, 2 * p), bit4));
    *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                          _mm512_and_si512(ShiftBitTo4(h, 2 * p + 1), bit4));
  }

 private:
  COLIBRI_INLINE static __m512i ShiftBitTo4(__m512i v, int from) {
    if (from < 4) return _mm512_slli_epi16(v, 4 - from);
    if (from > 4) return _mm512_srli_epi16(v, from - 4);
    return v;
  }
};

// Rows 8g .. 8g+7 (blk: their nb super-blocks) against NT tokens: y[t *
// y_stride + r] for r < 8. The weights' unpacking (one vpermd, three bit
// operations per load) serves all NT tokens. kLocality: the prefetch hint
// (kReadOnce for decode).
template <typename D, int NT, int kLocality>
void K45Group(const typename D::Block* blk, int64_t nb, const QuantizedRow* a, float* y,
              int64_t y_stride) {
  using Block = typename D::Block;
  // Dwords 2r and 2r+1 of the result: dword r of a 256-bit vector.
  const __m512i both_lanes = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i zero = _mm512_setzero_si512();
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const Block& b = blk[i];
    // Two super-blocks ahead, as the AVX2 tile; past the group's end that is
    // the next group's start (groups are contiguous), or nothing that faults.
    avx2::PrefetchBytes<kLocality>(blk, (i + 2) * sizeof(Block), sizeof(Block));
    const avx2::Rows8Scales scales(b.scales);
    const int64_t at = 256 * i;
    __m512i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = zero;
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i sc =
          _mm512_permutexvar_epi32(both_lanes, _mm512_castsi256_si512(scales.ScalePair(2 * p)));
#pragma GCC unroll 2
      for (int g0 = 0; g0 < 8; g0 += 2 * D::kLoadsPerSum) {
        __m512i lo_sum[NT], hi_sum[NT];
        for (int t = 0; t < NT; ++t) lo_sum[t] = hi_sum[t] = zero;
#pragma GCC unroll 4
        for (int g = g0; g < g0 + 2 * D::kLoadsPerSum; g += 2) {
          __m512i lo, hi;
          D::Quants(b, p, g, &lo, &hi);
          for (int t = 0; t < NT; ++t) {
            const int8_t* qa = a[t].qs + at + 64 * p + 4 * g;
            lo_sum[t] = _mm512_dpbusd_epi32(lo_sum[t], lo, Broadcast8(qa));
            hi_sum[t] = _mm512_dpbusd_epi32(hi_sum[t], hi, Broadcast8(qa + 32));
          }
        }
        // Chunk 2p's sums in the low words, chunk 2p+1's in the high words.
        for (int t = 0; t < NT; ++t) {
          const __m512i sums =
              _mm512_mask_blend_epi16(0xAAAAAAAAu, lo_sum[t], _mm512_slli_epi32(hi_sum[t], 16));
          isum[t] = _mm512_dpwssd_epi32(isum[t], sums, sc);
        }
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.dmin)));
    for (int t = 0; t < NT; ++t) {
      // Row r's two lanes added into the low dword of qword r.
      const __m256i rows =
          _mm512_cvtepi64_epi32(_mm512_add_epi32(isum[t], _mm512_srli_epi64(isum[t], 32)));
      acc[t] = avx2::AddSuperBlock8(acc[t], d, dmin, a[t].d[i], rows,
                                    scales.MinSums(a[t].bsums + 16 * i));
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

// K45Group as a tile's group kernel (Block, Group<NT, kLocality>).
template <typename D>
struct K45TileGroup {
  using Block = typename D::Block;
  template <int NT, int kLocality>
  static void Group(const Block* blk, int64_t nb, const QuantizedRow* a, float* y, int64_t stride) {
    K45Group<D, NT, kLocality>(blk, nb, a, y, stride);
  }
};

// Q6_K (Q6KRows8). Loads g and g+1 (g even) of half n are 192 bytes: three
// planes for g, then three for g+1. Three 64-byte loads and three vpermt2d
// give each plane as (row r, g) in dword 2r and (row r, g+1) in 2r+1, and
// interleaved_avx2.cc's 11 bit operations the codes u = q + 32 of chunks 4n
// .. 4n+3 (c[k]). A group scale covers 16 elements, loads 4h .. 4h+3 of a
// chunk: each pair of loads gives vpdpbusd sums of 4 products per lane, at
// most 4 * 63 * 128 = 32256, so the two pairs' sums share a dword as words
// and one vpdpwssd by the group's scale (in both words) adds the group.
// The offset term and the float update are the AVX2 tile's.
COLIBRI_INLINE void Q6KCodes(const Q6KRows8& b, int n, int g, __m512i c[4]) {
  const uint8_t* planes = &b.q[n][g][0][0][0];
  const __m512i x = _mm512_loadu_si512(planes);        // g: planes 0, 1
  const __m512i y = _mm512_loadu_si512(planes + 64);   // g: plane 2; g+1: plane 0
  const __m512i z = _mm512_loadu_si512(planes + 128);  // g+1: planes 1, 2
  // Dword 2r from the first source, 2r+1 from the second (index bit 4).
  const __m512i first_second =
      _mm512_setr_epi32(0, 24, 1, 25, 2, 26, 3, 27, 4, 28, 5, 29, 6, 30, 7, 31);
  const __m512i second_first =
      _mm512_setr_epi32(8, 16, 9, 17, 10, 18, 11, 19, 12, 20, 13, 21, 14, 22, 15, 23);
  const __m512i p0 = _mm512_permutex2var_epi32(x, first_second, y);
  const __m512i p1 = _mm512_permutex2var_epi32(x, second_first, z);
  const __m512i p2 = _mm512_permutex2var_epi32(y, first_second, z);
  const __m512i low6 = _mm512_set1_epi8(0x3F);
  c[0] = _mm512_and_si512(p0, low6);
  c[1] = _mm512_and_si512(p1, low6);
  c[2] = _mm512_and_si512(p2, low6);
  // The planes' top 2 bits to bits 0-1, 2-3 and 4-5, a 16-bit shift by 2 as
  // each joins (no bit crosses a byte: bits 0-1 are clear before a shift).
  __m512i top = _mm512_srli_epi16(_mm512_andnot_si512(low6, p0), 2);
  top = _mm512_srli_epi16(_mm512_or_si512(top, _mm512_andnot_si512(low6, p1)), 2);
  c[3] = _mm512_srli_epi16(_mm512_or_si512(top, _mm512_andnot_si512(low6, p2)), 2);
}

// Word w of group scale 2p + h (scales: Q6KRows8::scales[p], [r][h]), for
// the dword lanes (row r, either load): scale (w / 4, h), widened.
alignas(64) constexpr int16_t kQ6KScaleWords[2][32] = {
    {0, 0, 0, 0, 2,  2,  2,  2,  4,  4,  4,  4,  6,  6,  6,  6,
     8, 8, 8, 8, 10, 10, 10, 10, 12, 12, 12, 12, 14, 14, 14, 14},
    {1, 1, 1, 1, 3,  3,  3,  3,  5,  5,  5,  5,  7,  7,  7,  7,
     9, 9, 9, 9, 11, 11, 11, 11, 13, 13, 13, 13, 15, 15, 15, 15}};

template <int NT, int kLocality>
void Q6KGroup(const Q6KRows8* blk, int64_t nb, const QuantizedRow* a, float* y, int64_t y_stride) {
  // Super-blocks ahead to prefetch (6.6 KiB), as the AVX2 tile.
  constexpr int64_t kAhead = 4;
  const __m512i zero = _mm512_setzero_si512();
  const __m512i words_h0 = _mm512_load_si512(kQ6KScaleWords[0]);
  const __m512i words_h1 = _mm512_load_si512(kQ6KScaleWords[1]);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const Q6KRows8& b = blk[i];
    avx2::PrefetchBytes<kLocality>(blk, (i + kAhead) * sizeof(Q6KRows8), sizeof(Q6KRows8));
    const int64_t at = 256 * i;
    __m512i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = zero;
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m512i first[4], second[4];  // loads 4h, 4h+1 and 4h+2, 4h+3
        Q6KCodes(b, n, 4 * h, first);
        Q6KCodes(b, n, 4 * h + 2, second);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m512i sc = _mm512_permutexvar_epi16(
              h == 0 ? words_h0 : words_h1,
              _mm512_castsi256_si512(_mm256_cvtepi8_epi16(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales[4 * n + k])))));
          for (int t = 0; t < NT; ++t) {
            const int8_t* qa = a[t].qs + at + 128 * n + 32 * k + 16 * h;
            const __m512i s0 = _mm512_dpbusd_epi32(zero, first[k], Broadcast8(qa));
            const __m512i s1 = _mm512_dpbusd_epi32(zero, second[k], Broadcast8(qa + 8));
            const __m512i sums =
                _mm512_mask_blend_epi16(0xAAAAAAAAu, s0, _mm512_slli_epi32(s1, 16));
            isum[t] = _mm512_dpwssd_epi32(isum[t], sums, sc);
          }
        }
      }
    }
    __m256i bsum_dot[NT];
    avx2::Q6KBsumDots<NT>(b.scales, a, i, bsum_dot);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    for (int t = 0; t < NT; ++t) {
      const __m256i rows =
          _mm512_cvtepi64_epi32(_mm512_add_epi32(isum[t], _mm512_srli_epi64(isum[t], 32)));
      acc[t] = avx2::AddQ6KSuperBlock8(acc[t], d, a[t].d[i], rows, bsum_dot[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

struct Q6KTileGroup {
  using Block = Q6KRows8;
  template <int NT, int kLocality>
  static void Group(const Block* blk, int64_t nb, const QuantizedRow* a, float* y, int64_t stride) {
    Q6KGroup<NT, kLocality>(blk, nb, a, y, stride);
  }
};

}  // namespace
}  // namespace interleaved_avx512

void InstallAvx512InterleavedTiles(KernelSet* k) {
  using avx2::InterleavedGroupsTile;
  using interleaved_avx512::K45TileGroup;
  k->interleaved_tile[Slot(TensorType::kQ4_K)] =
      &InterleavedGroupsTile<K45TileGroup<interleaved_avx512::Q4KQuants>>;
  k->interleaved_tile[Slot(TensorType::kQ5_K)] =
      &InterleavedGroupsTile<K45TileGroup<interleaved_avx512::Q5KQuants>>;
  k->interleaved_tile[Slot(TensorType::kQ6_K)] =
      &InterleavedGroupsTile<interleaved_avx512::Q6KTileGroup>;
}

}  // namespace colibri::ops::internal
