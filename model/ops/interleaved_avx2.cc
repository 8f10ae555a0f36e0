// AVX2 tiles for weights in the kInterleaved8 layout (weight_layout.h): Q4_K,
// Q5_K and Q6_K against Q8_K activations, Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4
// against Q8_0 activations, Q4_1 and Q5_1 against Q8_1, 8 rows at a time.
// (The signed 4- and 5-bit types take their values offset to unsigned, see
// NibbleQuadsPass; IQ4_NL's plus 128 would overflow vpmaddubsw's int16 pairs.)
//
// One 32-byte load holds 4 quant bytes of each of the 8 rows (Q4KRows8's
// qs[p][g]); its low nibbles are 4 elements of chunk 2p of every row, its
// high nibbles 4 elements of chunk 2p+1. Against the token's 4 matching
// activation bytes (one broadcast) a vpmaddubsw leaves two int16 sums per row,
// rows in lane order; the 8 loads of a chunk add up in int16 (Q4_K: at most
// 8 * 2 * 15 * 128 = 30720, no wrap; Q5_K's 5-bit values, in two sums of 4
// loads: 4 * 2 * 31 * 128 = 31744) and a vpmaddwd by the chunk's 8 scales
// (each repeated for the row's two lanes) turns them into one int32 per row.
// That is 9 (Q5_K 10) multiplies per chunk for 8 rows where the row-major
// tiles need 16, and no horizontal reduction: lane r of every vector belongs
// to row r.
//
// The mins: lane r of Σ_c min_c,r * (bsum_2c + bsum_2c+1), two chunks per
// vpmaddwd. The float update per super-block is vec_dot.h's,
//   acc = acc + (d * da) * float(isum);  acc = acc - (dmin * da) * float(msum),
// run for the 8 rows as one 8-lane operation; the integers are the exact sums
// the per-row kernels form. So every output is bitwise the row-major tiles'
// and MatMulReference's.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "model/ops/avx2_common.h"
#include "model/ops/avx2_k_decoders.h"
#include "model/ops/vec_dot.h"
#include "model/ops/weight_layout.h"

namespace colibri::ops::internal::avx2 {
namespace {

// How a type's 8-row super-block gives the quants of one load: Quants(b, p,
// g, &lo, &hi) sets lo to elements 64 p + 4 g + (0..3) and hi to 64 p + 32 +
// 4 g + (0..3) of the 8 rows (4 bytes per row, rows in order), as unsigned
// bytes. kLoadsPerSum loads add up in int16 before the scales apply.
// The low (chunk 2p) and high (chunk 2p+1) nibbles of load g of pair p.
COLIBRI_INLINE void Nibbles(const uint8_t (&qs)[4][8][8][4], int p, int g, __m256i* lo,
                            __m256i* hi) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs[p][g]));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  *lo = _mm256_and_si256(q, m4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
}

template <typename D, int NT, int kLocality>
void K45Group(const typename D::Block* blk, int64_t nb, const QuantizedRow* a, float* y,
              int64_t y_stride);

struct Q4KInterleaved {
  using Block = Q4KRows8;
  static constexpr int kLoadsPerSum = 8;
  static constexpr bool kChunkOrderFor3Tokens = true;  // see K45SumsByChunk
  template <int NT, int kLocality>
  static void Group(const Block* blk, int64_t nb, const QuantizedRow* a, float* y, int64_t stride) {
    K45Group<Q4KInterleaved, NT, kLocality>(blk, nb, a, y, stride);
  }
  COLIBRI_INLINE static void Quants(const Block& b, int p, int g, __m256i* lo, __m256i* hi) {
    Nibbles(b.qs, p, g, lo, hi);
  }
};

struct Q5KInterleaved {
  using Block = Q5KRows8;
  static constexpr int kLoadsPerSum = 4;
  // Its 5th bits would be loaded and shifted twice as often: slower.
  static constexpr bool kChunkOrderFor3Tokens = false;
  template <int NT, int kLocality>
  static void Group(const Block* blk, int64_t nb, const QuantizedRow* a, float* y, int64_t stride) {
    K45Group<Q5KInterleaved, NT, kLocality>(blk, nb, a, y, stride);
  }
  COLIBRI_INLINE static void Quants(const Block& b, int p, int g, __m256i* lo, __m256i* hi) {
    Nibbles(b.qs, p, g, lo, hi);
    // Bits 2p (lo) and 2p+1 (hi) of the elements' qh bytes to bit 4, in one
    // shift each (ShiftBitTo), masked.
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh[g]));
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    *lo = _mm256_or_si256(*lo, _mm256_and_si256(ShiftBitTo<4>(h, 2 * p), bit4));
    *hi = _mm256_or_si256(*hi, _mm256_and_si256(ShiftBitTo<4>(h, 2 * p + 1), bit4));
  }
};

// 4 activation bytes as the 8 lanes' shared int32.
COLIBRI_INLINE __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// isum[t] += lane r: Σ over the 8 chunks of row r's scale times its quants'
// dot with token t's (a[t].qs + at), for one super-block of 8 rows. Both
// orders form the same integers. By pair: one load gives two chunks' quants
// (the fewest operations), their 4 NT int16 sums and NT int32 sums fit the
// 16 registers for 1 or 2 tokens. By chunk: 2 NT sums and a quant vector,
// each load read twice (from L1), so that 3 or 4 tokens do not spill
// (docs/benchmarks.md has what that gains for Q4_K).
template <typename D, int NT>
COLIBRI_INLINE void K45SumsByPair(const typename D::Block& b, const QuantizedRow* a, int64_t at,
                                  const Rows8Scales& scales, __m256i* isum) {
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m256i sc_lo = scales.Scale(2 * p), sc_hi = scales.Scale(2 * p + 1);
#pragma GCC unroll 2
    for (int g0 = 0; g0 < 8; g0 += D::kLoadsPerSum) {
      __m256i s_lo[NT], s_hi[NT];
      for (int t = 0; t < NT; ++t) s_lo[t] = s_hi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int g = g0; g < g0 + D::kLoadsPerSum; ++g) {
        __m256i lo, hi;
        D::Quants(b, p, g, &lo, &hi);
        for (int t = 0; t < NT; ++t) {
          const int8_t* qa = a[t].qs + at + 64 * p + 4 * g;
          s_lo[t] = _mm256_add_epi16(s_lo[t], _mm256_maddubs_epi16(lo, Broadcast4(qa)));
          s_hi[t] = _mm256_add_epi16(s_hi[t], _mm256_maddubs_epi16(hi, Broadcast4(qa + 32)));
        }
      }
      for (int t = 0; t < NT; ++t) {
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s_lo[t], sc_lo));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s_hi[t], sc_hi));
      }
    }
  }
}

template <typename D, int NT>
COLIBRI_INLINE void K45SumsByChunk(const typename D::Block& b, const QuantizedRow* a, int64_t at,
                                   const Rows8Scales& scales, __m256i* isum) {
  for (int c = 0; c < 8; ++c) {
    const __m256i sc = scales.Scale(c);
    for (int g0 = 0; g0 < 8; g0 += D::kLoadsPerSum) {
      __m256i s[NT];
      for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int g = g0; g < g0 + D::kLoadsPerSum; ++g) {
        __m256i lo, hi;  // the half this chunk does not take is dropped unused
        D::Quants(b, c / 2, g, &lo, &hi);
        const __m256i q = c % 2 == 0 ? lo : hi;
        for (int t = 0; t < NT; ++t) {
          const int8_t* qa = a[t].qs + at + 32 * c + 4 * g;
          s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(q, Broadcast4(qa)));
        }
      }
      for (int t = 0; t < NT; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s[t], sc));
    }
  }
}

// Rows 8g .. 8g+7 (blk: their nb super-blocks) of Q4_K or Q5_K against NT
// tokens: y[t * y_stride + r] for r < 8. kLocality: the prefetch hint
// (kReadOnce for decode).
template <typename D, int NT, int kLocality>
void K45Group(const typename D::Block* blk, int64_t nb, const QuantizedRow* a, float* y,
              int64_t y_stride) {
  using Block = typename D::Block;
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const Block& b = blk[i];
    // Two super-blocks ahead; past the group's end that is the next group's
    // start (groups are contiguous), or nothing that can fault.
    PrefetchBytes<kLocality>(blk, (i + 2) * sizeof(Block), sizeof(Block));
    const Rows8Scales scales(b.scales);
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    if constexpr (NT >= 3 && D::kChunkOrderFor3Tokens) {
      K45SumsByChunk<D, NT>(b, a, 256 * i, scales, isum);
    } else {
      K45SumsByPair<D, NT>(b, a, 256 * i, scales, isum);
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.dmin)));
    for (int t = 0; t < NT; ++t) {
      acc[t] =
          AddSuperBlock8(acc[t], d, dmin, a[t].d[i], isum[t], scales.MinSums(a[t].bsums + 16 * i));
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

// Q6_K (Q6KRows8): three loads and 11 bit operations give the codes u = q +
// 32 of 4 elements of 4 chunks of the 8 rows (Q6KCodes). A group scale
// covers 16 elements, 4 loads; the products of two loads add up in int16
// (at most 2 * 2 * 63 * 128 = 32256) before a vpmaddwd by the group's 8
// scales (each repeated for its row's two lanes), so 16 elements of 8 rows
// take 4 vpmaddubsw and 2 vpmaddwd where the row-major tiles take 4 and 4.
// The offset, Σ sc (u - 32) a = Σ sc u a - 32 Σ_s sc_s bsum_s: the second
// sum for the 8 rows in 8 vpmaddwd per token and super-block, from the
// layout's scales two groups to a row side by side. The float update is
// vec_dot.h's, acc = acc + (d * da) * float(isum - 32 * bsum_dot), on the
// exact integers of the per-row kernels: the same bits.

// Codes of elements 4 g .. 4 g + 3 of chunks 4 n .. 4 n + 3 of the 8 rows
// from q[n][g]: c[k] holds chunk 4 n + k's, row r in bytes 4 r .. 4 r + 3.
COLIBRI_INLINE void Q6KCodes(const uint8_t (&planes)[3][8][4], __m256i c[4]) {
  const __m256i p0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(planes[0]));
  const __m256i p1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(planes[1]));
  const __m256i p2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(planes[2]));
  const __m256i low6 = _mm256_set1_epi8(0x3F);
  c[0] = _mm256_and_si256(p0, low6);
  c[1] = _mm256_and_si256(p1, low6);
  c[2] = _mm256_and_si256(p2, low6);
  // The planes' top 2 bits to bits 0-1, 2-3 and 4-5, by a 16-bit shift of 2
  // as each joins: every byte's bits 0-1 are clear before a shift, so a
  // word's high byte moves nothing into its low byte.
  __m256i top = _mm256_srli_epi16(_mm256_andnot_si256(low6, p0), 2);
  top = _mm256_srli_epi16(_mm256_or_si256(top, _mm256_andnot_si256(low6, p1)), 2);
  c[3] = _mm256_srli_epi16(_mm256_or_si256(top, _mm256_andnot_si256(low6, p2)), 2);
}

// Group scale 2 p + h of the 8 rows as 16 words, row r's in words 2 r and
// 2 r + 1 (pair: Q6KRows8's scales[p]).
COLIBRI_INLINE __m256i Q6KScale(const int8_t (&pair)[8][2], int h) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pair));
  const char a = static_cast<char>(h);
  const __m128i dup =
      _mm_shuffle_epi8(v, _mm_setr_epi8(a, a, a + 2, a + 2, a + 4, a + 4, a + 6, a + 6, a + 8,
                                        a + 8, a + 10, a + 10, a + 12, a + 12, a + 14, a + 14));
  return _mm256_cvtepi8_epi16(dup);
}

// isum[t] += lane r: Σ over the 16 groups of row r's scale times its codes'
// dot with token t's (a[t].qs + at), for one super-block of 8 rows; both
// orders form the same integers, as K45SumsByPair and K45SumsByChunk. By
// group: one decode of a load triple serves 4 chunks, 4 NT int16 sums; by
// chunk (3 or 4 tokens, which would spill): NT sums, each triple decoded for
// one chunk at a time (a small gain in cache, near the noise).
template <int NT>
COLIBRI_INLINE void Q6KSumsByGroup(const Q6KRows8& b, const QuantizedRow* a, int64_t at,
                                   __m256i* isum) {
#pragma GCC unroll 2
  for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      // Loads 4 h .. 4 h + 3 cover group 2 (4 n + k) + h of chunk 4 n + k.
      __m256i sc[4];
      for (int k = 0; k < 4; ++k) sc[k] = Q6KScale(b.scales[4 * n + k], h);
#pragma GCC unroll 2
      for (int g0 = 4 * h; g0 < 4 * h + 4; g0 += 2) {
        __m256i s16[4][NT];
        for (int k = 0; k < 4; ++k) {
          for (int t = 0; t < NT; ++t) s16[k][t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 2
        for (int g = g0; g < g0 + 2; ++g) {
          __m256i c[4];
          Q6KCodes(b.q[n][g], c);
          for (int k = 0; k < 4; ++k) {
            for (int t = 0; t < NT; ++t) {
              const int8_t* qa = a[t].qs + at + 128 * n + 32 * k + 4 * g;
              s16[k][t] = _mm256_add_epi16(s16[k][t], _mm256_maddubs_epi16(c[k], Broadcast4(qa)));
            }
          }
        }
        for (int k = 0; k < 4; ++k) {
          for (int t = 0; t < NT; ++t) {
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16[k][t], sc[k]));
          }
        }
      }
    }
  }
}

template <int NT>
COLIBRI_INLINE void Q6KSumsByChunk(const Q6KRows8& b, const QuantizedRow* a, int64_t at,
                                   __m256i* isum) {
  for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i sc = Q6KScale(b.scales[4 * n + k], h);
        for (int g0 = 4 * h; g0 < 4 * h + 4; g0 += 2) {
          __m256i s[NT];
          for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
          for (int g = g0; g < g0 + 2; ++g) {
            __m256i c[4];  // only c[k] is used; the others are dropped
            Q6KCodes(b.q[n][g], c);
            for (int t = 0; t < NT; ++t) {
              const int8_t* qa = a[t].qs + at + 128 * n + 32 * k + 4 * g;
              s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(c[k], Broadcast4(qa)));
            }
          }
          for (int t = 0; t < NT; ++t)
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s[t], sc));
        }
      }
    }
  }
}

template <int NT, int kLocality>
void Q6KGroup(const Q6KRows8* blk, int64_t nb, const QuantizedRow* a, float* y, int64_t y_stride) {
  // Super-blocks ahead to prefetch (6.6 KiB): 2, 4 and 7 measured alike
  // within the host's noise (decode of 2048 x 768 and 151936 x 2048, 1 and 2
  // threads, Zen 1, 3 alternated runs each).
  constexpr int64_t kAhead = 4;
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const Q6KRows8& b = blk[i];
    PrefetchBytes<kLocality>(blk, (i + kAhead) * sizeof(Q6KRows8), sizeof(Q6KRows8));
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    if constexpr (NT >= 3) {
      Q6KSumsByChunk<NT>(b, a, 256 * i, isum);
    } else {
      Q6KSumsByGroup<NT>(b, a, 256 * i, isum);
    }
    __m256i bsum_dot[NT];
    Q6KBsumDots<NT>(b.scales, a, i, bsum_dot);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    for (int t = 0; t < NT; ++t)
      acc[t] = AddQ6KSuperBlock8(acc[t], d, a[t].d[i], isum[t], bsum_dot[t]);
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

struct Q6KInterleaved {
  using Block = Q6KRows8;
  template <int NT, int kLocality>
  static void Group(const Block* blk, int64_t nb, const QuantizedRow* a, float* y, int64_t stride) {
    Q6KGroup<NT, kLocality>(blk, nb, a, y, stride);
  }
};

// The 32-element block types. Per block and token, each row's 32 products
// go into 8 quad sums (vpmaddubsw, vpmaddwd), SumLanes8 turns the 8 rows' quad
// sums into one vector of their exact block sums, rows in lane order, and
//   acc = acc + (dw * da) * float(sum)
// updates the 8 rows in one 8-lane operation: vec_dot.h's order, so every
// output is bitwise the row-major tiles' and MatMulReference's.

// Q8_0: a group's 8 block scales as floats (Scales) and row r's 32 quants as
// signed bytes (Quants).
struct Q80Interleaved {
  using Group = Q80Rows8;
  COLIBRI_INLINE static __m256i Quants(const Group& g, int r) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.qs[r]));
  }
  COLIBRI_INLINE static __m256 Scales(const Group& g) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.d)));
  }
};

// Stores the 8 rows of each of T tokens' accumulators.
template <int T>
COLIBRI_INLINE void StoreRows(const __m256 (&acc)[T], float* y, int64_t y_stride) {
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

// A pass of Q8_0 over a group of 8 rows and T tokens: the sign trick (|w|
// times a with w's sign) per row and token. kLocality: the prefetch hint.
template <typename D, int T, int kLocality>
void Blocks32Pass(const typename D::Group* blk, int64_t nb, const QuantizedRow* a, float* y,
                  int64_t y_stride) {
  using Group = typename D::Group;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Group& g = blk[b];
    PrefetchBytes<kLocality>(blk, (b + 4) * sizeof(Group), sizeof(Group));
    const __m256 dw = D::Scales(g);
    for (int t = 0; t < T; ++t) {
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + 32 * b));
      __m256i p[kInterleaveRows];
      for (int r = 0; r < kInterleaveRows; ++r) {
        const __m256i qx = D::Quants(g, r);
        p[r] = DotU8S8Quads(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qa, qx));
      }
      const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(a[t].d[b]));
      acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(SumLanes8(p))));
    }
  }
  StoreRows<T>(acc, y, y_stride);
}

// QuantTileFn for Q8_0 over full groups of 8 rows: tokens in passes of up to
// 4 (a group's weights stay in L1 across them); one token streams the
// weights with the read-once prefetch.
template <typename D>
void InterleavedBlocks32Tile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
                             const uint8_t* act, const ActivationLayout& layout, int64_t n_tokens,
                             float* y, int64_t y_stride) {
  QuantizedRow a[kMaxTokenTile];
  QuantizedRow::AtEach(layout, act, n_tokens, a);
  const int64_t nb = layout.cols / 32;
  for (int64_t g = 0; g < n_rows; g += kInterleaveRows) {
    const auto* blk = reinterpret_cast<const typename D::Group*>(w + g * row_bytes);
    if (n_tokens == 1) {
      Blocks32Pass<D, 1, kReadOnce>(blk, nb, a, y + g, y_stride);
      continue;
    }
    for (int64_t t = 0; t < n_tokens; t += 4) {
      float* yt = y + g + t * y_stride;
      switch (n_tokens - t < 4 ? n_tokens - t : 4) {
        case 1:
          Blocks32Pass<D, 1, 3>(blk, nb, a + t, yt, y_stride);
          break;
        case 2:
          Blocks32Pass<D, 2, 3>(blk, nb, a + t, yt, y_stride);
          break;
        case 3:
          Blocks32Pass<D, 3, 3>(blk, nb, a + t, yt, y_stride);
          break;
        default:
          Blocks32Pass<D, 4, 3>(blk, nb, a + t, yt, y_stride);
          break;
      }
    }
  }
}

// The 4- and 5-bit types with the 8 rows' code bytes four at a time
// (MXFP4Rows8, Q40Rows8, Q41Rows8, Q50Rows8, Q51Rows8, IQ4NLRows8). A type D gives its group's 8
// block scales as floats (Scales) and, from a Decoder made once per pass, each code's value plus
// D::kOffset, unsigned (Values), so that vpmaddubsw takes them as they are:
//   Σ (u - kOffset) * a = Σ u * a - kOffset * Σ a,
// the second term once per block and token for all rows. Load k of a block
// holds elements 4 k .. 4 k + 3 (low nibbles) and 16 + 4 k .. (high nibbles)
// of the 8 rows; against the token's matching 4 activation bytes (one
// broadcast) a vpmaddubsw leaves two int16 pair sums per row, rows in lane
// order, as the K-quant tiles above do. D::kSumsPerMadd of them add up in
// int16 (Q4_0's values plus 8: 8 * 2 * 15 * 128 = 30720; MXFP4's plus 12, 4 *
// 2 * 24 * 128 = 24576: no wrap) before a vpmaddwd by ones makes them one
// int32 per row: 9 (MXFP4 10) multiplies per block for 8 rows, where
// per-row quad sums take 16 and a horizontal reduction.

// MXFP4: 8 rows' e8m0 exponents as the floats E8M0Half gives (bit for bit:
// 2^-128 and 2^-127 are subnormal, built by a variable shift).
COLIBRI_INLINE __m256 E8M0x8(const uint8_t* e) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
  const __m256i is_subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, is_subnormal));
}

// The Decoder of the types whose codes are their values plus kOffset.
struct CodesAreValues {
  COLIBRI_INLINE __m256i Values(__m256i codes) const { return codes; }
};

// 8 rows' fp16 scales (or mins) as floats.
COLIBRI_INLINE __m256 Halves8(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

// The MXFP4 values plus 12, by code: 0 .. 24.
struct Mxfp4Plus12 {
  alignas(16) int8_t values[16];
};
constexpr Mxfp4Plus12 MakeMxfp4Plus12() {
  Mxfp4Plus12 t{};
  for (int code = 0; code < 16; ++code) {
    t.values[code] = static_cast<int8_t>(kMxfp4Values[code] + 12);
  }
  return t;
}
constexpr Mxfp4Plus12 kMxfp4Plus12 = MakeMxfp4Plus12();

struct Mxfp4Quads {
  using Group = MXFP4Rows8;
  static constexpr int kOffset = 12;
  static constexpr int kSumsPerMadd = 4;
  static constexpr bool kSignTrick = false;
  COLIBRI_INLINE static __m256 Scales(const Group& g) { return E8M0x8(g.e); }
  struct Decoder {
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4Plus12.values)));
    COLIBRI_INLINE __m256i Values(__m256i codes) const { return _mm256_shuffle_epi8(table, codes); }
  };
};

// Q4_0: value = code - 8, so the code is the value plus 8.
struct Q40Quads {
  using Group = Q40Rows8;
  static constexpr int kOffset = 8;
  static constexpr int kSumsPerMadd = 8;
  static constexpr bool kSignTrick = false;
  COLIBRI_INLINE static __m256 Scales(const Group& g) { return Halves8(g.d); }
  using Decoder = CodesAreValues;
};

// Q4_1: the code is the value (before the min), unsigned already; Q8_1
// activations, whose s (d * the block's sum) meets the rows' fp16 mins.
struct Q41Quads {
  using Group = Q41Rows8;
  static constexpr int kOffset = 0;
  static constexpr int kSumsPerMadd = 8;
  static constexpr bool kSignTrick = false;
  COLIBRI_INLINE static __m256 Scales(const Group& g) { return Halves8(g.d); }
  COLIBRI_INLINE static __m256 Mins(const Group& g) { return Halves8(g.m); }
  using Decoder = CodesAreValues;
};

// Q5_0: the 5-bit code (the value plus 16) is the nibble plus 16 where the
// element's bit in qh is set (AddFifthBits).
struct Q50Quads {
  using Group = Q50Rows8;
  static constexpr int kOffset = 16;
  static constexpr int kSumsPerMadd = 4;  // 4 * 2 * 31 * 128 = 31744
  static constexpr bool kSignTrick = false;
  COLIBRI_INLINE static __m256 Scales(const Group& g) { return Halves8(g.d); }
  using Decoder = CodesAreValues;
};

// Q5_1: Q5_0's codes, unsigned values with Q4_1's mins.
struct Q51Quads {
  using Group = Q51Rows8;
  static constexpr int kOffset = 0;
  static constexpr int kSumsPerMadd = 4;
  static constexpr bool kSignTrick = false;
  COLIBRI_INLINE static __m256 Scales(const Group& g) { return Halves8(g.d); }
  COLIBRI_INLINE static __m256 Mins(const Group& g) { return Halves8(g.m); }
  using Decoder = CodesAreValues;
};

// IQ4_NL: values -127 .. 113 by table, which plus 128 would overflow
// vpmaddubsw's pairs; they go in signed, with the sign trick per load (|v|
// times a with v's sign: pairs up to 2 * 127 * 127, one vpmaddwd per load).
struct IQ4NLQuads {
  using Group = IQ4NLRows8;
  static constexpr int kOffset = 0;
  static constexpr int kSumsPerMadd = 1;
  static constexpr bool kSignTrick = true;
  COLIBRI_INLINE static __m256 Scales(const Group& g) { return Halves8(g.d); }
  struct Decoder {
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    COLIBRI_INLINE __m256i Values(__m256i codes) const { return _mm256_shuffle_epi8(table, codes); }
  };
};

template <typename Group>
constexpr bool kHasMins = std::is_same_v<Group, Q41Rows8> || std::is_same_v<Group, Q51Rows8>;
template <typename Group>
constexpr bool kHasFifthBits = std::is_same_v<Group, Q50Rows8> || std::is_same_v<Group, Q51Rows8>;

// qh: the 8 rows' qh words, rows in lane order. Adds 16 to the codes in lo
// (elements 4 k .. 4 k + 3 of load k) and hi (16 + 4 k ..) whose 5th bit is
// set: byte k / 2 (lo) or 2 + k / 2 (hi) of each row's word spread over the
// row's 4 bytes, bit 4 (k % 2) + b of it tested in byte b.
COLIBRI_INLINE __m256i SpreadByte(__m256i qh, int j) {
  return _mm256_shuffle_epi8(
      qh, _mm256_add_epi8(_mm256_set1_epi8(static_cast<char>(j)),
                          _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0,
                                           0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12)));
}
COLIBRI_INLINE void AddFifthBits(__m256i qh, int k, __m256i* lo, __m256i* hi) {
  const __m256i bit = _mm256_set1_epi32(k % 2 == 0 ? 0x08040201 : static_cast<int>(0x80402010u));
  const __m256i sixteen = _mm256_set1_epi8(16);
  const __m256i lo_set = _mm256_cmpeq_epi8(_mm256_and_si256(SpreadByte(qh, k / 2), bit), bit);
  const __m256i hi_set = _mm256_cmpeq_epi8(_mm256_and_si256(SpreadByte(qh, 2 + k / 2), bit), bit);
  *lo = _mm256_or_si256(*lo, _mm256_and_si256(lo_set, sixteen));
  *hi = _mm256_or_si256(*hi, _mm256_and_si256(hi_set, sixteen));
}

// A pass over a group of 8 rows and T tokens: per block the 8 vectors of
// values (four loads, two masks each, and the 5th bits where the type has
// them) serve every token; per token the rows' block sums minus offsets[t *
// nb + b] (kOffset x the sum of token t's block b; none where kOffset is 0)
// are the exact integers of the per-row kernels. For the types with mins a
// second sum adds m * s per block, added to the first at the end.
template <typename D, int T, int kLocality>
void NibbleQuadsPass(const typename D::Group* blk, int64_t nb, const QuantizedRow* a,
                     const int32_t* offsets, float* y, int64_t y_stride) {
  using Group = typename D::Group;
  __m256 acc[T], summs[T];
  for (int t = 0; t < T; ++t) acc[t] = summs[t] = _mm256_setzero_ps();
  const typename D::Decoder decoder;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const Group& g = blk[b];
    PrefetchBytes<kLocality>(blk, (b + 8) * sizeof(Group), sizeof(Group));
    const __m256 dw = D::Scales(g);
    __m256 mw = _mm256_setzero_ps();
    if constexpr (kHasMins<Group>) mw = D::Mins(g);
    // u[k]: elements 4 k .. 4 k + 3 of the 8 rows.
    __m256i u[8];
    for (int k = 0; k < 4; ++k) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.qs[k]));
      u[k] = decoder.Values(_mm256_and_si256(q, m4));
      u[k + 4] = decoder.Values(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    }
    if constexpr (kHasFifthBits<Group>) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.qh));
      for (int k = 0; k < 4; ++k) AddFifthBits(qh, k, &u[k], &u[k + 4]);
    }
    for (int t = 0; t < T; ++t) {
      const int8_t* qa = a[t].qs + 32 * b;
      __m256i sums = _mm256_setzero_si256();
      for (int k0 = 0; k0 < 8; k0 += D::kSumsPerMadd) {
        __m256i s16 = _mm256_setzero_si256();
        for (int k = k0; k < k0 + D::kSumsPerMadd; ++k) {
          int32_t quad;
          std::memcpy(&quad, qa + 4 * k, 4);
          const __m256i ak = _mm256_set1_epi32(quad);
          if constexpr (D::kSignTrick) {
            // |v| per token: holding 8 magnitudes beside the 8 values for
            // all tokens spills registers (measured slower for IQ4_NL).
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_sign_epi8(u[k], u[k]),
                                                             _mm256_sign_epi8(ak, u[k])));
          } else {
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(u[k], ak));
          }
        }
        sums = _mm256_add_epi32(sums, _mm256_madd_epi16(s16, ones));
      }
      if constexpr (D::kOffset != 0) {
        sums = _mm256_sub_epi32(sums, _mm256_set1_epi32(offsets[t * nb + b]));
      }
      const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(a[t].d[b]));
      acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(dd, _mm256_cvtepi32_ps(sums)));
      if constexpr (kHasMins<Group>) {
        summs[t] = _mm256_add_ps(summs[t], _mm256_mul_ps(mw, _mm256_set1_ps(a[t].s[b])));
      }
    }
  }
  if constexpr (kHasMins<Group>) {
    for (int t = 0; t < T; ++t) acc[t] = _mm256_add_ps(acc[t], summs[t]);
  }
  StoreRows<T>(acc, y, y_stride);
}

// QuantTileFn for a type of NibbleQuadsPass over full groups of 8 rows,
// passes as InterleavedBlocks32Tile's. The offsets are formed once per call.
template <typename D>
void InterleavedNibbleQuadsTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
                                const uint8_t* act, const ActivationLayout& layout,
                                int64_t n_tokens, float* y, int64_t y_stride) {
  using Group = typename D::Group;
  QuantizedRow a[kMaxTokenTile];
  QuantizedRow::AtEach(layout, act, n_tokens, a);
  const int64_t nb = layout.cols / 32;
  thread_local std::vector<int32_t> offset_store;
  const int32_t* offsets = nullptr;
  if constexpr (D::kOffset != 0) {
    offset_store.resize(static_cast<size_t>(n_tokens * nb));
    const __m256i offset_bytes = _mm256_set1_epi8(D::kOffset);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t b = 0; b < nb; ++b) {
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + 32 * b));
        offset_store[t * nb + b] = SumLanes(DotU8S8Quads(offset_bytes, qa));
      }
    }
    offsets = offset_store.data();
  }
  for (int64_t g = 0; g < n_rows; g += kInterleaveRows) {
    const auto* blk = reinterpret_cast<const Group*>(w + g * row_bytes);
    if (n_tokens == 1) {
      NibbleQuadsPass<D, 1, kReadOnce>(blk, nb, a, offsets, y + g, y_stride);
      continue;
    }
    for (int64_t t = 0; t < n_tokens; t += 4) {
      float* yt = y + g + t * y_stride;
      const int32_t* off = offsets == nullptr ? nullptr : offsets + t * nb;
      switch (n_tokens - t < 4 ? n_tokens - t : 4) {
        case 1:
          NibbleQuadsPass<D, 1, 3>(blk, nb, a + t, off, yt, y_stride);
          break;
        case 2:
          NibbleQuadsPass<D, 2, 3>(blk, nb, a + t, off, yt, y_stride);
          break;
        case 3:
          NibbleQuadsPass<D, 3, 3>(blk, nb, a + t, off, yt, y_stride);
          break;
        default:
          NibbleQuadsPass<D, 4, 3>(blk, nb, a + t, off, yt, y_stride);
          break;
      }
    }
  }
}

}  // namespace

void InstallInterleavedTiles(KernelSet* k) {
  k->interleaved_tile[Slot(TensorType::kQ4_K)] = &InterleavedGroupsTile<Q4KInterleaved>;
  k->interleaved_tile[Slot(TensorType::kQ5_K)] = &InterleavedGroupsTile<Q5KInterleaved>;
  k->interleaved_tile[Slot(TensorType::kQ6_K)] = &InterleavedGroupsTile<Q6KInterleaved>;
  k->interleaved_tile[Slot(TensorType::kQ8_0)] = &InterleavedBlocks32Tile<Q80Interleaved>;
  k->interleaved_tile[Slot(TensorType::kMXFP4)] = &InterleavedNibbleQuadsTile<Mxfp4Quads>;
  k->interleaved_tile[Slot(TensorType::kQ4_0)] = &InterleavedNibbleQuadsTile<Q40Quads>;
  k->interleaved_tile[Slot(TensorType::kQ4_1)] = &InterleavedNibbleQuadsTile<Q41Quads>;
  k->interleaved_tile[Slot(TensorType::kQ5_0)] = &InterleavedNibbleQuadsTile<Q50Quads>;
  k->interleaved_tile[Slot(TensorType::kQ5_1)] = &InterleavedNibbleQuadsTile<Q51Quads>;
  k->interleaved_tile[Slot(TensorType::kIQ4_NL)] = &InterleavedNibbleQuadsTile<IQ4NLQuads>;
}

}  // namespace colibri::ops::internal::avx2
