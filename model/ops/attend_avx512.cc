// AVX-512 attention products (model/ops/attend.h), in the canonical order.
//
// Dots: a vector holds two dots' eight lanes (lanes 0-7 and 8-15): one query
// (its 8 columns broadcast to both halves) against two keys. A pass runs 8
// queries x 4 keys, so each key's columns are loaded once per 8 queries and
// each query's once per 4 keys; the lanes are then combined in ReduceLanes'
// tree, both dots of a vector at once. One query (decode) runs 16 keys per
// pass instead, enough independent sums to hide the add latency.
//
// Weighted sums: 32 output columns of up to eight queries stay in 16
// registers while the value rows stream past once for all of them.
//
// Rows of q8_0 blocks go through the same passes: the quants are widened to
// int32, converted (exact) and multiplied by their block's scale (exact: 11
// by 8 significant bits), which gives the dequantized floats the float
// passes would load.
#include "model/ops/attend_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "model/ops/avx2_common.h"

namespace colibri::ops::internal::avx512 {
namespace {

// Lanes 0 and 8 of the result: ReduceLanes of lanes 0-7 and of lanes 8-15,
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) (adds commute bitwise).
inline __m512 ReducePairs(__m512 a) {
  const __m512 s = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512 t = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4E));
  return _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));
}

// Eight columns of row a in lanes 0-7 and of row b in lanes 8-15.
inline __m512 TwoRows(const float* a, const float* b) {
  const __m256d lo = _mm256_castps_pd(_mm256_loadu_ps(a));
  const __m256d hi = _mm256_castps_pd(_mm256_loadu_ps(b));
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(lo), hi, 1));
}

// Eight columns of one row in both halves.
inline __m512 Twice(const float* a) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(a))));
}

// Eight q8_0 elements of row a (quants at qa) in lanes 0-7 and of row b in
// lanes 8-15, times their blocks' scales d (lanes 0-7 a's, 8-15 b's).
inline __m512 TwoQ8Rows(const int8_t* qa, const int8_t* qb, __m512 d) {
  const __m128i q = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qa)),
                                       _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qb)));
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}

// acc[i][v] += q_i's eight columns from c (both halves) * kv[v].
template <int kQ, int kKv>
inline void AddProducts(const float* const* qs, int c, const __m512* kv, __m512 (*acc)[kKv]) {
  for (int i = 0; i < kQ; ++i) {
    const __m512 qv = Twice(qs[i] + c);
    for (int v = 0; v < kKv; ++v) acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_mul_ps(qv, kv[v]));
  }
}

// Reduces the sums of a pass and stores those of real queries and keys.
template <int kQ, int kKv>
COLIBRI_INLINE void StoreDots(__m512 (*acc)[kKv], int n_q, int n_keys, float* dots,
                              int64_t dots_stride) {
  for (int i = 0; i < std::min(kQ, n_q); ++i) {
    for (int v = 0; v < kKv; ++v) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, ReducePairs(acc[i][v]));
      if (2 * v < n_keys) dots[i * dots_stride + 2 * v] = lanes[0];
      if (2 * v + 1 < n_keys) dots[i * dots_stride + 2 * v + 1] = lanes[8];
    }
  }
}

// kQ queries x 2 * kKv keys; rows past the real counts repeat the last one
// and their results are dropped.
template <int kQ, int kKv>
void DotsPass(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
              int n_keys, int dim, float* dots, int64_t dots_stride) {
  const float* qs[kQ];
  avx2::PassRows<kQ>(q, q_stride, n_q, qs);
  const float* ks[2 * kKv];
  avx2::PassRows<2 * kKv>(keys, key_stride, n_keys, ks);
  __m512 acc[kQ][kKv];
  for (int i = 0; i < kQ; ++i) {
    for (int v = 0; v < kKv; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int c = 0; c < dim; c += 8) {
    __m512 kv[kKv];
    for (int v = 0; v < kKv; ++v) kv[v] = TwoRows(ks[2 * v] + c, ks[2 * v + 1] + c);
    AddProducts<kQ, kKv>(qs, c, kv, acc);
  }
  StoreDots<kQ, kKv>(acc, n_q, n_keys, dots, dots_stride);
}

// DotsPass over keys in q8_0 blocks (key_stride in blocks).
template <int kQ, int kKv>
void DotsPassQ8(const float* q, int64_t q_stride, int n_q, const BlockQ8_0* keys,
                int64_t key_stride, int n_keys, int dim, float* dots, int64_t dots_stride) {
  const float* qs[kQ];
  avx2::PassRows<kQ>(q, q_stride, n_q, qs);
  const BlockQ8_0* ks[2 * kKv];
  avx2::PassRows<2 * kKv>(keys, key_stride, n_keys, ks);
  __m512 acc[kQ][kKv];
  for (int i = 0; i < kQ; ++i) {
    for (int v = 0; v < kKv; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int b = 0; b < dim / kQK; ++b) {
    __m512 d[kKv];
    for (int v = 0; v < kKv; ++v) {
      d[v] = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(avx2::Half(ks[2 * v][b].d)),
                                  _mm512_set1_ps(avx2::Half(ks[2 * v + 1][b].d)));
    }
    for (int s = 0; s < kQK; s += 8) {
      __m512 kv[kKv];
      for (int v = 0; v < kKv; ++v)
        kv[v] = TwoQ8Rows(ks[2 * v][b].qs + s, ks[2 * v + 1][b].qs + s, d[v]);
      AddProducts<kQ, kKv>(qs, b * kQK + s, kv, acc);
    }
  }
  StoreDots<kQ, kKv>(acc, n_q, n_keys, dots, dots_stride);
}

// DotsPass over float rows or DotsPassQ8 over q8_0 blocks.
template <int kQ, int kKv, typename Key>
inline void AnyDotsPass(const float* q, int64_t q_stride, int n_q, const Key* keys,
                        int64_t key_stride, int n_keys, int dim, float* dots, int64_t dots_stride) {
  if constexpr (std::is_same_v<Key, float>) {
    DotsPass<kQ, kKv>(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
  } else {
    DotsPassQ8<kQ, kKv>(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
  }
}

// AttendDots over rows of Key (float, or BlockQ8_0 with strides in blocks).
template <typename Key>
void Dots(const float* q, int64_t q_stride, int n_q, const Key* keys, int64_t key_stride,
          int n_keys, int dim, float* dots, int64_t dots_stride) {
  const int row_bytes = avx2::AttendRowBytes<Key>(dim);
  const int ahead = std::max(1, avx2::kAttendPrefetchBytes / row_bytes);
  if (n_q == 1) {
    for (int j = 0; j < n_keys; j += 16) {
      avx2::PrefetchWholeRows(keys, key_stride, j + ahead, std::min(n_keys, j + ahead + 16),
                              row_bytes);
      AnyDotsPass<1, 8>(q, q_stride, 1, keys + j * key_stride, key_stride, std::min(16, n_keys - j),
                        dim, dots + j, dots_stride);
    }
    return;
  }
  for (int t = 0; t < n_q; t += 8) {
    for (int j = 0; j < n_keys; j += 4) {
      if (t == 0) {
        avx2::PrefetchWholeRows(keys, key_stride, j + ahead, std::min(n_keys, j + ahead + 4),
                                row_bytes);
      }
      AnyDotsPass<8, 2>(q + t * q_stride, q_stride, std::min(8, n_q - t), keys + j * key_stride,
                        key_stride, std::min(4, n_keys - j), dim, dots + t * dots_stride + j,
                        dots_stride);
    }
  }
}

void AttendDots(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride) {
  Dots(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
}

void AttendDotsQ8(const float* q, int64_t q_stride, int n_q, const BlockQ8_0* keys,
                  int64_t key_stride, int n_keys, int dim, float* dots, int64_t dots_stride) {
  Dots(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
}

// A strip of 16 * kNv consecutive columns of the value rows, as floats: of
// float rows (v + j * stride is row j's first column of the strip) ...
struct FloatStrip {
  const float* v;
  int64_t stride;  // floats
  template <int kNv>
  inline void Load(int j, __m512* vk) const {
    for (int k = 0; k < kNv; ++k) vk[k] = _mm512_loadu_ps(v + j * stride + 16 * k);
  }
  const void* base() const { return v; }
  int64_t row_bytes() const { return stride * 4; }
};

// ... or of q8_0 rows (b + j * stride is row j's block holding the strip,
// which starts at the block's element `offset`; a strip never crosses a block).
struct Q8Strip {
  const BlockQ8_0* b;
  int64_t stride;  // blocks
  int offset;
  template <int kNv>
  inline void Load(int j, __m512* vk) const {
    const BlockQ8_0& block = b[j * stride];
    const __m512 d = _mm512_set1_ps(avx2::Half(block.d));
    for (int k = 0; k < kNv; ++k) {
      const __m128i q =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(block.qs + offset + 16 * k));
      vk[k] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
  }
  const void* base() const { return b; }
  int64_t row_bytes() const { return stride * static_cast<int64_t>(sizeof(BlockQ8_0)); }
};

// Columns [0, 16 * kNv) of out for kQ queries: the value rows shared by all
// of them (j below every n[i]) stream past once for the block, each query's
// own further rows after. (kQ is the exact count, so that the sums stay in
// registers.) The first `prefetch` bytes of the rows ahead are asked for (the
// whole row in the first strip; the later strips find it in cache).
template <int kQ, int kNv, typename Strip>
void ValuesColumns(const float* const* p, const int* n, const Strip& values, float* const* out,
                   int prefetch) {
  constexpr int n_q = kQ;
  __m512 a[kQ][kNv];
  int shared = n[0];
  for (int i = 0; i < n_q; ++i) {
    shared = std::min(shared, n[i]);
    for (int k = 0; k < kNv; ++k) a[i][k] = _mm512_loadu_ps(out[i] + 16 * k);
  }
  const int ahead = prefetch > 0 ? std::max(1, avx2::kAttendPrefetchBytes / prefetch) : 0;
  for (int j = 0; j < shared; ++j) {
    if (prefetch > 0) {
      avx2::PrefetchBytes(values.base(), (j + ahead) * values.row_bytes(), prefetch);
    }
    __m512 vk[kNv];
    values.template Load<kNv>(j, vk);
    for (int i = 0; i < n_q; ++i) {
      const __m512 pi = _mm512_set1_ps(p[i][j]);
      for (int k = 0; k < kNv; ++k) a[i][k] = _mm512_add_ps(a[i][k], _mm512_mul_ps(pi, vk[k]));
    }
  }
  for (int i = 0; i < n_q; ++i) {
    for (int jj = shared; jj < n[i]; ++jj) {
      __m512 vk[kNv];
      values.template Load<kNv>(jj, vk);
      const __m512 pi = _mm512_set1_ps(p[i][jj]);
      for (int k = 0; k < kNv; ++k) a[i][k] = _mm512_add_ps(a[i][k], _mm512_mul_ps(pi, vk[k]));
    }
  }
  for (int i = 0; i < n_q; ++i) {
    for (int k = 0; k < kNv; ++k) _mm512_storeu_ps(out[i] + 16 * k, a[i][k]);
  }
}

// ValuesColumns for `count` (1 to 8) queries.
template <int kNv, typename Strip>
void ValuesBlock(int count, const float* const* p, const int* n, const Strip& values,
                 float* const* out, int prefetch) {
  using Columns = void (*)(const float* const*, const int*, const Strip&, float* const*, int);
  static constexpr Columns kByCount[8] = {
      &ValuesColumns<1, kNv, Strip>, &ValuesColumns<2, kNv, Strip>, &ValuesColumns<3, kNv, Strip>,
      &ValuesColumns<4, kNv, Strip>, &ValuesColumns<5, kNv, Strip>, &ValuesColumns<6, kNv, Strip>,
      &ValuesColumns<7, kNv, Strip>, &ValuesColumns<8, kNv, Strip>};
  kByCount[std::clamp(count, 1, 8) - 1](p, n, values, out, prefetch);
}

// Queries in blocks of up to 8 and columns in strips of 32: 16 sums in
// registers, and each value row read once per block of queries (the strips
// of a row are disjoint cache lines). Decode's query heads that share a KV
// head (up to 8 of them) thus read its values once, not once per pair.
// strip(e) is the strip of columns from e; row_bytes the bytes of a row.
template <typename StripAt>
void Values(const float* const* p, const int* n, int n_q, int dim, int row_bytes, StripAt strip,
            float* const* out) {
  constexpr int kQ = 8;
  float* o[kQ];
  for (int i = 0; i < n_q; i += kQ) {
    const int block = std::min(kQ, n_q - i);
    for (int e = 0; e < dim; e += 32) {  // dim % 16 == 0: strips of 32, then 16
      for (int t = 0; t < block; ++t) o[t] = out[i + t] + e;
      const int prefetch = e == 0 ? row_bytes : 0;
      if (dim - e >= 32) {
        ValuesBlock<2>(block, p + i, n + i, strip(e), o, prefetch);
      } else {
        ValuesBlock<1>(block, p + i, n + i, strip(e), o, prefetch);
      }
    }
  }
}

void AttendValues(const float* const* p, const int* n, int n_q, const float* values,
                  int64_t value_stride, int dim, float* const* out) {
  Values(
      p, n, n_q, dim, dim * 4,
      [&](int e) {
        return FloatStrip{values + e, value_stride};
      },
      out);
}

void AttendValuesQ8(const float* const* p, const int* n, int n_q, const BlockQ8_0* values,
                    int64_t value_stride, int dim, float* const* out) {
  Values(
      p, n, n_q, dim, avx2::AttendRowBytes<BlockQ8_0>(dim),
      [&](int e) {
        return Q8Strip{values + e / kQK, value_stride, e % kQK};
      },
      out);
}

}  // namespace

void InstallAvx512AttendKernels(KernelSet* k) {
  k->attend_dots = &AttendDots;
  k->attend_values = &AttendValues;
  k->attend_dots_q8_0 = &AttendDotsQ8;
  k->attend_values_q8_0 = &AttendValuesQ8;
}

}  // namespace colibri::ops::internal::avx512
