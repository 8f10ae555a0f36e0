// AVX2 weighted sums of value rows (model/ops/attend.h), in the canonical
// order: 16 output columns of up to four queries stay in 8 registers while
// the value rows stream past once for all of them. (The dots keep the float
// tile.)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "model/ops/attend_avx2.h"

namespace colibri::ops::internal::avx2 {
namespace {

// Columns [0, 8 * kNv) of out for kQ queries (the exact count, so that the
// sums stay in registers): the value rows shared by all of them (j below
// every n[i]) stream past once for the block, each query's own further rows
// after.
template <int kQ, int kNv>
void ValuesColumns(const float* const* p, const int* n, const float* values, int64_t value_stride,
                   float* const* out) {
  __m256 a[kQ][kNv];
  int shared = n[0];
  for (int i = 0; i < kQ; ++i) {
    shared = std::min(shared, n[i]);
    for (int k = 0; k < kNv; ++k) a[i][k] = _mm256_loadu_ps(out[i] + 8 * k);
  }
  for (int j = 0; j < shared; ++j) {
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
      switch (block) {
        case 1: ValuesColumns<1, 2>(p + i, n + i, v, value_stride, o); break;
        case 2: ValuesColumns<2, 2>(p + i, n + i, v, value_stride, o); break;
        case 3: ValuesColumns<3, 2>(p + i, n + i, v, value_stride, o); break;
        default: ValuesColumns<4, 2>(p + i, n + i, v, value_stride, o); break;
      }
    }
  }
}

}  // namespace

void InstallAvx2AttendKernels(KernelSet* k) { k->attend_values = &AttendValues; }

}  // namespace colibri::ops::internal::avx2
