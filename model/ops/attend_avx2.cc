// AVX2 attention products (model/ops/attend.h), in the canonical order.
//
// Dots: a pass keeps eight dots' 8-lane sums in registers (4 queries x 2
// keys, or 1 query x 8 keys for a single query), then reduces all eight at
// once with shuffles in ReduceLanes' tree. Keys go in blocks of 64 (32 KiB of
// a 128-wide head, in L1) past every 4 queries, so a block of queries (the
// heads sharing a KV head) reads each key row from memory once.
//
// Weighted sums: 16 output columns of up to four queries stay in 8 registers
// while the value rows stream past once for all of them.
#include "model/ops/attend_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "model/ops/avx2_common.h"

namespace colibri::ops::internal::avx2 {
namespace {

// ReduceLanes of each of a[0..7], in that order: lane l is
// ((a_l0 + a_l4) + (a_l2 + a_l6)) + ((a_l1 + a_l5) + (a_l3 + a_l7)).
inline __m256 ReduceEight(const __m256 a[8]) {
  // Lanes 0-3 of s[k]: a[2k][i] + a[2k][i + 4]; lanes 4-7: the same of a[2k + 1].
  __m256 s[4];
  for (int k = 0; k < 4; ++k) {
    s[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
  }
  // Per 128-bit half of t[h]: (x0 + x2), (x1 + x3) of s[2h], then of s[2h + 1].
  __m256 t[2];
  for (int h = 0; h < 2; ++h) {
    t[h] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * h], s[2 * h + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(s[2 * h], s[2 * h + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Lanes 0-3: the sums of a[0], a[2], a[4], a[6]; lanes 4-7: of a[1], a[3], a[5], a[7].
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// kQ queries x kK keys (kQ * kK == 8); rows past the real counts repeat the
// last one and their results are dropped.
template <int kQ, int kK>
void DotsPass(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
              int n_keys, int dim, float* dots, int64_t dots_stride) {
  static_assert(kQ * kK == 8, "one reduction of eight sums per pass");
  const float* qs[kQ];
  for (int i = 0; i < kQ; ++i) qs[i] = q + std::min(i, n_q - 1) * q_stride;
  const float* ks[kK];
  for (int v = 0; v < kK; ++v) ks[v] = keys + std::min(v, n_keys - 1) * key_stride;
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int c = 0; c < dim; c += 8) {
    __m256 kv[kK];
    for (int v = 0; v < kK; ++v) kv[v] = _mm256_loadu_ps(ks[v] + c);
    for (int i = 0; i < kQ; ++i) {
      const __m256 qv = _mm256_loadu_ps(qs[i] + c);
      for (int v = 0; v < kK; ++v) {
        acc[i * kK + v] = _mm256_add_ps(acc[i * kK + v], _mm256_mul_ps(qv, kv[v]));
      }
    }
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, ReduceEight(acc));
  for (int i = 0; i < std::min(kQ, n_q); ++i) {
    for (int v = 0; v < std::min(kK, n_keys); ++v) dots[i * dots_stride + v] = out[i * kK + v];
  }
}

void AttendDots(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride) {
  const int ahead = AttendRowsAhead(dim);
  if (n_q == 1) {
    for (int j = 0; j < n_keys; j += 8) {
      PrefetchRows(keys, key_stride, j + ahead, std::min(n_keys, j + ahead + 8), dim * 4);
      DotsPass<1, 8>(q, q_stride, 1, keys + j * key_stride, key_stride, std::min(8, n_keys - j),
                     dim, dots + j, dots_stride);
    }
    return;
  }
  constexpr int kKeyBlock = 64;
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = std::min(n_keys, j0 + kKeyBlock);
    for (int t = 0; t < n_q; t += 4) {
      for (int j = j0; j < j1; j += 2) {
        if (t == 0) {
          PrefetchRows(keys, key_stride, j + ahead, std::min(n_keys, j + ahead + 2), dim * 4);
        }
        DotsPass<4, 2>(q + t * q_stride, q_stride, std::min(4, n_q - t), keys + j * key_stride,
                       key_stride, std::min(2, j1 - j), dim, dots + t * dots_stride + j,
                       dots_stride);
      }
    }
  }
}

// Columns [0, 8 * kNv) of out for kQ queries (the exact count, so that the
// sums stay in registers): the value rows shared by all of them (j below
// every n[i]) stream past once for the block, each query's own further rows
// after. The first `prefetch` bytes of the rows ahead are asked for (the
// whole row in the first strip; the later strips find it in cache).
template <int kQ, int kNv>
void ValuesColumns(const float* const* p, const int* n, const float* values, int64_t value_stride,
                   float* const* out, int prefetch) {
  __m256 a[kQ][kNv];
  int shared = n[0];
  for (int i = 0; i < kQ; ++i) {
    shared = std::min(shared, n[i]);
    for (int k = 0; k < kNv; ++k) a[i][k] = _mm256_loadu_ps(out[i] + 8 * k);
  }
  const int ahead = prefetch > 0 ? AttendRowsAhead(prefetch / 4) : 0;
  for (int j = 0; j < shared; ++j) {
    if (prefetch > 0) PrefetchRows(values, value_stride, j + ahead, j + ahead + 1, prefetch);
    const float* v = values + j * value_stride;
    __m256 vk[kNv];
    for (int k = 0; k < kNv; ++k) vk[k] = _mm256_loadu_ps(v + 8 * k);
    for (int i = 0; i < kQ; ++i) {
      const __m256 pi = _mm256_set1_ps(p[i][j]);
      for (int k = 0; k < kNv; ++k) a[i][k] = _mm256_add_ps(a[i][k], _mm256_mul_ps(pi, vk[k]));
    }
  }
  for (int i = 0; i < kQ; ++i) {
    for (int jj = shared; jj < n[i]; ++jj) {
      const float* v = values + jj * value_stride;
      const __m256 pi = _mm256_set1_ps(p[i][jj]);
      for (int k = 0; k < kNv; ++k) {
        a[i][k] = _mm256_add_ps(a[i][k], _mm256_mul_ps(pi, _mm256_loadu_ps(v + 8 * k)));
      }
    }
  }
  for (int i = 0; i < kQ; ++i) {
    for (int k = 0; k < kNv; ++k) _mm256_storeu_ps(out[i] + 8 * k, a[i][k]);
  }
}

// Queries in blocks of up to 4 and columns in strips of 16 (a cache line of
// each value row): 8 sums in registers, each value row read once per block.
void AttendValues(const float* const* p, const int* n, int n_q, const float* values,
                  int64_t value_stride, int dim, float* const* out) {
  constexpr int kQ = 4;
  float* o[kQ];
  for (int i = 0; i < n_q; i += kQ) {
    const int block = std::min(kQ, n_q - i);
    for (int e = 0; e < dim; e += 16) {  // dim % 16 == 0
      for (int t = 0; t < block; ++t) o[t] = out[i + t] + e;
      const float* v = values + e;
      const int prefetch = e == 0 ? dim * 4 : 0;
      switch (block) {
        case 1:
          ValuesColumns<1, 2>(p + i, n + i, v, value_stride, o, prefetch);
          break;
        case 2:
          ValuesColumns<2, 2>(p + i, n + i, v, value_stride, o, prefetch);
          break;
        case 3:
          ValuesColumns<3, 2>(p + i, n + i, v, value_stride, o, prefetch);
          break;
        default:
          ValuesColumns<4, 2>(p + i, n + i, v, value_stride, o, prefetch);
          break;
      }
    }
  }
}

}  // namespace

void InstallAvx2AttendKernels(KernelSet* k) {
  k->attend_dots = &AttendDots;
  k->attend_values = &AttendValues;
}

}  // namespace colibri::ops::internal::avx2
