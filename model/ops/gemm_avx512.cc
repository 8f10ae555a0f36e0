// AVX-512 VNNI 4 x 4 GEMM tiles for Q4_K, Q5_K and Q6_K weights against Q8_K
// activations (see gemm.h).
//
// Per super-block and (row, token) pair the integer Σ sc*q*qa is formed as:
//  - part p (64 elements, groups 4p..4p+3): u = the unsigned quants in element
//    order; vpdpbusd(u, qa) gives 16 int32 quad sums, 128-bit lane k holding
//    the four quads of group 4p + k;
//  - each quad sum is at most 4 * 63 * 128 < 2^15 in magnitude, so two parts
//    pack into int16 without saturating (vpackssdw), and vpdpwssd multiplies
//    them by their group scales and adds the pairs into 16 int32 lanes;
//  - for Q6_K (quants stored as u = q + 32) a vpdpwssd of the activation
//    group sums by -32 * scale starts the accumulator, so the lanes sum to
//    Σ sc*(u - 32)*qa.
// The 16 pairs' lanes are then summed by one transpose-and-add network to a
// vector holding the 16 totals (lane 4r + t for row r, token t); the min term
// of Q4_K/Q5_K (Σ m*bsum) likewise. All of it is exact int32 arithmetic (every
// partial sum is bounded by Σ|sc*q*qa| < 2^31), so the totals are the per-row
// kernels' integers, and the float update
//   acc = acc + (d * da) * float(isum);  acc = acc - (dmin * da) * float(msum)
// is vec_dot.h's, lane by lane, super-block by super-block.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "model/ops/avx2_common.h"
#include "model/ops/gemm.h"
#include "model/ops/gemm_avx512_blocks.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {
namespace gemm_avx512 {
namespace {

constexpr int kRows = 4;
constexpr int kTokens = 4;

// The per-row tiles the GEMM tiles hand their edges to, by type slot. Written
// once by InstallAvx512GemmTiles, before any tile runs.
QuantTileFn g_edge_tile[kTypeSlots] = {};

// The same for 16 vectors of 8 int32 lanes.
COLIBRI_INLINE __m512i SumLanes16Half(const __m256i* v) {
  // q[k]: v[2k] in the low half, v[2k + 1] in the high half.
  __m512i q[8], t[4], u[2];
  for (int k = 0; k < 8; ++k) {
    q[k] = _mm512_inserti64x4(_mm512_castsi256_si512(v[2 * k]), v[2 * k + 1], 1);
  }
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(q[2 * k], q[2 * k + 1]),
                            _mm512_unpackhi_epi32(q[2 * k], q[2 * k + 1]));
  }
  for (int k = 0; k < 2; ++k) {
    u[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]),
                            _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
  }
  // 128-bit lanes: [v0 v2 v4 v6], [v1 v3 v5 v7], [v8 v10 v12 v14], [v9 ...].
  const __m512i x = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  return _mm512_permutexvar_epi32(order, x);
}

// 4 rows (at w, row_bytes apart) x T <= 4 tokens (a[0..T-1]): y[t * y_stride
// + r]. Lanes of missing tokens hold zeros and are not stored.
// Software prefetch of the weights a tile will read later. Rows of 2048
// columns are 1-2 KiB, too short a stream for the hardware prefetchers to ramp
// up before a 4-row tile moves on, and decode then reaches about half the
// memory read bandwidth (docs/benchmarks.md). While reading super-block i of its rows, a tile asks for
// super-block i of the rows `ahead` rows further on, so the memory system
// always has a contiguous region about kPrefetchBytes ahead in flight.
constexpr uint64_t kPrefetchBytes = 12 * 1024;

// Rows ahead (a multiple of kRows, at least one tile) to prefetch at.
COLIBRI_INLINE int64_t PrefetchRowsAhead(uint64_t row_bytes) {
  const uint64_t tile_bytes = kRows * row_bytes;
  const uint64_t tiles = (kPrefetchBytes + tile_bytes - 1) / tile_bytes;
  return static_cast<int64_t>(tiles) * kRows;
}

// vpshufb controls spreading Q4_K/Q5_K's eight sub-block scales (bytes 0-7 of
// K4ScalesMins, in every 128-bit lane) over vpackssdw's layout as int16:
// 128-bit lane k of packs(v_a, v_b) holds four quads of sub-block 2a' + k / 2,
// then four of sub-block 2b' + k / 2 (parts a', b' = 0, 1 or 2, 3).
alignas(64) inline constexpr int8_t kK4ScaleShuffle01[64] = {
    0, -128, 0, -128, 0, -128, 0, -128, 2, -128, 2, -128, 2, -128, 2, -128,
    0, -128, 0, -128, 0, -128, 0, -128, 2, -128, 2, -128, 2, -128, 2, -128,
    1, -128, 1, -128, 1, -128, 1, -128, 3, -128, 3, -128, 3, -128, 3, -128,
    1, -128, 1, -128, 1, -128, 1, -128, 3, -128, 3, -128, 3, -128, 3, -128};
alignas(64) inline constexpr int8_t kK4ScaleShuffle23[64] = {
    4, -128, 4, -128, 4, -128, 4, -128, 6, -128, 6, -128, 6, -128, 6, -128,
    4, -128, 4, -128, 4, -128, 4, -128, 6, -128, 6, -128, 6, -128, 6, -128,
    5, -128, 5, -128, 5, -128, 5, -128, 7, -128, 7, -128, 7, -128, 7, -128,
    5, -128, 5, -128, 5, -128, 5, -128, 7, -128, 7, -128, 7, -128, 7, -128};

// One weight row's super-block, decoded for the integer sums below.
struct DecodedBlock {
  __m512i s01, s23;     // group scales spread over parts 0-1 and 2-3
  __m512i u[4];         // quants of the four 64-element parts
  __m256i bias_factor;  // -kOffset * scale per group (Q6_K), else zero
  __m256i min_factor;   // Q4_K/Q5_K min factors of the 16 groups
};

// index01/index23 (kScaleIndex01/23) spread Q6_K's 16 group scales with
// vpermw; Q4_K/Q5_K's 8 sub-block scales take one vpshufb each instead.
template <typename D>
COLIBRI_INLINE DecodedBlock DecodeBlock(const typename D::Block& block, __m512i index01,
                                        __m512i index23) {
  const D dec(block);
  DecodedBlock b;
  if constexpr (D::kHasMin) {
    const __m512i sc = _mm512_broadcast_i32x4(dec.packed);
    b.s01 = _mm512_shuffle_epi8(sc, _mm512_load_si512(kK4ScaleShuffle01));
    b.s23 = _mm512_shuffle_epi8(sc, _mm512_load_si512(kK4ScaleShuffle23));
    b.bias_factor = _mm256_setzero_si256();
  } else {
    const __m256i sc16 = dec.GroupScales();
    const __m512i sc = _mm512_castsi256_si512(sc16);
    b.s01 = _mm512_permutexvar_epi16(index01, sc);
    b.s23 = _mm512_permutexvar_epi16(index23, sc);
    b.bias_factor = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-D::kOffset));
  }
  for (int p = 0; p < 4; ++p) b.u[p] = dec.Quants(p);
  b.min_factor = dec.MinFactor();
  return b;
}

// The 16 int32 lanes whose total is Σ sc*q*qa of one row and token over the
// super-block (qa: the token's four 64-quant parts, bsums its group sums).
template <typename D>
COLIBRI_INLINE __m512i BlockSum(const DecodedBlock& b, const __m512i* qa, __m256i bsums) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i v[4];
  for (int p = 0; p < 4; ++p) v[p] = _mm512_dpbusd_epi32(zero, b.u[p], qa[p]);
  __m512i s = zero;
  if constexpr (D::kOffset != 0) {
    s = _mm512_dpwssd_epi32(s, _mm512_zextsi256_si512(bsums),
                            _mm512_zextsi256_si512(b.bias_factor));
  }
  s = _mm512_dpwssd_epi32(s, _mm512_packs_epi32(v[0], v[1]), b.s01);
  return _mm512_dpwssd_epi32(s, _mm512_packs_epi32(v[2], v[3]), b.s23);
}

// What the one-token tiles read of the token per super-block: its four
// 64-quant parts and its 16 group sums.
struct TokenBlock {
  __m512i parts[4];
  __m256i bsums;
};

COLIBRI_INLINE TokenBlock LoadTokenBlock(const QuantizedRow& a, int64_t i) {
  TokenBlock t;
  const int8_t* qa = a.qs + kQK_K * i;
  for (int p = 0; p < 4; ++p) t.parts[p] = _mm512_loadu_si512(qa + 64 * p);
  t.bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums + 16 * i));
  return t;
}

// Super-block i of the kRows rows `prefetch_rows` after those at w.
// kLocality: see avx2::PrefetchBytes.
template <typename Block, int kLocality = 3>
COLIBRI_INLINE void PrefetchAhead(const uint8_t* w, uint64_t row_bytes, int64_t prefetch_rows,
                                  int64_t i) {
  for (int r = 0; r < kRows; ++r) {
    avx2::PrefetchBytes<kLocality>(w, (prefetch_rows + r) * row_bytes + i * sizeof(Block), sizeof(Block));
  }
}

// The block factors of four rows' super-blocks, each converted with one
// vcvtph2ps. Types with mins: lanes 2r and 2r + 1 hold row r's d and dmin
// (Q4_K and Q5_K blocks start with them, not necessarily 4-byte aligned).
template <typename D>
COLIBRI_INLINE __m256 RowFactorPairs(const typename D::Block* const* blocks) {
  static_assert(D::kHasMin && kRows == 4, "four rows' d, dmin fill eight lanes");
  int32_t pair[kRows];
  for (int r = 0; r < kRows; ++r) std::memcpy(&pair[r], blocks[r], sizeof(int32_t));
  return _mm256_cvtph_ps(_mm_setr_epi32(pair[0], pair[1], pair[2], pair[3]));
}

// Types without mins: lane r holds row r's d.
template <typename D>
COLIBRI_INLINE __m128 RowScales(const typename D::Block* const* blocks) {
  static_assert(!D::kHasMin && kRows == 4, "four rows' d fill four lanes");
  __m128i h = _mm_cvtsi32_si128(blocks[0]->d);
  h = _mm_insert_epi16(h, blocks[1]->d, 1);
  h = _mm_insert_epi16(h, blocks[2]->d, 2);
  h = _mm_insert_epi16(h, blocks[3]->d, 3);
  return _mm_cvtph_ps(h);
}

// Lanes 0-3: lane 2r + which of pairs (which 0: the rows' d, 1: their dmin).
COLIBRI_INLINE __m128 PickFactors(__m256 pairs, int which) {
  const __m128 lo = _mm256_castps256_ps128(pairs);
  const __m128 hi = _mm256_extractf128_ps(pairs, 1);
  return which == 0 ? _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))
                    : _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
}

// Lane 4r + t = lane stride * r + first of v (row r's factor for every token).
COLIBRI_INLINE __m512 PerRowLanes(__m512 v, int stride, int first) {
  const __m512i rows = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i index = _mm512_add_epi32(_mm512_mullo_epi32(rows, _mm512_set1_epi32(stride)),
                                         _mm512_set1_epi32(first));
  return _mm512_permutexvar_ps(index, v);
}

template <typename D, int T>
void Micro4xT(const uint8_t* w, uint64_t row_bytes, const QuantizedRow* a, int64_t cols, float* y,
              int64_t y_stride, int64_t prefetch_rows) {
  using Block = typename D::Block;
  const int64_t nb = cols / kQK_K;
  const __m512i index01 = _mm512_load_si512(kScaleIndex01);
  const __m512i index23 = _mm512_load_si512(kScaleIndex23);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    __m512i prod[kRows * kTokens];
    __m256i mins[kRows * kTokens];
    for (int j = 0; j < kRows * kTokens; ++j) {
      if (j % kTokens >= T) {
        prod[j] = _mm512_setzero_si512();
        mins[j] = _mm256_setzero_si256();
      }
    }
    const Block* blocks[kRows];
    PrefetchAhead<Block>(w, row_bytes, prefetch_rows, i);
    for (int r = 0; r < kRows; ++r) {
      blocks[r] = &reinterpret_cast<const Block*>(w + r * row_bytes)[i];
      const DecodedBlock b = DecodeBlock<D>(*blocks[r], index01, index23);
      for (int t = 0; t < T; ++t) {
        const TokenBlock tb = LoadTokenBlock(a[t], i);
        prod[r * kTokens + t] = BlockSum<D>(b, tb.parts, tb.bsums);
        if constexpr (D::kHasMin) {
          mins[r * kTokens + t] = _mm256_madd_epi16(tb.bsums, b.min_factor);
        }
      }
    }
    float da[kTokens] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int t = 0; t < T; ++t) da[t] = a[t].d[i];
    const __m512 da_v = _mm512_broadcast_f32x4(_mm_loadu_ps(da));
    const __m512 isum = _mm512_cvtepi32_ps(SumLanes16(prod));
    if constexpr (D::kHasMin) {
      const __m512 pairs = _mm512_castps256_ps512(RowFactorPairs<D>(blocks));
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(PerRowLanes(pairs, 2, 0), da_v), isum));
      const __m512 msum = _mm512_cvtepi32_ps(SumLanes16Half(mins));
      acc = _mm512_sub_ps(acc, _mm512_mul_ps(_mm512_mul_ps(PerRowLanes(pairs, 2, 1), da_v), msum));
    } else {
      const __m512 d = _mm512_castps128_ps512(RowScales<D>(blocks));
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(PerRowLanes(d, 1, 0), da_v), isum));
    }
  }
  alignas(64) float out[kRows * kTokens];
  _mm512_store_ps(out, acc);
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < T; ++t) y[t * y_stride + r] = out[r * kTokens + t];
  }
}

// The int32 lane totals of four vectors: lane r of the result = Σ lanes of
// v[r]. Integer adds are exact, so any order gives the same totals.
COLIBRI_INLINE __m128i Totals4(const __m512i* v) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]),
                                     _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]),
                                     _mm512_unpackhi_epi32(v[2], v[3]));
  // Each 128-bit lane: partial sums of v[0], v[1], v[2], v[3].
  const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Micro4xT for one token (decode) of types without mins (Q6_K): the same
// integers per row and super-block and the same float update, lane r for row
// r, without the 16-pair transpose whose other 12 pairs would be zeros, and
// with the four rows' block factors converted by one vcvtph2ps.
template <typename D>
void Micro4x1(const uint8_t* w, uint64_t row_bytes, const QuantizedRow& a, int64_t cols, float* y,
              int64_t prefetch_rows) {
  static_assert(!D::kHasMin, "Q4_K and Q5_K take Micro4x1K");
  using Block = typename D::Block;
  const int64_t nb = cols / kQK_K;
  const __m512i index01 = _mm512_load_si512(kScaleIndex01);
  const __m512i index23 = _mm512_load_si512(kScaleIndex23);
  __m128 acc = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    PrefetchAhead<Block, avx2::kReadOnce>(w, row_bytes, prefetch_rows, i);
    const TokenBlock t = LoadTokenBlock(a, i);
    const Block* blocks[kRows];
    __m512i prod[kRows];
    for (int r = 0; r < kRows; ++r) {
      blocks[r] = &reinterpret_cast<const Block*>(w + r * row_bytes)[i];
      prod[r] = BlockSum<D>(DecodeBlock<D>(*blocks[r], index01, index23), t.parts, t.bsums);
    }
    const __m128 da = _mm_set1_ps(a.d[i]);
    const __m128 isum = _mm_cvtepi32_ps(Totals4(prod));
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(RowScales<D>(blocks), da), isum));
  }
  _mm_storeu_ps(y, acc);
}

// The one-token tile of Q4_K and Q5_K, Micro4x1K, forms Micro4xT's integers
// for one token from 64-byte loads of qs: the low nibbles of
// qs[64h..64h+63] are elements 128h + 0..31 and 128h + 64..95 (sub-blocks 4h
// and 4h + 2), the high nibbles elements 128h + 32..63 and 128h + 96..127
// (sub-blocks 4h + 1 and 4h + 3). The token's parts are gathered in that
// "pair order" once per super-block for the four rows, instead of each row
// spreading 32-byte halves of qs over a vector (integer sums do not depend
// on the order of their terms). The four rows' scales and mins are unpacked
// together, their block factors converted by one vcvtph2ps, and their min
// terms formed by one vpmaddwd of the rows' eight sub-block mins against the
// token's eight sub-block sums and one in-lane reduction (Σ m*(bsum[2j] +
// bsum[2j+1]) over the sub-blocks is exactly Micro4xT's Σ over the sixteen
// 16-element groups, whose mins come in equal pairs). That is faster than
// per-row decoding with the weights in cache; from memory the two are level,
// the memory being the limit there (docs/benchmarks.md).

// The token's quants of super-block i in pair order: part 2h = elements
// 128h + [0..31 | 64..95], part 2h + 1 = 128h + [32..63 | 96..127].
COLIBRI_INLINE TokenBlock LoadTokenBlockPaired(const QuantizedRow& a, int64_t i) {
  const __m512i low_halves = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
  const __m512i high_halves = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
  TokenBlock t;
  const int8_t* qa = a.qs + kQK_K * i;
  for (int h = 0; h < 2; ++h) {
    const __m512i x = _mm512_loadu_si512(qa + 128 * h);
    const __m512i y = _mm512_loadu_si512(qa + 128 * h + 64);
    t.parts[2 * h] = _mm512_permutex2var_epi64(x, low_halves, y);
    t.parts[2 * h + 1] = _mm512_permutex2var_epi64(x, high_halves, y);
  }
  t.bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums + 16 * i));
  return t;
}

// Part p (pair order) of a Q4_K/Q5_K block's unsigned quants; for Q5_K bit
// 4h + k of qh[l] is bit 4 of element 128h + 32k + l.
template <bool kFiveBit>
COLIBRI_INLINE __m512i PairQuants(const typename Q45K<kFiveBit>::Block& b, int p) {
  const int h = p / 2;
  const __m512i q = _mm512_loadu_si512(b.qs + 64 * h);
  const __m512i u = _mm512_and_si512(p % 2 == 0 ? q : _mm512_srli_epi16(q, 4),
                                     _mm512_set1_epi8(0x0F));
  if constexpr (!kFiveBit) {
    return u;
  } else {
    const int k = p % 2;
    const __mmask64 set = _mm512_test_epi8_mask(
        Broadcast32Bytes(b.qh), HalfBytes(1 << (4 * h + k), 1 << (4 * h + k + 2)));
    return _mm512_mask_add_epi8(u, set, u, _mm512_set1_epi8(0x10));
  }
}

// vpshufb controls spreading the eight sub-block scales (bytes 0-7 of each
// 128-bit lane) as int16 over packs(v[2h], v[2h + 1]) in pair order: 128-bit
// lanes 0 and 1 hold four quads of sub-block 4h, then four of 4h + 1; lanes 2
// and 3 four of 4h + 2, then four of 4h + 3.
alignas(64) inline constexpr int8_t kPairScaleShuffle01[64] = {
    0, -128, 0, -128, 0, -128, 0, -128, 1, -128, 1, -128, 1, -128, 1, -128,
    0, -128, 0, -128, 0, -128, 0, -128, 1, -128, 1, -128, 1, -128, 1, -128,
    2, -128, 2, -128, 2, -128, 2, -128, 3, -128, 3, -128, 3, -128, 3, -128,
    2, -128, 2, -128, 2, -128, 2, -128, 3, -128, 3, -128, 3, -128, 3, -128};
alignas(64) inline constexpr int8_t kPairScaleShuffle23[64] = {
    4, -128, 4, -128, 4, -128, 4, -128, 5, -128, 5, -128, 5, -128, 5, -128,
    4, -128, 4, -128, 4, -128, 4, -128, 5, -128, 5, -128, 5, -128, 5, -128,
    6, -128, 6, -128, 6, -128, 6, -128, 7, -128, 7, -128, 7, -128, 7, -128,
    6, -128, 6, -128, 6, -128, 6, -128, 7, -128, 7, -128, 7, -128, 7, -128};

// avx2::K4ScalesMins of four blocks at once: 128-bit lane r holds block r's
// eight 6-bit scales, then its eight mins, as bytes.
COLIBRI_INLINE __m512i K4ScalesMins4(const uint8_t* const* scales) {
  __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales[0])));
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales[1])), 1);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales[2])), 2);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales[3])), 3);
  // Per lane, as in K4ScalesMins: words w0 w2 w1 w2, shifted by 0 0 0 4.
  __m512i low = _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(2, 1, 2, 0)));
  low = _mm512_srlv_epi32(low, _mm512_set4_epi32(4, 0, 0, 0));
  low = _mm512_and_si512(low, _mm512_set4_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f));
  __m512i high = _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 1, 0, 0)));
  high = _mm512_and_si512(_mm512_srli_epi32(high, 2),
                          _mm512_set4_epi32(0x30303030, 0, 0x30303030, 0));
  return _mm512_or_si512(low, high);
}

// Micro4x1 for Q4_K (kFiveBit false) and Q5_K: the same integers per row and
// super-block and the same float update, with the quants in pair order and
// the four rows' scales and mins unpacked together.
template <bool kFiveBit>
void Micro4x1K(const uint8_t* w, uint64_t row_bytes, const QuantizedRow& a, int64_t cols,
               float* y, int64_t prefetch_rows) {
  using D = Q45K<kFiveBit>;
  using Block = typename D::Block;
  const int64_t nb = cols / kQK_K;
  const __m512i shuffle01 = _mm512_load_si512(kPairScaleShuffle01);
  const __m512i shuffle23 = _mm512_load_si512(kPairScaleShuffle23);
  const __m512i mins_of_each = _mm512_setr_epi64(1, 3, 5, 7, 1, 3, 5, 7);
  const __m512i lane0_of_each = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i zero = _mm512_setzero_si512();
  __m128 acc = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    PrefetchAhead<Block, avx2::kReadOnce>(w, row_bytes, prefetch_rows, i);
    const TokenBlock t = LoadTokenBlockPaired(a, i);
    const Block* blocks[kRows];
    const uint8_t* scales[kRows];
    for (int r = 0; r < kRows; ++r) {
      blocks[r] = &reinterpret_cast<const Block*>(w + r * row_bytes)[i];
      scales[r] = blocks[r]->scales;
    }
    const __m512i packed = K4ScalesMins4(scales);
    alignas(64) uint8_t packed_rows[64];
    _mm512_store_si512(packed_rows, packed);
    __m512i prod[kRows];
    for (int r = 0; r < kRows; ++r) {
      const __m512i sc = _mm512_broadcast_i32x4(
          _mm_load_si128(reinterpret_cast<const __m128i*>(packed_rows + 16 * r)));
      __m512i v[4];
      for (int p = 0; p < 4; ++p) {
        v[p] = _mm512_dpbusd_epi32(zero, PairQuants<kFiveBit>(*blocks[r], p), t.parts[p]);
      }
      __m512i s = _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(v[0], v[1]),
                                      _mm512_shuffle_epi8(sc, shuffle01));
      prod[r] = _mm512_dpwssd_epi32(s, _mm512_packs_epi32(v[2], v[3]),
                                    _mm512_shuffle_epi8(sc, shuffle23));
    }
    const __m128 da = _mm_set1_ps(a.d[i]);
    const __m128 isum = _mm_cvtepi32_ps(Totals4(prod));
    const __m256 factors = RowFactorPairs<D>(blocks);
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_mul_ps(PickFactors(factors, 0), da), isum));
    // The token's 8 sub-block sums as int16 (each |.| <= 32 * 127).
    const __m256i sums32 = _mm256_madd_epi16(t.bsums, _mm256_set1_epi16(1));
    const __m128i sums = _mm_packs_epi32(_mm256_castsi256_si128(sums32),
                                         _mm256_extracti128_si256(sums32, 1));
    // 128-bit lane r: row r's 8 mins (int16) times the sums, then its total.
    const __m256i mins8 = _mm512_castsi512_si256(_mm512_permutexvar_epi64(mins_of_each, packed));
    __m512i m = _mm512_madd_epi16(_mm512_cvtepu8_epi16(mins8), _mm512_broadcast_i32x4(sums));
    m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, _MM_PERM_BADC));
    m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, _MM_PERM_CDAB));
    const __m128 msum =
        _mm_cvtepi32_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(lane0_of_each, m)));
    acc = _mm_sub_ps(acc, _mm_mul_ps(_mm_mul_ps(PickFactors(factors, 1), da), msum));
  }
  _mm_storeu_ps(y, acc);
}

template <typename D, TensorType kType>
void GemmTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
              const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  // Prompts: blocks of up to 16 tokens go to the wide tiles, which decode
  // the weights once per block; fewer than kWideMinTokens to the 4 x 4 tiles.
  while (n_tokens >= kWideMinTokens) {
    const int64_t nt = n_tokens < kWideTokens ? n_tokens : kWideTokens;
    WideTile<D>(w, row_bytes, n_rows, act, layout, nt, y, y_stride);
    act += nt * layout.row_bytes;
    y += nt * y_stride;
    n_tokens -= nt;
  }
  if (n_tokens == 0) return;
  const int64_t full_rows = n_rows / kRows * kRows;
  if (full_rows > 0) {
    QuantizedRow a[kTokens];
    const int64_t prefetch_rows = PrefetchRowsAhead(row_bytes);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens) {
      const int64_t nt = n_tokens - t0 < kTokens ? n_tokens - t0 : kTokens;
      for (int64_t t = 0; t < nt; ++t) {
        a[t] = QuantizedRow::At(layout, act + (t0 + t) * layout.row_bytes);
      }
      for (int64_t r0 = 0; r0 < full_rows; r0 += kRows) {
        const uint8_t* rows = w + r0 * row_bytes;
        float* out = y + t0 * y_stride + r0;
        switch (nt) {
          case 1:
            if constexpr (D::kHasMin) {
              Micro4x1K<std::is_same_v<D, Q45K<true>>>(rows, row_bytes, a[0], layout.cols, out,
                                                       prefetch_rows);
            } else {
              Micro4x1<D>(rows, row_bytes, a[0], layout.cols, out, prefetch_rows);
            }
            break;
          case 2:
            Micro4xT<D, 2>(rows, row_bytes, a, layout.cols, out, y_stride, prefetch_rows);
            break;
          case 3:
            Micro4xT<D, 3>(rows, row_bytes, a, layout.cols, out, y_stride, prefetch_rows);
            break;
          default:
            Micro4xT<D, 4>(rows, row_bytes, a, layout.cols, out, y_stride, prefetch_rows);
            break;
        }
      }
    }
  }
  if (full_rows < n_rows) {
    g_edge_tile[Slot(kType)](w + full_rows * row_bytes, row_bytes, n_rows - full_rows, act, layout,
                             n_tokens, y + full_rows, y_stride);
  }
}

}  // namespace
}  // namespace gemm_avx512

void InstallAvx512GemmTiles(KernelSet* k) {
  using gemm_avx512::g_edge_tile;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    g_edge_tile[Slot(type)] = k->quant_tile[Slot(type)];
  }
  k->quant_tile[Slot(TensorType::kQ4_K)] =
      &gemm_avx512::GemmTile<gemm_avx512::Q45K<false>, TensorType::kQ4_K>;
  k->quant_tile[Slot(TensorType::kQ5_K)] =
      &gemm_avx512::GemmTile<gemm_avx512::Q45K<true>, TensorType::kQ5_K>;
  k->quant_tile[Slot(TensorType::kQ6_K)] =
      &gemm_avx512::GemmTile<gemm_avx512::Q6K, TensorType::kQ6_K>;
}

}  // namespace colibri::ops::internal
