// AVX-512 VNNI tile for one token (decode) against Q4_K weights in the
// kInterleaved8 layout (weight_layout.h), 8 rows at a time.
//
// Why the layout: a one-token product is bound by how fast the weights
// stream from memory. The row-major 4-row tiles of gemm_avx512.cc read four
// rows 1-2 KiB apart, plus a software prefetch stream; a group of 8
// interleaved rows is one contiguous run of bytes. On an AMD Zen 5 (2
// threads, colibri_ops_bench --kernels=all --layout=both --rows=16384
// --cols=2048) the AVX2 set's 8-row tile streamed Q4_K at 44 GB/s where the
// row-major AVX-512 tile reached 38, though the latter computes 15% faster in
// cache. This tile reads the interleaved bytes with the AVX-512 instructions.
//
// The integers, per super-block of 8 rows. A 64-byte load holds Q4KRows8's
// qs[p][g] and qs[p][g+1] (g even): 4 quant bytes of each row for g, then
// for g+1. One vpermd puts them as (row r, g) in dword 2r and (row r, g+1) in
// 2r+1, so that the token's 8 activation bytes 4g .. 4g+7, broadcast as one
// qword, meet them in every lane. The low nibbles (chunk 2p) and the high
// nibbles (chunk 2p+1) each go through vpdpbusd into int32 lanes; after the
// four loads of a part every lane holds 16 products of one row, at most
// 16 * 15 * 128 = 30720 in magnitude, so the chunk 2p sums fit the low word
// and the chunk 2p+1 sums the high word of one dword, and a vpdpwssd by the
// two chunks' scales (the same word pair) adds Σ sc * sum for the row into
// its lane. Adding the two lanes of a row gives the row's Σ_c sc_c Σ q*qa:
// the exact integer every other kernel forms. The mins term and the float
// update are interleaved_avx2.cc's,
//   acc = acc + (d * da) * float(isum);  acc = acc - (dmin * da) * float(msum),
// in vec_dot.h's canonical order for the 8 rows at once, so every output is
// bitwise the other tiles' and MatMulReference's.
//
// Two or more tokens go to the tile the set held before (the AVX2 8-row
// tiles, which keep a group's weights in L1 across passes of 4 tokens).
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

// The AVX2 set's interleaved Q4_K tile, for batches of tokens.
QuantTileFn g_q4k_batch_tile = nullptr;

// The token's 8 activation bytes at p as the qword of every lane pair.
COLIBRI_INLINE __m512i Broadcast8(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi64(v);
}

// Rows 8g .. 8g+7 (blk: their nb super-blocks) against one token: y[0..7].
void Q4KGroup(const Q4KRows8* blk, int64_t nb, const QuantizedRow& a, float* y) {
  // Dword 2r + h of the permuted load: dword r + 8h of the loaded one.
  const __m512i pair_rows = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  // Dwords 2r and 2r+1 of the result: dword r of a 256-bit vector.
  const __m512i both_lanes = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i zero = _mm512_setzero_si512();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const Q4KRows8& b = blk[i];
    // Two super-blocks ahead, as the AVX2 tile; past the group's end that is
    // the next group's start (groups are contiguous), or nothing that faults.
    avx2::PrefetchBytes<avx2::kReadOnce>(blk, (i + 2) * sizeof(Q4KRows8), sizeof(Q4KRows8));
    const avx2::Rows8Scales scales(b.scales);
    const int8_t* qa = a.qs + 256 * i;
    __m512i isum = zero;
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      __m512i lo_sum = zero, hi_sum = zero;
#pragma GCC unroll 4
      for (int g = 0; g < 8; g += 2) {
        const __m512i q = _mm512_permutexvar_epi32(
            pair_rows, _mm512_loadu_si512(reinterpret_cast<const void*>(b.qs[p][g])));
        const __m512i lo = _mm512_and_si512(q, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        lo_sum = _mm512_dpbusd_epi32(lo_sum, lo, Broadcast8(qa + 64 * p + 4 * g));
        hi_sum = _mm512_dpbusd_epi32(hi_sum, hi, Broadcast8(qa + 64 * p + 32 + 4 * g));
      }
      // Chunk 2p's sums in the low words, chunk 2p+1's in the high words.
      const __m512i sums =
          _mm512_mask_blend_epi16(0xAAAAAAAAu, lo_sum, _mm512_slli_epi32(hi_sum, 16));
      const __m512i sc =
          _mm512_permutexvar_epi32(both_lanes, _mm512_castsi256_si512(scales.ScalePair(2 * p)));
      isum = _mm512_dpwssd_epi32(isum, sums, sc);
    }
    // Row r's two lanes added into the low dword of qword r.
    const __m256i rows = _mm512_cvtepi64_epi32(_mm512_add_epi32(isum, _mm512_srli_epi64(isum, 32)));

    // Word c: bsum of chunk c (its two 16-element sums, at most 4064).
    const __m128i* bs = reinterpret_cast<const __m128i*>(a.bsums + 16 * i);
    const __m256i chunk_bsums =
        _mm256_broadcastsi128_si256(_mm_hadd_epi16(_mm_loadu_si128(bs), _mm_loadu_si128(bs + 1)));
    __m256i msum = _mm256_madd_epi16(scales.MinPair(0), _mm256_shuffle_epi32(chunk_bsums, 0x00));
    msum = _mm256_add_epi32(
        msum, _mm256_madd_epi16(scales.MinPair(2), _mm256_shuffle_epi32(chunk_bsums, 0x55)));
    msum = _mm256_add_epi32(
        msum, _mm256_madd_epi16(scales.MinPair(4), _mm256_shuffle_epi32(chunk_bsums, 0xAA)));
    msum = _mm256_add_epi32(
        msum, _mm256_madd_epi16(scales.MinPair(6), _mm256_shuffle_epi32(chunk_bsums, 0xFF)));

    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.dmin)));
    const __m256 da = _mm256_set1_ps(a.d[i]);
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(rows)));
    acc = _mm256_sub_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(msum)));
  }
  _mm256_storeu_ps(y, acc);
}

// QuantTileFn over full groups of 8 rows.
void Q4KTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
             const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens != 1) {
    g_q4k_batch_tile(w, row_bytes, n_rows, act, layout, n_tokens, y, y_stride);
    return;
  }
  const QuantizedRow a = QuantizedRow::At(layout, act);
  const int64_t nb = layout.cols / kQK_K;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kInterleaveRows) {
    Q4KGroup(reinterpret_cast<const Q4KRows8*>(w + r0 * row_bytes), nb, a, y + r0);
  }
}

}  // namespace
}  // namespace interleaved_avx512

void InstallAvx512InterleavedTiles(KernelSet* k) {
  interleaved_avx512::g_q4k_batch_tile = k->interleaved_tile[Slot(TensorType::kQ4_K)];
  if (interleaved_avx512::g_q4k_batch_tile == nullptr) return;
  k->interleaved_tile[Slot(TensorType::kQ4_K)] = &interleaved_avx512::Q4KTile;
}

}  // namespace colibri::ops::internal
