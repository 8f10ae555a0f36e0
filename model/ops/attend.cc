#include "model/ops/attend.h"

#include <algorithm>

#include "model/ops/vec_dot.h"

namespace colibri::ops {
namespace {

// Keys per float tile call: 64 rows of a 128-wide head stay in L1 while every
// query passes over them.
constexpr int kKeyBlock = 64;

}  // namespace

void AttendDots(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride) {
  const internal::KernelSet& k = internal::ActiveKernels();
  if (k.attend_dots != nullptr && dim % 8 == 0) {
    k.attend_dots(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
    return;
  }
  // The float tile computes the same canonical dots, keys as weight rows.
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int nk = std::min(kKeyBlock, n_keys - j0);
    for (int t0 = 0; t0 < n_q; t0 += internal::kMaxTokenTile) {
      const int nt = std::min(internal::kMaxTokenTile, n_q - t0);
      k.float_tile(keys + j0 * key_stride, key_stride, nk, q + t0 * q_stride, q_stride, dim, nt,
                   dots + t0 * dots_stride + j0, dots_stride);
    }
  }
}

void AttendValues(const float* const* p, const int* n, int n_q, const float* values,
                  int64_t value_stride, int dim, float* const* out) {
  const internal::KernelSet& k = internal::ActiveKernels();
  if (k.attend_values != nullptr && dim % 16 == 0) {
    k.attend_values(p, n, n_q, values, value_stride, dim, out);
    return;
  }
  for (int i = 0; i < n_q; ++i) {
    float* o = out[i];
    for (int j = 0; j < n[i]; ++j) {
      const float pj = p[i][j];
      const float* v = values + j * value_stride;
      for (int e = 0; e < dim; ++e) o[e] = o[e] + pj * v[e];
    }
  }
}

}  // namespace colibri::ops
