#include "model/ops/attend.h"

#include <algorithm>
#include <vector>

#include "model/ops/tensor_type.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops {
namespace {

// Keys per float tile call: 64 rows of a 128-wide head stay in L1 while every
// query passes over them.
constexpr int kKeyBlock = 64;

// Half-float rows widened per call of the float products: 32 rows of a
// 128-wide head are 16 KiB of floats, which stay in L1 with the queries.
constexpr int kHalfRows = 32;

// rows x dim halves (row r at src + r * stride) as floats, dim apart, in a
// buffer of the calling thread.
const float* WidenRows(const uint16_t* src, int64_t stride, int rows, int dim) {
  thread_local std::vector<float> buffer;
  const size_t need = static_cast<size_t>(rows) * dim;
  if (buffer.size() < need) buffer.resize(need);
  const internal::DequantFn widen =
      internal::ActiveKernels().dequant[internal::Slot(TensorType::kF16)];
  for (int r = 0; r < rows; ++r) widen(src + r * stride, buffer.data() + r * dim, dim);
  return buffer.data();
}

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

void AttendDots(const float* q, int64_t q_stride, int n_q, const uint16_t* keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride) {
  for (int j0 = 0; j0 < n_keys; j0 += kHalfRows) {
    const int nk = std::min(kHalfRows, n_keys - j0);
    AttendDots(q, q_stride, n_q, WidenRows(keys + j0 * key_stride, key_stride, nk, dim), dim, nk,
               dim, dots + j0, dots_stride);
  }
}

void AttendValues(const float* const* p, const int* n, int n_q, const uint16_t* values,
                  int64_t value_stride, int dim, float* const* out) {
  int n_rows = 0;
  for (int i = 0; i < n_q; ++i) n_rows = std::max(n_rows, n[i]);
  thread_local std::vector<const float*> p_block;
  thread_local std::vector<int> n_block;
  p_block.resize(n_q);
  n_block.resize(n_q);
  for (int j0 = 0; j0 < n_rows; j0 += kHalfRows) {
    const int rows = std::min(kHalfRows, n_rows - j0);
    // Query i takes rows j0 .. n[i] - 1 of this block (none past its count);
    // AttendValues adds them to the sums of the blocks before, in order.
    for (int i = 0; i < n_q; ++i) {
      n_block[i] = std::clamp(n[i] - j0, 0, rows);
      p_block[i] = n_block[i] > 0 ? p[i] + j0 : p[i];
    }
    AttendValues(p_block.data(), n_block.data(), n_q,
                 WidenRows(values + j0 * value_stride, value_stride, rows, dim), dim, dim, out);
  }
}

}  // namespace colibri::ops
