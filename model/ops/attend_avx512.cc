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
#include "model/ops/attend_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

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

// kQ queries x 2 * kKv keys; rows past the real counts repeat the last one
// and their results are dropped.
template <int kQ, int kKv>
void DotsPass(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
              int n_keys, int dim, float* dots, int64_t dots_stride) {
  const float* qs[kQ];
  for (int i = 0; i < kQ; ++i) qs[i] = q + std::min(i, n_q - 1) * q_stride;
  const float* ks[2 * kKv];
  for (int i = 0; i < 2 * kKv; ++i) ks[i] = keys + std::min(i, n_keys - 1) * key_stride;
  __m512 acc[kQ][kKv];
  for (int i = 0; i < kQ; ++i) {
    for (int v = 0; v < kKv; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int c = 0; c < dim; c += 8) {
    __m512 kv[kKv];
    for (int v = 0; v < kKv; ++v) kv[v] = TwoRows(ks[2 * v] + c, ks[2 * v + 1] + c);
    for (int i = 0; i < kQ; ++i) {
      const __m512 qv = Twice(qs[i] + c);
      for (int v = 0; v < kKv; ++v) acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_mul_ps(qv, kv[v]));
    }
  }
  for (int i = 0; i < std::min(kQ, n_q); ++i) {
    for (int v = 0; v < kKv; ++v) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, ReducePairs(acc[i][v]));
      if (2 * v < n_keys) dots[i * dots_stride + 2 * v] = lanes[0];
      if (2 * v + 1 < n_keys) dots[i * dots_stride + 2 * v + 1] = lanes[8];
    }
  }
}

void AttendDots(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride) {
  const int ahead = avx2::AttendRowsAhead(dim);
  if (n_q == 1) {
    for (int j = 0; j < n_keys; j += 16) {
      avx2::PrefetchRows(keys, key_stride, j + ahead, std::min(n_keys, j + ahead + 16), dim * 4);
      DotsPass<1, 8>(q, q_stride, 1, keys + j * key_stride, key_stride, std::min(16, n_keys - j),
                     dim, dots + j, dots_stride);
    }
    return;
  }
  for (int t = 0; t < n_q; t += 8) {
    for (int j = 0; j < n_keys; j += 4) {
      if (t == 0) {
        avx2::PrefetchRows(keys, key_stride, j + ahead, std::min(n_keys, j + ahead + 4), dim * 4);
      }
      DotsPass<8, 2>(q + t * q_stride, q_stride, std::min(8, n_q - t), keys + j * key_stride,
                     key_stride, std::min(4, n_keys - j), dim, dots + t * dots_stride + j,
                     dots_stride);
    }
  }
}

// Columns [0, 16 * kNv) of out for kQ queries: the value rows shared by all
// of them (j below every n[i]) stream past once for the block, each query's
// own further rows after. (kQ is the exact count, so that the sums stay in
// registers.) The first `prefetch` bytes of the rows ahead are asked for (the
// whole row in the first strip; the later strips find it in cache).
template <int kQ, int kNv>
void ValuesColumns(const float* const* p, const int* n, const float* values, int64_t value_stride,
                   float* const* out, int prefetch) {
  constexpr int n_q = kQ;
  __m512 a[kQ][kNv];
  int shared = n[0];
  for (int i = 0; i < n_q; ++i) {
    shared = std::min(shared, n[i]);
    for (int k = 0; k < kNv; ++k) a[i][k] = _mm512_loadu_ps(out[i] + 16 * k);
  }
  const int ahead = prefetch > 0 ? avx2::AttendRowsAhead(prefetch / 4) : 0;
  for (int j = 0; j < shared; ++j) {
    if (prefetch > 0) avx2::PrefetchRows(values, value_stride, j + ahead, j + ahead + 1, prefetch);
    const float* v = values + j * value_stride;
    __m512 vk[kNv];
    for (int k = 0; k < kNv; ++k) vk[k] = _mm512_loadu_ps(v + 16 * k);
    for (int i = 0; i < n_q; ++i) {
      const __m512 pi = _mm512_set1_ps(p[i][j]);
      for (int k = 0; k < kNv; ++k) a[i][k] = _mm512_add_ps(a[i][k], _mm512_mul_ps(pi, vk[k]));
    }
  }
  for (int i = 0; i < n_q; ++i) {
    for (int jj = shared; jj < n[i]; ++jj) {
      const float* v = values + jj * value_stride;
      const __m512 pi = _mm512_set1_ps(p[i][jj]);
      for (int k = 0; k < kNv; ++k) {
        a[i][k] = _mm512_add_ps(a[i][k], _mm512_mul_ps(pi, _mm512_loadu_ps(v + 16 * k)));
      }
    }
  }
  for (int i = 0; i < n_q; ++i) {
    for (int k = 0; k < kNv; ++k) _mm512_storeu_ps(out[i] + 16 * k, a[i][k]);
  }
}

// ValuesColumns for `count` (1 to 8) queries.
template <int kNv>
void ValuesBlock(int count, const float* const* p, const int* n, const float* values,
                 int64_t value_stride, float* const* out, int prefetch) {
  using Columns = void (*)(const float* const*, const int*, const float*, int64_t, float* const*,
                           int);
  static constexpr Columns kByCount[8] = {
      &ValuesColumns<1, kNv>, &ValuesColumns<2, kNv>, &ValuesColumns<3, kNv>,
      &ValuesColumns<4, kNv>, &ValuesColumns<5, kNv>, &ValuesColumns<6, kNv>,
      &ValuesColumns<7, kNv>, &ValuesColumns<8, kNv>};
  kByCount[std::clamp(count, 1, 8) - 1](p, n, values, value_stride, out, prefetch);
}

// Queries in blocks of up to 8 and columns in strips of 32: 16 sums in
// registers, and each value row read once per block of queries (the strips
// of a row are disjoint cache lines). Decode's query heads that share a KV
// head (up to 8 of them) thus read its values once, not once per pair.
void AttendValues(const float* const* p, const int* n, int n_q, const float* values,
                  int64_t value_stride, int dim, float* const* out) {
  constexpr int kQ = 8;
  float* o[kQ];
  for (int i = 0; i < n_q; i += kQ) {
    const int block = std::min(kQ, n_q - i);
    for (int e = 0; e < dim; e += 32) {  // dim % 16 == 0: strips of 32, then 16
      for (int t = 0; t < block; ++t) o[t] = out[i + t] + e;
      const int prefetch = e == 0 ? dim * 4 : 0;
      if (dim - e >= 32) {
        ValuesBlock<2>(block, p + i, n + i, values + e, value_stride, o, prefetch);
      } else {
        ValuesBlock<1>(block, p + i, n + i, values + e, value_stride, o, prefetch);
      }
    }
  }
}

}  // namespace

void InstallAvx512AttendKernels(KernelSet* k) {
  k->attend_dots = &AttendDots;
  k->attend_values = &AttendValues;
}

}  // namespace colibri::ops::internal::avx512
