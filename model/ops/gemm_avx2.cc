// AVX2 GEMM tiles for the K-quants (Q2_K to Q6_K) against Q8_K activations:
// R rows x T tokens with R * T = 8 (8 x 1 for decode, 4 x 2 for two tokens,
// 2 x 4 for groups of three or four tokens of the types Rows4 leaves out),
// the idea gemm.h describes for AVX-512 cut to AVX2's sixteen registers, and
// for batches of Q4_K/Q5_K a 4-row tile with its rows interleaved (Rows4).
//
// Per super-block, each (row, token) pair forms the per-row kernel's integers
// (vec_dot_avx2_k.cc): eight int32 lanes of Σ sc*u*qa over the eight chunks
// (vpmaddubsw then vpmaddwd by the group scales) and eight lanes of Σ
// factor*bsum. The tile then sums the lanes of all eight pairs at once with
// one horizontal-add network (where the per-row kernel reduces each pair on
// its own and updates a scalar) and runs vec_dot.h's float update
//   acc = acc + (d * da) * float(isum);  acc = acc - (dmin * da) * float(msum)
// (Q6_K: isum -= 32 * msum, no min term) for the eight outputs as one 8-lane
// vector operation, lane r * T + t for row r and token t. Integer sums are
// exact (int32 addition is associative), and every lane performs the per-row
// kernel's float operations in its order, so the results are bitwise the
// per-row tiles' and MatMulReference's.
#include <immintrin.h>

#include <cstdint>

#include "model/ops/avx2_common.h"
#include "model/ops/avx2_k_decoders.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal::avx2 {
namespace {

// The per-row tiles the GEMM tiles hand their edge rows to, by type slot.
// Written once by InstallGemmTiles, before any tile runs.
QuantTileFn g_edge_tile[kTypeSlots] = {};

// Lane j = Σ of the eight int32 lanes of v[j] (exact).
COLIBRI_INLINE __m256i SumLanes8(const __m256i* v) {
  // 128-bit half h of q0: the half-h sums of v[0..3]; of q1: of v[4..7].
  const __m256i q0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i q1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// Super-blocks a tile's first phase runs before the second: its integer lanes
// (512 bytes per super-block) stay in L1.
constexpr int kBlocksPerPhase = 16;

// Rows w, w + row_bytes, ... (R of them) x tokens a[0..NT-1] of an R x T tile
// (NT <= T; the lanes of missing tokens are not stored): y[t * y_stride + r].
// Phase 1 runs row by row as the per-row kernel does (a loop the compiler
// keeps in registers) and stores each pair's eight integer lanes per
// super-block; phase 2 sums them and updates the eight outputs super-block by
// super-block. While reading super-block i of a row it prefetches super-block
// i of the row prefetch_rows further on.
template <typename D, int R, int T, int NT, int kLocality = 3>
void Micro(const uint8_t* w, uint64_t row_bytes, const QuantizedRow* a, int64_t cols, float* y,
           int64_t y_stride, int64_t prefetch_rows) {
  static_assert(R * T == 8 && NT >= 1 && NT <= T, "tiles have 8 outputs");
  using Block = typename D::Block;
  const int64_t nb = cols / kQK_K;
  // [super-block][pair r * T + t]: the lanes of Σ sc*u*qa and of Σ factor*bsum.
  __m256i prod[kBlocksPerPhase][8], msum[kBlocksPerPhase][8];
  // [super-block][pair]: the row's d and dmin.
  alignas(32) float d[kBlocksPerPhase][8], dmin[kBlocksPerPhase][8];
  if constexpr (NT < T) {
    for (int k = 0; k < kBlocksPerPhase; ++k) {
      for (int j = 0; j < 8; ++j) {
        if (j % T >= NT) prod[k][j] = msum[k][j] = _mm256_setzero_si256();
      }
    }
  }
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i0 = 0; i0 < nb; i0 += kBlocksPerPhase) {
    const int64_t i1 = nb - i0 < kBlocksPerPhase ? nb : i0 + kBlocksPerPhase;
    for (int r = 0; r < R; ++r) {
      const auto* x = reinterpret_cast<const Block*>(w + r * row_bytes);
      for (int64_t i = i0; i < i1; ++i) {
        PrefetchBytes<kLocality>(w, (prefetch_rows + r) * row_bytes + i * sizeof(Block),
                                 sizeof(Block));
        const D dec(x[i]);
        __m256i s[NT];
        for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          const __m256i u = dec.Quants(c);
          const __m256i sc = dec.Scales(c);
          for (int t = 0; t < NT; ++t) {
            const __m256i qa =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + kQK_K * i + 32 * c));
            s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, qa), sc));
          }
        }
        const __m256i factor = dec.BsumFactor();
        const int64_t k = i - i0;
        for (int t = 0; t < NT; ++t) {
          const __m256i bs =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bsums + 16 * i));
          prod[k][r * T + t] = s[t];
          msum[k][r * T + t] = _mm256_madd_epi16(bs, factor);
        }
        const float dw = dec.d(), dminw = dec.dmin();
        for (int t = 0; t < T; ++t) {
          d[k][r * T + t] = dw;
          dmin[k][r * T + t] = dminw;
        }
      }
    }
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t k = i - i0;
      alignas(32) float da[8];
      for (int r = 0; r < R; ++r) {
        for (int t = 0; t < T; ++t) da[r * T + t] = t < NT ? a[t].d[i] : 0.0f;
      }
      const __m256 da_v = _mm256_load_ps(da);
      __m256i isum = SumLanes8(prod[k]);
      const __m256i bsum_dot = SumLanes8(msum[k]);
      if constexpr (D::kHasMin) {
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(d[k]), da_v),
                                               _mm256_cvtepi32_ps(isum)));
        acc = _mm256_sub_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(dmin[k]), da_v),
                                               _mm256_cvtepi32_ps(bsum_dot)));
      } else {
        isum = _mm256_sub_epi32(isum, _mm256_mullo_epi32(bsum_dot, _mm256_set1_epi32(D::kOffset)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(_mm256_load_ps(d[k]), da_v),
                                               _mm256_cvtepi32_ps(isum)));
      }
    }
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < NT; ++t) y[t * y_stride + r] = out[r * T + t];
  }
}

// Four rows x NT tokens (NT <= 4) of Q4_K or Q5_K, whose scales cover one
// 32-element chunk each, with fewer multiplies than the per-row tile: that
// one spends a vpmaddubsw and a vpmaddwd (by the scale) per row, chunk and
// token, and on CPUs with one vector multiply unit (AMD Zen 1) prompts are
// bound by them. Here chunk c of the four rows is interleaved four bytes at a
// time (in-lane unpacks, once per chunk for all tokens), so that w_k holds
// bytes 4k..4k+3 (low lane) and 16+4k.. (high lane) of every row; against
// the token's chunk with the matching four bytes broadcast (vpshufd), four
// vpmaddubsw give int16 sums that stay per row and per chunk, and one
// vpmaddwd applies the four rows' scales: five multiplies for four rows
// instead of eight. The int16 sums add four pair sums of u * a, at most
// 4 * 2 * 31 * 127 = 31496 for Q5_K, so they never wrap. The integers per
// (row, token, super-block) are the per-row tile's, and the float update is
// vec_dot.h's in its order, four rows in one 4-lane vector: the same bits.
// Rows4's vpshufb masks, one per chunk c % 4: int16 lane j (of each 128-bit
// lane) of a chunk's scale vector belongs to row (j % 8) / 2, whose scale
// byte sits at byte 4 * row + c % 4 of the scale quads; the high byte is
// zeroed (0x80), since the scales are unsigned.
struct ScalePick {
  alignas(32) int8_t bytes[4][32];
};
constexpr ScalePick MakeScalePick() {
  ScalePick pick{};
  for (int cc = 0; cc < 4; ++cc) {
    for (int j = 0; j < 16; ++j) {
      pick.bytes[cc][2 * j] = static_cast<int8_t>(4 * ((j % 8) / 2) + cc);
      pick.bytes[cc][2 * j + 1] = static_cast<int8_t>(0x80);
    }
  }
  return pick;
}
constexpr ScalePick kScalePick = MakeScalePick();

template <typename D, int NT>
void Rows4(const uint8_t* w, uint64_t row_bytes, const QuantizedRow* a, int64_t cols, float* y,
           int64_t y_stride) {
  static_assert(D::kHasMin && NT >= 1 && NT <= 4, "Q4_K and Q5_K, 1-4 tokens");
  using Block = typename D::Block;
  const Block* x[4];
  for (int r = 0; r < 4; ++r) x[r] = reinterpret_cast<const Block*>(w + r * row_bytes);
  __m128 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm_setzero_ps();
  const int64_t nb = cols / kQK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const D dec[4] = {D(x[0][i]), D(x[1][i]), D(x[2][i]), D(x[3][i])};
    // Scale bytes 0-3 of rows 0..3 (quads), and bytes 4-7, in both lanes.
    const __m128i s01 = _mm_unpacklo_epi32(dec[0].scales_mins, dec[1].scales_mins);
    const __m128i s23 = _mm_unpacklo_epi32(dec[2].scales_mins, dec[3].scales_mins);
    const __m256i quads_low = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(s01, s23));
    const __m256i quads_high = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(s01, s23));
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m256i u[4];
      for (int r = 0; r < 4; ++r) u[r] = dec[r].Quants(c);
      const __m256i p01lo = _mm256_unpacklo_epi32(u[0], u[1]);
      const __m256i p01hi = _mm256_unpackhi_epi32(u[0], u[1]);
      const __m256i p23lo = _mm256_unpacklo_epi32(u[2], u[3]);
      const __m256i p23hi = _mm256_unpackhi_epi32(u[2], u[3]);
      const __m256i w0 = _mm256_unpacklo_epi64(p01lo, p23lo);  // bytes 0-3 | 16-19
      const __m256i w1 = _mm256_unpackhi_epi64(p01lo, p23lo);  // 4-7 | 20-23
      const __m256i w2 = _mm256_unpacklo_epi64(p01hi, p23hi);  // 8-11 | 24-27
      const __m256i w3 = _mm256_unpackhi_epi64(p01hi, p23hi);  // 12-15 | 28-31
      const __m256i scales = _mm256_shuffle_epi8(
          c < 4 ? quads_low : quads_high,
          _mm256_load_si256(reinterpret_cast<const __m256i*>(kScalePick.bytes[c % 4])));
      for (int t = 0; t < NT; ++t) {
        const __m256i qa =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + kQK_K * i + 32 * c));
        __m256i s16 = _mm256_maddubs_epi16(w0, _mm256_shuffle_epi32(qa, 0x00));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w1, _mm256_shuffle_epi32(qa, 0x55)));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w2, _mm256_shuffle_epi32(qa, 0xAA)));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w3, _mm256_shuffle_epi32(qa, 0xFF)));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16, scales));
      }
    }
    // The mins, each repeated for the two 16-element groups of its chunk.
    __m256i mins[4];
    for (int r = 0; r < 4; ++r) mins[r] = dec[r].BsumFactor();
    const __m128 d = _mm_setr_ps(dec[0].d(), dec[1].d(), dec[2].d(), dec[3].d());
    const __m128 dmin = _mm_setr_ps(dec[0].dmin(), dec[1].dmin(), dec[2].dmin(), dec[3].dmin());
    for (int t = 0; t < NT; ++t) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bsums + 16 * i));
      // Lane r of the hadd network: Σ bsums * mins of row r.
      const __m256i h = _mm256_hadd_epi32(
          _mm256_hadd_epi32(_mm256_madd_epi16(bs, mins[0]), _mm256_madd_epi16(bs, mins[1])),
          _mm256_hadd_epi32(_mm256_madd_epi16(bs, mins[2]), _mm256_madd_epi16(bs, mins[3])));
      const __m128i msum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      // Row r's products sit in int32 lanes r and r + 4.
      const __m128i is = _mm_add_epi32(_mm256_castsi256_si128(isum[t]),
                                       _mm256_extracti128_si256(isum[t], 1));
      const __m128 da = _mm_set1_ps(a[t].d[i]);
      acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_mul_ps(d, da), _mm_cvtepi32_ps(is)));
      acc[t] = _mm_sub_ps(acc[t], _mm_mul_ps(_mm_mul_ps(dmin, da), _mm_cvtepi32_ps(msum)));
    }
  }
  for (int t = 0; t < NT; ++t) {
    alignas(16) float out[4];
    _mm_store_ps(out, acc[t]);
    for (int r = 0; r < 4; ++r) y[t * y_stride + r] = out[r];
  }
}

// Batches of three or more tokens of Q4_K or Q5_K: blocks of four rows, each
// against every group of up to four tokens while its weights are in L1; the
// rows that do not fill a block go to the per-row tile.
template <typename D>
void Rows4Tile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
               const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride,
               QuantTileFn edge) {
  QuantizedRow a[4];
  const int64_t full_rows = n_rows / 4 * 4;
  const int64_t ahead = (PrefetchRowsAhead(row_bytes) + 3) / 4 * 4;
  for (int64_t r0 = 0; r0 < full_rows; r0 += 4) {
    const uint8_t* rows = w + r0 * row_bytes;
    PrefetchBytes(w, (r0 + ahead) * row_bytes, 4 * row_bytes);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
      const int nt = n_tokens - t0 < 4 ? static_cast<int>(n_tokens - t0) : 4;
      for (int t = 0; t < nt; ++t) {
        a[t] = QuantizedRow::At(layout, act + (t0 + t) * layout.row_bytes);
      }
      float* yt = y + t0 * y_stride + r0;
      switch (nt) {
        case 1: Rows4<D, 1>(rows, row_bytes, a, layout.cols, yt, y_stride); break;
        case 2: Rows4<D, 2>(rows, row_bytes, a, layout.cols, yt, y_stride); break;
        case 3: Rows4<D, 3>(rows, row_bytes, a, layout.cols, yt, y_stride); break;
        default: Rows4<D, 4>(rows, row_bytes, a, layout.cols, yt, y_stride); break;
      }
    }
  }
  if (full_rows < n_rows) {
    edge(w + full_rows * row_bytes, row_bytes, n_rows - full_rows, act, layout, n_tokens,
         y + full_rows, y_stride);
  }
}

// Token groups of one or two tokens run as 8 x 1 and 4 x 2 tiles, which beat
// the per-row tile. Batches of three or more tokens of Q4_K and Q5_K run as
// Rows4Tile; Q2_K's, Q3_K's and Q6_K's run in groups of four tokens as 2 x 4
// tiles, whose lane sums replace the per-row tile's horizontal reduction per
// token and super-block (faster than a 1 x 8 tile too on Zen 1;
// docs/benchmarks.md). Rows4 for Q6_K measured level
// with the per-row tile on Zen 1 (a scale per 16 elements allows only two
// int16 sums per vpmaddwd: six multiplies for eight, against more decoding
// per chunk).
template <typename D, TensorType kType>
void GemmTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
              const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  constexpr bool kRows4 = kType == TensorType::kQ4_K || kType == TensorType::kQ5_K;
  if constexpr (kRows4) {
    if (n_tokens >= 3) {
      Rows4Tile<D>(w, row_bytes, n_rows, act, layout, n_tokens, y, y_stride,
                   g_edge_tile[Slot(kType)]);
      return;
    }
  }
  QuantizedRow a[4];
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
    const int nt = n_tokens - t0 < 4 ? static_cast<int>(n_tokens - t0) : 4;
    const uint8_t* act_t = act + t0 * layout.row_bytes;
    float* yt = y + t0 * y_stride;
    for (int t = 0; t < nt; ++t) a[t] = QuantizedRow::At(layout, act_t + t * layout.row_bytes);
    const int rows_per_tile = nt == 1 ? 8 : nt == 2 ? 4 : 2;
    const int64_t full_rows = n_rows / rows_per_tile * rows_per_tile;
    // At least kPrefetchBytes ahead, in whole tiles.
    const int64_t prefetch_rows =
        (PrefetchRowsAhead(row_bytes) + rows_per_tile - 1) / rows_per_tile * rows_per_tile;
    for (int64_t r0 = 0; r0 < full_rows; r0 += rows_per_tile) {
      const uint8_t* rows = w + r0 * row_bytes;
      float* yr = yt + r0;
      if (n_tokens == 1) {  // decode: the weights are read once
        Micro<D, 8, 1, 1, kReadOnce>(rows, row_bytes, a, layout.cols, yr, y_stride, prefetch_rows);
      } else if (nt == 1) {
        Micro<D, 8, 1, 1>(rows, row_bytes, a, layout.cols, yr, y_stride, prefetch_rows);
      } else if (nt == 2) {
        Micro<D, 4, 2, 2>(rows, row_bytes, a, layout.cols, yr, y_stride, prefetch_rows);
      } else if constexpr (!kRows4) {  // Rows4Tile took Q4_K's and Q5_K's
        if (nt == 3) {
          Micro<D, 2, 4, 3>(rows, row_bytes, a, layout.cols, yr, y_stride, prefetch_rows);
        } else {
          Micro<D, 2, 4, 4>(rows, row_bytes, a, layout.cols, yr, y_stride, prefetch_rows);
        }
      }
    }
    if (full_rows < n_rows) {
      g_edge_tile[Slot(kType)](w + full_rows * row_bytes, row_bytes, n_rows - full_rows, act_t,
                               layout, nt, yt + full_rows, y_stride);
    }
  }
}

}  // namespace

void InstallGemmTiles(KernelSet* k) {
  for (TensorType type : {TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K,
                          TensorType::kQ5_K, TensorType::kQ6_K}) {
    g_edge_tile[Slot(type)] = k->quant_tile[Slot(type)];
  }
  k->quant_tile[Slot(TensorType::kQ2_K)] = &GemmTile<Q2_KAvx2, TensorType::kQ2_K>;
  k->quant_tile[Slot(TensorType::kQ3_K)] = &GemmTile<Q3_KAvx2, TensorType::kQ3_K>;
  k->quant_tile[Slot(TensorType::kQ4_K)] = &GemmTile<Q4_KAvx2, TensorType::kQ4_K>;
  k->quant_tile[Slot(TensorType::kQ5_K)] = &GemmTile<Q5_KAvx2, TensorType::kQ5_K>;
  k->quant_tile[Slot(TensorType::kQ6_K)] = &GemmTile<Q6_KAvx2, TensorType::kQ6_K>;
}

}  // namespace colibri::ops::internal::avx2
