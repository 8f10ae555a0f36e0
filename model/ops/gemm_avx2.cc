// AVX2 GEMM tiles for Q4_K, Q5_K and Q6_K weights against Q8_K activations:
// R rows x T tokens with R * T = 8 (8 x 1 for decode, 4 x 2 for two tokens),
// the idea gemm.h describes for AVX-512 cut to AVX2's sixteen registers.
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

// Token groups of one or two tokens run as 8 x 1 and 4 x 2 tiles, which beat
// the per-row tile; groups of three or four go to the per-row tile, since a
// 2 x 4 tile measured no faster than its 4-token kernel (4096 x 2048 Q4_K, per
// thread-CPU-second: 101 against 107 GFLOP/s).
template <typename D, TensorType kType>
void GemmTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
              const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  QuantizedRow a[2];
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
    const int nt = n_tokens - t0 < 4 ? static_cast<int>(n_tokens - t0) : 4;
    const uint8_t* act_t = act + t0 * layout.row_bytes;
    float* yt = y + t0 * y_stride;
    int64_t full_rows = 0;
    if (nt <= 2) {
      for (int t = 0; t < nt; ++t) a[t] = QuantizedRow::At(layout, act_t + t * layout.row_bytes);
      const int rows_per_tile = nt == 1 ? 8 : 4;
      full_rows = n_rows / rows_per_tile * rows_per_tile;
      // At least kPrefetchBytes ahead, in whole tiles.
      const int64_t prefetch_rows =
          (PrefetchRowsAhead(row_bytes) + rows_per_tile - 1) / rows_per_tile * rows_per_tile;
      for (int64_t r0 = 0; r0 < full_rows; r0 += rows_per_tile) {
        const uint8_t* rows = w + r0 * row_bytes;
        if (n_tokens == 1) {  // decode: the weights are read once
          Micro<D, 8, 1, 1, kReadOnce>(rows, row_bytes, a, layout.cols, yt + r0, y_stride,
                                       prefetch_rows);
        } else if (nt == 1) {
          Micro<D, 8, 1, 1>(rows, row_bytes, a, layout.cols, yt + r0, y_stride, prefetch_rows);
        } else {
          Micro<D, 4, 2, 2>(rows, row_bytes, a, layout.cols, yt + r0, y_stride, prefetch_rows);
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
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    g_edge_tile[Slot(type)] = k->quant_tile[Slot(type)];
  }
  k->quant_tile[Slot(TensorType::kQ4_K)] = &GemmTile<Q4_KAvx2, TensorType::kQ4_K>;
  k->quant_tile[Slot(TensorType::kQ5_K)] = &GemmTile<Q5_KAvx2, TensorType::kQ5_K>;
  k->quant_tile[Slot(TensorType::kQ6_K)] = &GemmTile<Q6_KAvx2, TensorType::kQ6_K>;
}

}  // namespace colibri::ops::internal::avx2
