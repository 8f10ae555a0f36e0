// AVX-512 VNNI wide GEMM tiles for Q4_K, Q5_K and Q6_K prompts: one weight
// row against 9-16 tokens, or two rows against 5-8 tokens, per vector of
// results (see gemm_avx512_blocks.h).
//
// The 4 x 4 tiles decode each weight super-block once per 4 tokens, and
// decoding (unpacking the quants, spreading the scales) is about a third of
// their work. Here a super-block is decoded once per 5-16 tokens, and the terms
// that do not involve the quants are formed for all tokens at once:
//  - for one row and super-block, token t's main sum Σ_g sc_g Σ q*qa is built
//    exactly as in the 4 x 4 tile (vpdpbusd per 64-element part, vpackssdw,
//    vpdpwssd by the group scales) into 16 int32 lanes; SumLanes16 over the
//    16 tokens' vectors gives one vector holding the 16 totals, lane t for
//    token t (with 5-8 tokens, two rows share the vector: lane 8j + t);
//  - the activations' group sums are transposed once per call into pairs
//    (lane t of pair vector k = bsum[2k], bsum[2k+1] of token t), so the min
//    term Σ m*bsum (Q4_K, Q5_K) and the Q6_K offset term -32 Σ sc*bsum are
//    eight vpdpwssd per row and super-block for all tokens, against the row's
//    factors broadcast pair by pair.
// Every integer is the exact one the other tiles form (|partial sums| <
// 2^31, as in gemm_avx512.cc), and per output the float update
//   acc = acc + (d * da) * float(isum);  acc = acc - (dmin * da) * float(msum)
// runs super-block by super-block in the canonical order of vec_dot.h, so
// the results are bitwise those of every other kernel set.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "model/ops/avx2_common.h"
#include "model/ops/gemm_avx512_blocks.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal::gemm_avx512 {
namespace {

constexpr int kWideRows = 4;

// Per super-block terms of the token block that do not depend on the weights,
// lane l for token l % kT (kT = 16 or 8 tokens per row; zeros for no token).
struct alignas(64) BlockTerms {
  int32_t bsum_pairs[8][16];  // [k][l]: bsums[2k], bsums[2k + 1] of the token
  float da[16];               // activation scale of the token
};

// One thread's transposed terms, grown to the widest matrix it has seen.
std::vector<BlockTerms>& TermsScratch() {
  thread_local std::vector<BlockTerms> terms;
  return terms;
}

void PrepareTerms(const QuantizedRow* a, int64_t n_tokens, int kT, int64_t nb, BlockTerms* terms) {
  std::memset(static_cast<void*>(terms), 0, static_cast<size_t>(nb) * sizeof(BlockTerms));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < nb; ++i) {
      BlockTerms& b = terms[i];
      int32_t pairs[8];
      std::memcpy(pairs, a[t].bsums + 16 * i, sizeof(pairs));
      for (int l = static_cast<int>(t); l < 16; l += kT) {
        for (int k = 0; k < 8; ++k) b.bsum_pairs[k][l] = pairs[k];
        b.da[l] = a[t].d[i];
      }
    }
  }
}

// Lanes [j * kT, (j + 1) * kT) hold v[j], for j < 16 / kT.
template <int kT>
COLIBRI_INLINE __m512i Segments(const int32_t* v) {
  if constexpr (kT == 16) {
    return _mm512_set1_epi32(v[0]);
  } else {
    return _mm512_mask_set1_epi32(_mm512_set1_epi32(v[0]), 0xFF00, v[1]);
  }
}
template <int kT>
COLIBRI_INLINE __m512 Segments(const float* v) {
  if constexpr (kT == 16) {
    return _mm512_set1_ps(v[0]);
  } else {
    return _mm512_mask_mov_ps(_mm512_set1_ps(v[0]), 0xFF00, _mm512_set1_ps(v[1]));
  }
}

// Σ over k of the pair products of terms.bsum_pairs[k] and the k-th int16
// pair of row j's 16 int16 factors (f[j][k]) in row j's lanes.
template <int kT>
COLIBRI_INLINE __m512i PairTerm(const BlockTerms& terms, const int32_t (*f)[8]) {
  constexpr int kRv = 16 / kT;
  __m512i sum = _mm512_setzero_si512();
  for (int k = 0; k < 8; ++k) {
    int32_t fk[kRv];
    for (int j = 0; j < kRv; ++j) fk[j] = f[j][k];
    sum = _mm512_dpwssd_epi32(sum, _mm512_load_si512(terms.bsum_pairs[k]), Segments<kT>(fk));
  }
  return sum;
}

// Software prefetch of one super-block (never faults; see gemm_avx512.cc).
COLIBRI_INLINE void Prefetch(const uint8_t* p, uint64_t offset, uint64_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + offset;
  for (uint64_t b = 0; b < bytes; b += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(at + b), _MM_HINT_T0);
  }
}

// n_rows <= 4 rows (at w, row_bytes apart) x n_tokens <= kT tokens. Each
// vector of 16 lanes holds 16 / kT rows x kT tokens (lane j * kT + t).
template <typename D, int kT>
void RowsTile(const uint8_t* w, uint64_t row_bytes, int n_rows, const QuantizedRow* a, int n_tokens,
              int64_t nb, const BlockTerms* terms, float* y, int64_t y_stride) {
  using Block = typename D::Block;
  constexpr int kRv = 16 / kT;          // rows per vector
  constexpr int kNv = kWideRows / kRv;  // vectors per tile
  const __m512i index01 = _mm512_load_si512(kScaleIndex01);
  const __m512i index23 = _mm512_load_si512(kScaleIndex23);
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[kNv];
  for (int v = 0; v < kNv; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    // The next rows' super-block, one tile ahead.
    for (int r = 0; r < kWideRows; ++r) {
      Prefetch(w, (kWideRows + r) * row_bytes + i * sizeof(Block), sizeof(Block));
    }
    const __m512 da = _mm512_load_ps(terms[i].da);
    for (int v = 0; v < kNv; ++v) {
      __m512i s[16];
      float d[kRv] = {}, dmin[kRv] = {};
      alignas(32) int32_t mins[kRv][8] = {}, bias[kRv][8] = {};
      for (int j = 0; j < kRv; ++j) {
        const int r = v * kRv + j;
        if (r >= n_rows) {
          for (int t = 0; t < kT; ++t) s[j * kT + t] = zero;
          continue;
        }
        const Block& block = reinterpret_cast<const Block*>(w + r * row_bytes)[i];
        const D dec(block);
        d[j] = dec.d();
        dmin[j] = dec.dmin();
        const __m256i sc16 = dec.GroupScales();
        const __m512i sc = _mm512_castsi256_si512(sc16);
        const __m512i s01 = _mm512_permutexvar_epi16(index01, sc);
        const __m512i s23 = _mm512_permutexvar_epi16(index23, sc);
        __m512i u[4];
        for (int p = 0; p < 4; ++p) u[p] = dec.Quants(p);
#pragma GCC unroll 16
        for (int t = 0; t < kT; ++t) {
          if (t < n_tokens) {
            const int8_t* qa = a[t].qs + kQK_K * i;
            __m512i q[4];
            for (int p = 0; p < 4; ++p) {
              q[p] = _mm512_dpbusd_epi32(zero, u[p], _mm512_loadu_si512(qa + 64 * p));
            }
            const __m512i x = _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(q[0], q[1]), s01);
            s[j * kT + t] = _mm512_dpwssd_epi32(x, _mm512_packs_epi32(q[2], q[3]), s23);
          } else {
            s[j * kT + t] = zero;
          }
        }
        if constexpr (D::kOffset != 0) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(bias[j]),
                             _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-D::kOffset)));
        }
        if constexpr (D::kHasMin) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(mins[j]), dec.MinFactor());
        }
      }
      __m512i isum = SumLanes16(s);
      if constexpr (D::kOffset != 0) isum = _mm512_add_epi32(isum, PairTerm<kT>(terms[i], bias));
      acc[v] = _mm512_add_ps(
          acc[v], _mm512_mul_ps(_mm512_mul_ps(Segments<kT>(d), da), _mm512_cvtepi32_ps(isum)));
      if constexpr (D::kHasMin) {
        const __m512i msum = PairTerm<kT>(terms[i], mins);
        acc[v] = _mm512_sub_ps(
            acc[v], _mm512_mul_ps(_mm512_mul_ps(Segments<kT>(dmin), da), _mm512_cvtepi32_ps(msum)));
      }
    }
  }
  for (int v = 0; v < kNv; ++v) {
    alignas(64) float out[16];
    _mm512_store_ps(out, acc[v]);
    for (int j = 0; j < kRv; ++j) {
      const int r = v * kRv + j;
      if (r >= n_rows) break;
      for (int t = 0; t < n_tokens; ++t) y[t * y_stride + r] = out[j * kT + t];
    }
  }
}

template <typename D, int kT>
void Tiles(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const QuantizedRow* a,
           int n_tokens, int64_t nb, const BlockTerms* terms, float* y, int64_t y_stride) {
  for (int64_t r0 = 0; r0 < n_rows; r0 += kWideRows) {
    const int nr = static_cast<int>(n_rows - r0 < kWideRows ? n_rows - r0 : kWideRows);
    RowsTile<D, kT>(w + r0 * row_bytes, row_bytes, nr, a, n_tokens, nb, terms, y + r0, y_stride);
  }
}

}  // namespace

template <typename D>
void WideTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
              const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  const int64_t nb = layout.cols / kQK_K;
  QuantizedRow a[kWideTokens];
  QuantizedRow::AtEach(layout, act, n_tokens, a);
  std::vector<BlockTerms>& terms = TermsScratch();
  if (terms.size() < static_cast<size_t>(nb)) terms.resize(nb);
  const int nt = static_cast<int>(n_tokens);
  if (nt > 8) {
    PrepareTerms(a, n_tokens, 16, nb, terms.data());
    Tiles<D, 16>(w, row_bytes, n_rows, a, nt, nb, terms.data(), y, y_stride);
  } else {
    PrepareTerms(a, n_tokens, 8, nb, terms.data());
    Tiles<D, 8>(w, row_bytes, n_rows, a, nt, nb, terms.data(), y, y_stride);
  }
}

template void WideTile<Q45K<false>>(const uint8_t*, uint64_t, int64_t, const uint8_t*,
                                    const ActivationLayout&, int64_t, float*, int64_t);
template void WideTile<Q45K<true>>(const uint8_t*, uint64_t, int64_t, const uint8_t*,
                                   const ActivationLayout&, int64_t, float*, int64_t);
template void WideTile<Q6K>(const uint8_t*, uint64_t, int64_t, const uint8_t*,
                            const ActivationLayout&, int64_t, float*, int64_t);

}  // namespace colibri::ops::internal::gemm_avx512
