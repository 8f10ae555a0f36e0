// AVX-512 VNNI wide GEMM tiles for Q4_K, Q5_K and Q6_K prompts: one weight
// row at a time against up to 16 tokens (see gemm_avx512_blocks.h).
//
// The 4 x 4 tiles decode each weight super-block once per 4 tokens, and
// decoding (unpacking the quants, spreading the scales) is about a third of
// their work. Here a super-block is decoded once per 16 tokens, and the terms
// that do not involve the quants are formed for all 16 tokens at once:
//  - for one row and super-block, token t's main sum Σ_g sc_g Σ q*qa is built
//    exactly as in the 4 x 4 tile (vpdpbusd per 64-element part, vpackssdw,
//    vpdpwssd by the group scales) into 16 int32 lanes; SumLanes16 over the
//    16 tokens' vectors gives one vector holding the 16 totals, lane t for
//    token t;
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

// Per super-block terms of the token block that do not depend on the weights.
struct alignas(64) BlockTerms {
  int32_t bsum_pairs[8][kWideTokens];  // [k][t]: bsums[2k], bsums[2k + 1] of token t
  float da[kWideTokens];               // activation scale of token t (0: no token)
};

// One thread's transposed terms, grown to the widest matrix it has seen.
std::vector<BlockTerms>& TermsScratch() {
  thread_local std::vector<BlockTerms> terms;
  return terms;
}

void PrepareTerms(const QuantizedRow* a, int64_t n_tokens, int64_t nb, BlockTerms* terms) {
  std::memset(static_cast<void*>(terms), 0, static_cast<size_t>(nb) * sizeof(BlockTerms));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < nb; ++i) {
      BlockTerms& b = terms[i];
      int32_t pairs[8];
      std::memcpy(pairs, a[t].bsums + 16 * i, sizeof(pairs));
      for (int k = 0; k < 8; ++k) b.bsum_pairs[k][t] = pairs[k];
      b.da[t] = a[t].d[i];
    }
  }
}

// Σ over k of the pair products of terms.bsum_pairs[k] and the k-th int16
// pair of `factors` (16 int16): lane t for token t.
COLIBRI_INLINE __m512i PairTerm(const BlockTerms& terms, __m256i factors) {
  alignas(32) int32_t f[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(f), factors);
  __m512i sum = _mm512_setzero_si512();
  for (int k = 0; k < 8; ++k) {
    sum = _mm512_dpwssd_epi32(sum, _mm512_load_si512(terms.bsum_pairs[k]), _mm512_set1_epi32(f[k]));
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

// kNr rows (at w, row_bytes apart) x n_tokens <= 16 tokens.
template <typename D, int kNr>
void RowsTile(const uint8_t* w, uint64_t row_bytes, const QuantizedRow* a, int n_tokens, int64_t nb,
              const BlockTerms* terms, float* y, int64_t y_stride) {
  using Block = typename D::Block;
  const __m512i index01 = _mm512_load_si512(kScaleIndex01);
  const __m512i index23 = _mm512_load_si512(kScaleIndex23);
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[kNr];
  for (int r = 0; r < kNr; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    // The next rows' super-block, one row group ahead.
    for (int r = 0; r < kNr; ++r) {
      Prefetch(w, (kWideRows + r) * row_bytes + i * sizeof(Block), sizeof(Block));
    }
    const __m512 da = _mm512_load_ps(terms[i].da);
    for (int r = 0; r < kNr; ++r) {
      const Block& block = reinterpret_cast<const Block*>(w + r * row_bytes)[i];
      const D dec(block);
      const __m256i sc16 = dec.GroupScales();
      const __m512i sc = _mm512_castsi256_si512(sc16);
      const __m512i s01 = _mm512_permutexvar_epi16(index01, sc);
      const __m512i s23 = _mm512_permutexvar_epi16(index23, sc);
      __m512i u[4];
      for (int p = 0; p < 4; ++p) u[p] = dec.Quants(p);
      __m512i s[kWideTokens];
#pragma GCC unroll 16
      for (int t = 0; t < kWideTokens; ++t) {
        if (t < n_tokens) {
          const int8_t* qa = a[t].qs + kQK_K * i;
          __m512i v[4];
          for (int p = 0; p < 4; ++p) {
            v[p] = _mm512_dpbusd_epi32(zero, u[p], _mm512_loadu_si512(qa + 64 * p));
          }
          const __m512i x = _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(v[0], v[1]), s01);
          s[t] = _mm512_dpwssd_epi32(x, _mm512_packs_epi32(v[2], v[3]), s23);
        } else {
          s[t] = zero;
        }
      }
      __m512i isum = SumLanes16(s);
      if constexpr (D::kOffset != 0) {
        const __m256i bias_factor = _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-D::kOffset));
        isum = _mm512_add_epi32(isum, PairTerm(terms[i], bias_factor));
      }
      acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(dec.d()), da),
                                                   _mm512_cvtepi32_ps(isum)));
      if constexpr (D::kHasMin) {
        const __m512i msum = PairTerm(terms[i], dec.MinFactor());
        acc[r] = _mm512_sub_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(dec.dmin()), da),
                                                     _mm512_cvtepi32_ps(msum)));
      }
    }
  }
  for (int r = 0; r < kNr; ++r) {
    alignas(64) float out[kWideTokens];
    _mm512_store_ps(out, acc[r]);
    for (int t = 0; t < n_tokens; ++t) y[t * y_stride + r] = out[t];
  }
}

}  // namespace

template <typename D>
void WideTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
              const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  const int64_t nb = layout.cols / kQK_K;
  QuantizedRow a[kWideTokens];
  for (int64_t t = 0; t < n_tokens; ++t) {
    a[t] = QuantizedRow::At(layout, act + t * layout.row_bytes);
  }
  std::vector<BlockTerms>& terms = TermsScratch();
  if (terms.size() < static_cast<size_t>(nb)) terms.resize(nb);
  PrepareTerms(a, n_tokens, nb, terms.data());
  const int nt = static_cast<int>(n_tokens);
  int64_t r0 = 0;
  for (; r0 + kWideRows <= n_rows; r0 += kWideRows) {
    RowsTile<D, kWideRows>(w + r0 * row_bytes, row_bytes, a, nt, nb, terms.data(), y + r0,
                           y_stride);
  }
  const uint8_t* rest = w + r0 * row_bytes;
  switch (n_rows - r0) {
    case 1:
      RowsTile<D, 1>(rest, row_bytes, a, nt, nb, terms.data(), y + r0, y_stride);
      break;
    case 2:
      RowsTile<D, 2>(rest, row_bytes, a, nt, nb, terms.data(), y + r0, y_stride);
      break;
    case 3:
      RowsTile<D, 3>(rest, row_bytes, a, nt, nb, terms.data(), y + r0, y_stride);
      break;
    default:
      break;
  }
}

template void WideTile<Q45K<false>>(const uint8_t*, uint64_t, int64_t, const uint8_t*,
                                    const ActivationLayout&, int64_t, float*, int64_t);
template void WideTile<Q45K<true>>(const uint8_t*, uint64_t, int64_t, const uint8_t*,
                                   const ActivationLayout&, int64_t, float*, int64_t);
template void WideTile<Q6K>(const uint8_t*, uint64_t, int64_t, const uint8_t*,
                            const ActivationLayout&, int64_t, float*, int64_t);

}  // namespace colibri::ops::internal::gemm_avx512
