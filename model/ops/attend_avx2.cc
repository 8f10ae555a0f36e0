// AVX2 weighted sums of value rows (model/ops/attend.h), in the canonical
// order: up to 32 output columns of two queries stay in 8 registers while
// the value rows stream past once for both. (The dots keep the float tile.)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "model/ops/attend_avx2.h"

namespace colibri::ops::internal::avx2 {
namespace {

// Columns [0, 8 * kNv) of out for one or two queries.
template <int kNv>
void ValuesColumns(const float* const* p, const int* n, int n_q, const float* values,
                   int64_t value_stride, float* const* out) {
  __m256 a[2][kNv];
  for (int i = 0; i < n_q; ++i) {
    for (int k = 0; k < kNv; ++k) a[i][k] = _mm256_loadu_ps(out[i] + 8 * k);
  }
  int j = 0;
  if (n_q == 2) {
    const int both = std::min(n[0], n[1]);
    for (; j < both; ++j) {
      const float* v = values + j * value_stride;
      const __m256 p0 = _mm256_set1_ps(p[0][j]);
      const __m256 p1 = _mm256_set1_ps(p[1][j]);
      for (int k = 0; k < kNv; ++k) {
        const __m256 vk = _mm256_loadu_ps(v + 8 * k);
        a[0][k] = _mm256_add_ps(a[0][k], _mm256_mul_ps(p0, vk));
        a[1][k] = _mm256_add_ps(a[1][k], _mm256_mul_ps(p1, vk));
      }
    }
  }
  for (int i = 0; i < n_q; ++i) {
    for (int jj = j; jj < n[i]; ++jj) {
      const float* v = values + jj * value_stride;
      const __m256 pi = _mm256_set1_ps(p[i][jj]);
      for (int k = 0; k < kNv; ++k) {
        a[i][k] = _mm256_add_ps(a[i][k], _mm256_mul_ps(pi, _mm256_loadu_ps(v + 8 * k)));
      }
    }
  }
  for (int i = 0; i < n_q; ++i) {
    for (int k = 0; k < kNv; ++k) _mm256_storeu_ps(out[i] + 8 * k, a[i][k]);
  }
}

void AttendValues(const float* const* p, const int* n, int n_q, const float* values,
                  int64_t value_stride, int dim, float* const* out) {
  for (int i = 0; i < n_q; i += 2) {
    const int pair = std::min(2, n_q - i);
    for (int e = 0; e < dim; e += 32) {  // dim % 16 == 0: 16 or 32 columns
      float* o[2] = {out[i] + e, pair == 2 ? out[i + 1] + e : nullptr};
      if (dim - e >= 32) {
        ValuesColumns<4>(p + i, n + i, pair, values + e, value_stride, o);
      } else {
        ValuesColumns<2>(p + i, n + i, pair, values + e, value_stride, o);
      }
    }
  }
}

}  // namespace

void InstallAvx2AttendKernels(KernelSet* k) { k->attend_values = &AttendValues; }

}  // namespace colibri::ops::internal::avx2
