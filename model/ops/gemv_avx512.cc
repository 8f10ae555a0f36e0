// AVX-512 VNNI 16-row decode tiles for Q4_K, Q5_K and Q6_K weights against
// one Q8_K activation row (see gemv.h).
//
// Per super-block and row the integer Σ sc*q*qa is formed as in the GEMM
// tiles (gemm_avx512.cc): vpdpbusd of 64 unsigned quants by 64 activations
// gives 16 int32 quad sums (128-bit lane k: four quads of one 16-element
// group), vpackssdw packs two parts into int16 without saturating (each quad
// sum is below 4 * 63 * 128 < 2^15), and vpdpwssd multiplies them by their
// group scales and adds the pairs; Q6_K's quants (stored as q + 32) start the
// accumulator at Σ -32 * sc * bsum. The 16 rows' vectors are then summed by
// one transpose-and-add network into one vector of 16 row totals, and the
// mins of Q4_K/Q5_K likewise. All integer arithmetic is exact, so the totals
// are the per-row kernels' integers, and the float update
//   acc = acc + (d * da) * float(isum);  acc = acc - (dmin * da) * float(msum)
// is vec_dot.h's, lane by lane, super-block by super-block.
//
// Q4_K and Q5_K store sub-blocks 2j and 2j + 1 as the low and high nibbles of
// qs[32j..32j+31]. One 64-byte load of qs[64j..64j+63] yields, masked, the
// sub-blocks 4j | 4j + 2 and, shifted, 4j + 1 | 4j + 3; the activations are
// rearranged to match once per super-block for all 16 rows, and the scale
// index tables follow the same order.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "model/ops/avx2_common.h"
#include "model/ops/gemv.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {
namespace gemv_avx512 {
namespace {

constexpr int kRows = 16;

// The tiles that calls with several tokens, and rows that do not fill a
// 16-row tile, go to, by type slot. Written once by InstallAvx512GemvTiles,
// before any tile runs.
QuantTileFn g_previous_tile[kTypeSlots] = {};

COLIBRI_INLINE __m512i HalfBytes(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(lo)),
                            _mm256_set1_epi8(static_cast<char>(hi)), 1);
}

COLIBRI_INLINE __m512i HalfWords(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)),
                            _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
}

COLIBRI_INLINE __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }

COLIBRI_INLINE __m256i Load256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 32 bytes at lo, then 32 bytes at hi.
COLIBRI_INLINE __m512i Join(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(Load256(lo)), Load256(hi), 1);
}

// Decoders. Activations(qa, A): the super-block's 256 activations as the four
// parts the quants come in. Quants(u): the four parts' unsigned quants.
// Scales(): int16 vector whose words the Index01/Index23 tables pick the
// scale of each packed quad from. MinFactor(): 16 int16 factors of the
// activation group sums (mins, types with mins). kDOffset: byte offset of a
// 32-bit word holding d (low half) and dmin (high half), or, with
// kDInHighHalf, d in its high half.

// Q4_K / Q5_K, parts p = 2j + k: sub-blocks 4j + k | 4j + k + 2.
template <bool kFiveBit>
struct Q45K {
  using Block = std::conditional_t<kFiveBit, BlockQ5_K, BlockQ4_K>;
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;
  static constexpr int kDOffset = 0;
  static constexpr bool kDInHighHalf = false;
  // Lane L of packs(v[2j], v[2j + 1]): words 0-3 of sub-block 4j + 2(L / 2),
  // words 4-7 of 4j + 1 + 2(L / 2).
  alignas(64) static constexpr int16_t kIndex01[32] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0,
                                                       0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3,
                                                       3, 3, 2, 2, 2, 2, 3, 3, 3, 3};
  alignas(64) static constexpr int16_t kIndex23[32] = {4, 4, 4, 4, 5, 5, 5, 5, 4, 4, 4,
                                                       4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7,
                                                       7, 7, 6, 6, 6, 6, 7, 7, 7, 7};

  const Block& b;
  __m256i packed;  // words 0-7: the sub-block scales, 8-15: the mins
  COLIBRI_INLINE explicit Q45K(const Block& block)
      : b(block), packed(_mm256_cvtepu8_epi16(avx2::K4ScalesMins(block.scales))) {}

  COLIBRI_INLINE static void Activations(const int8_t* qa, __m512i* a) {
    for (int j = 0; j < 2; ++j) {
      for (int k = 0; k < 2; ++k)
        a[2 * j + k] = Join(qa + 128 * j + 32 * k, qa + 128 * j + 64 + 32 * k);
    }
  }
  COLIBRI_INLINE void Quants(__m512i* u) const {
    const __m512i mask = _mm512_set1_epi8(0x0F);
    for (int j = 0; j < 2; ++j) {
      const __m512i q = Load512(b.qs + 64 * j);
      u[2 * j] = _mm512_and_si512(q, mask);
      u[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), mask);
    }
    if constexpr (kFiveBit) {
      // Bit s of qh[l] is bit 4 of sub-block s's element l.
      const __m512i h = _mm512_broadcast_i64x4(Load256(b.qh));
      const __m512i bit4 = _mm512_set1_epi8(0x10);
      for (int p = 0; p < 4; ++p) {
        const int s = 4 * (p / 2) + p % 2;
        const __mmask64 set = _mm512_test_epi8_mask(h, HalfBytes(1 << s, 1 << (s + 2)));
        u[p] = _mm512_mask_add_epi8(u[p], set, u[p], bit4);
      }
    }
  }
  COLIBRI_INLINE __m256i Scales() const { return packed; }
  COLIBRI_INLINE __m256i MinFactor() const {
    const __m256i index =
        _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    return _mm256_permutexvar_epi16(index, packed);
  }
};

// Q6_K, natural element order: part p = 2 * half + k2 holds the low (k2 = 0)
// or high (k2 = 1) nibbles of ql[64 half..64 half + 63] with bits 4 k2 + 0, 1
// (low 256 bits) or 4 k2 + 2, 3 (high) of qh[32 half + l] as bits 4, 5.
struct Q6K {
  using Block = BlockQ6_K;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 32;
  // scales[14], scales[15], d: in bounds at the end of the last block.
  static constexpr int kDOffset = 206;
  static constexpr bool kDInHighHalf = true;
  // Lane L of packs(v[0], v[1]): words 0-3 of group L, 4-7 of group 4 + L.
  alignas(64) static constexpr int16_t kIndex01[32] = {0, 0, 0, 0, 4, 4, 4, 4, 1, 1, 1,
                                                       1, 5, 5, 5, 5, 2, 2, 2, 2, 6, 6,
                                                       6, 6, 3, 3, 3, 3, 7, 7, 7, 7};
  alignas(64) static constexpr int16_t kIndex23[32] = {8,  8,  8,  8,  12, 12, 12, 12, 9,  9,  9,
                                                       9,  13, 13, 13, 13, 10, 10, 10, 10, 14, 14,
                                                       14, 14, 11, 11, 11, 11, 15, 15, 15, 15};

  const Block& b;
  COLIBRI_INLINE explicit Q6K(const Block& block) : b(block) {}

  COLIBRI_INLINE static void Activations(const int8_t* qa, __m512i* a) {
    for (int p = 0; p < 4; ++p) a[p] = Load512(qa + 64 * p);
  }
  COLIBRI_INLINE void Quants(__m512i* u) const {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    for (int half = 0; half < 2; ++half) {
      const __m512i l = Load512(b.ql + 64 * half);
      const __m512i h = _mm512_broadcast_i64x4(Load256(b.qh + 32 * half));
      const __m512i h0 = _mm512_and_si512(_mm512_sllv_epi16(h, HalfWords(4, 2)), bits45);
      const __m512i h1 = _mm512_and_si512(_mm512_srlv_epi16(h, HalfWords(0, 2)), bits45);
      // (low & 0x0F) | high
      u[2 * half] = _mm512_ternarylogic_epi32(l, h0, low4, 0xEC);
      u[2 * half + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), h1, low4, 0xEC);
    }
  }
  COLIBRI_INLINE __m256i Scales() const {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  }
  COLIBRI_INLINE __m256i MinFactor() const { return _mm256_setzero_si256(); }
};

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

// 16 rows at w (row_bytes apart) x the one token a: y[0..15].
//
// Software prefetch: while a tile reads its 16 rows (contiguous in memory),
// it asks for the next tile's 16 rows into L1, prefetch_step bytes per
// super-block in address order, so the whole next tile is in flight before it
// starts. Rows of 2048 columns are 1-2 KiB, too short a stream for the
// hardware prefetchers to ramp up, and without software prefetch decode read
// at half the speed. Distances of the next tile -16/-8/+0/+8 KiB, and hints
// T1/T2/NTA, measured no better (call-by-call interleaved, 1-2 threads, Q4_K and
// Q6_K at 2048 and 7168 columns).
template <typename D>
void Micro16x1(const uint8_t* w, uint64_t row_bytes, const QuantizedRow& a, int64_t nb,
               uint64_t prefetch_step, float* y) {
  using Block = typename D::Block;
  const __m512i index01 = _mm512_load_si512(D::kIndex01);
  const __m512i index23 = _mm512_load_si512(D::kIndex23);
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(row_bytes)));
  const uintptr_t prefetch_base = reinterpret_cast<uintptr_t>(w) + kRows * row_bytes;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    // Prefetching never faults, so addresses past the matrix's end are
    // harmless; uintptr_t arithmetic keeps the pointer in bounds.
    for (uint64_t b = 0; b < prefetch_step; b += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(prefetch_base + i * prefetch_step + b),
                   _MM_HINT_T0);
    }
    __m512i qa[4];
    D::Activations(a.qs + kQK_K * i, qa);
    const __m256i bsums = Load256(a.bsums + 16 * i);
    __m512i prod[kRows];
    __m256i mins[kRows];
    for (int r = 0; r < kRows; ++r) {
      const D dec(reinterpret_cast<const Block*>(w + r * row_bytes)[i]);
      __m512i u[4];
      dec.Quants(u);
      const __m512i zero = _mm512_setzero_si512();
      __m512i v[4];
      for (int p = 0; p < 4; ++p) v[p] = _mm512_dpbusd_epi32(zero, u[p], qa[p]);
      const __m256i sc16 = dec.Scales();
      const __m512i sc = _mm512_castsi256_si512(sc16);
      __m512i s = zero;
      if constexpr (D::kOffset != 0) {
        s = _mm512_dpwssd_epi32(
            s, _mm512_zextsi256_si512(bsums),
            _mm512_zextsi256_si512(_mm256_mullo_epi16(sc16, _mm256_set1_epi16(-D::kOffset))));
      }
      s = _mm512_dpwssd_epi32(s, _mm512_packs_epi32(v[0], v[1]),
                              _mm512_permutexvar_epi16(index01, sc));
      s = _mm512_dpwssd_epi32(s, _mm512_packs_epi32(v[2], v[3]),
                              _mm512_permutexvar_epi16(index23, sc));
      prod[r] = s;
      if constexpr (D::kHasMin) mins[r] = _mm256_madd_epi16(bsums, dec.MinFactor());
    }
    const __m512i dwords =
        _mm512_i32gather_epi32(row_offsets, w + i * sizeof(Block) + D::kDOffset, 1);
    const __m512 da = _mm512_set1_ps(a.d[i]);
    const __m512i dbits = D::kDInHighHalf ? _mm512_srli_epi32(dwords, 16) : dwords;
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dbits));
    const __m512 isum = _mm512_cvtepi32_ps(SumLanes16(prod));
    acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, da), isum));
    if constexpr (D::kHasMin) {
      const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dwords, 16)));
      const __m512 msum = _mm512_cvtepi32_ps(SumLanes16Half(mins));
      acc = _mm512_sub_ps(acc, _mm512_mul_ps(_mm512_mul_ps(dmin, da), msum));
    }
  }
  _mm512_storeu_ps(y, acc);
}

template <typename D, TensorType kType>
void Tile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
          const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  // The gather of the d fields takes 32-bit row offsets.
  const bool fits = row_bytes <= (uint64_t{1} << 31) / kRows;
  const int64_t full_rows = n_tokens == 1 && fits ? n_rows / kRows * kRows : 0;
  if (full_rows > 0) {
    const QuantizedRow a = QuantizedRow::At(layout, act);
    const int64_t nb = layout.cols / kQK_K;
    // Cache lines per super-block step that cover the tile's 16 rows.
    const uint64_t tile_bytes = kRows * row_bytes;
    const uint64_t lines = (tile_bytes + 64 * nb - 1) / (64 * nb);
    for (int64_t r0 = 0; r0 < full_rows; r0 += kRows) {
      Micro16x1<D>(w + r0 * row_bytes, row_bytes, a, nb, 64 * lines, y + r0);
    }
  }
  if (full_rows < n_rows) {
    g_previous_tile[Slot(kType)](w + full_rows * row_bytes, row_bytes, n_rows - full_rows, act,
                                 layout, n_tokens, y + full_rows, y_stride);
  }
}

}  // namespace
}  // namespace gemv_avx512

void InstallAvx512GemvTiles(KernelSet* k) {
  using gemv_avx512::g_previous_tile;
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    g_previous_tile[Slot(type)] = k->quant_tile[Slot(type)];
  }
  k->quant_tile[Slot(TensorType::kQ4_K)] =
      &gemv_avx512::Tile<gemv_avx512::Q45K<false>, TensorType::kQ4_K>;
  k->quant_tile[Slot(TensorType::kQ5_K)] =
      &gemv_avx512::Tile<gemv_avx512::Q45K<true>, TensorType::kQ5_K>;
  k->quant_tile[Slot(TensorType::kQ6_K)] = &gemv_avx512::Tile<gemv_avx512::Q6K, TensorType::kQ6_K>;
}

}  // namespace colibri::ops::internal
