#include "model/ops/attend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/ops/exp_lanes.h"
#include "model/ops/quant_reference.h"
#include "model/ops/tensor_type.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops {
namespace {

// Keys per float tile call: 64 rows of a 128-wide head stay in L1 while every
// query passes over them.
constexpr int kKeyBlock = 64;

// Half-float (or, without q8_0 passes, q8_0) rows widened per call of the
// float products: 32 rows of a 128-wide head are 16 KiB of floats, which stay
// in L1 with the queries.
constexpr int kHalfRows = 32;

// Value rows per call of the AttendValues kernels, which sweep their rows
// once per strip of 32 (AVX-512) or 16 (AVX2) output columns: 64 rows of a
// 128-wide head are 32 KiB, which stay in L1 from one strip to the next.
constexpr int kValueRows = 64;

// Calls f(count, p_block, n_block, first, j0, rows) for queries first ..
// first + count - 1 (groups of up to kGroup) and consecutive blocks of up to
// block_rows rows j0 .. j0 + rows - 1, where query first + t takes rows j0 ..
// n[first + t] - 1 of the block (n_block[t] of them, none past its count;
// p_block[t] its weights from row j0). AttendValues over the blocks in order
// adds each query's rows in order, and the queries' sums are independent, so
// the results are those of one call bit for bit.
template <typename F>
void ForRowBlocks(const float* const* p, const int* n, int n_q, int block_rows, F&& f) {
  constexpr int kGroup = 16;
  const float* p_block[kGroup];
  int n_block[kGroup];
  for (int first = 0; first < n_q; first += kGroup) {
    const int count = std::min(kGroup, n_q - first);
    int n_rows = 0;
    for (int t = 0; t < count; ++t) n_rows = std::max(n_rows, n[first + t]);
    for (int j0 = 0; j0 < n_rows; j0 += block_rows) {
      const int rows = std::min(block_rows, n_rows - j0);
      for (int t = 0; t < count; ++t) {
        n_block[t] = std::clamp(n[first + t] - j0, 0, rows);
        p_block[t] = n_block[t] > 0 ? p[first + t] + j0 : p[first + t];
      }
      f(count, p_block, n_block, first, j0, rows);
    }
  }
}

// rows x dim elements of `type` (row r at src + r * row_bytes) as floats,
// dim apart, in a buffer of the calling thread.
const float* WidenRows(TensorType type, const void* src, int64_t row_bytes, int rows, int dim) {
  thread_local std::vector<float> buffer;
  const size_t need = static_cast<size_t>(rows) * dim;
  if (buffer.size() < need) buffer.resize(need);
  const internal::DequantFn widen = internal::ActiveKernels().dequant[internal::Slot(type)];
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int r = 0; r < rows; ++r) widen(bytes + r * row_bytes, buffer.data() + r * dim, dim);
  return buffer.data();
}

// Keys as floats kHalfRows rows at a time (see WidenRows), through the float
// AttendDots.
void WidenedDots(TensorType type, const float* q, int64_t q_stride, int n_q, const void* keys,
                 int64_t key_row_bytes, int n_keys, int dim, float* dots, int64_t dots_stride) {
  const auto* bytes = static_cast<const uint8_t*>(keys);
  for (int j0 = 0; j0 < n_keys; j0 += kHalfRows) {
    const int nk = std::min(kHalfRows, n_keys - j0);
    AttendDots(q, q_stride, n_q,
               WidenRows(type, bytes + j0 * key_row_bytes, key_row_bytes, nk, dim), dim, nk, dim,
               dots + j0, dots_stride);
  }
}

// Values as floats kHalfRows rows at a time, through the float AttendValues.
void WidenedValues(TensorType type, const float* const* p, const int* n, int n_q,
                   const void* values, int64_t value_row_bytes, int dim, float* const* out) {
  const auto* bytes = static_cast<const uint8_t*>(values);
  ForRowBlocks(
      p, n, n_q, kHalfRows,
      [&](int count, const float* const* p_block, const int* n_block, int first, int j0, int rows) {
        AttendValues(p_block, n_block, count,
                     WidenRows(type, bytes + j0 * value_row_bytes, value_row_bytes, rows, dim), dim,
                     dim, out + first);
      });
}

// dst = scale * H D src over each block of 32 (before = true), or
// scale * D H src (before = false): D's signs applied before or after the
// in-place butterflies of H, whose stages run in one fixed order.
void Hadamard32(const float* src, int n, float scale, bool signs_first, float* dst) {
  for (int b = 0; b < n; b += kQK) {
    float x[kQK];
    for (int e = 0; e < kQK; ++e) {
      const float v = src[b + e];
      x[e] = signs_first && (kQ8_0RotationSigns >> e & 1u) ? -v : v;
    }
    for (int half = 1; half < kQK; half *= 2) {
      for (int i = 0; i < kQK; i += 2 * half) {
        for (int e = i; e < i + half; ++e) {
          const float a = x[e], c = x[e + half];
          x[e] = a + c;
          x[e + half] = a - c;
        }
      }
    }
    for (int e = 0; e < kQK; ++e) {
      const float v = x[e] * scale;
      dst[b + e] = !signs_first && (kQ8_0RotationSigns >> e & 1u) ? -v : v;
    }
  }
}

}  // namespace

void RotateQ8_0Row(const float* src, int n, float* dst) {
  Hadamard32(src, n, 0.125f, /*signs_first=*/true, dst);
}

void RotateQ8_0Query(const float* src, int n, float* dst) {
  Hadamard32(src, n, 0.25f, /*signs_first=*/true, dst);
}

void UnrotateQ8_0Output(const float* src, int n, float* dst) {
  Hadamard32(src, n, 0.25f, /*signs_first=*/false, dst);
}

void LoadRotatedQ8_0Row(Q8_0Rows src, int n, float* dst) {
  internal::DequantizeQ8_0(src.blocks, dst, n);
  Hadamard32(dst, n, 0.25f, /*signs_first=*/false, dst);
}

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
    ForRowBlocks(p, n, n_q, kValueRows,
                 [&](int count, const float* const* p_block, const int* n_block, int first, int j0,
                     int /*rows*/) {
                   k.attend_values(p_block, n_block, count, values + j0 * value_stride,
                                   value_stride, dim, out + first);
                 });
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

void SoftmaxInPlace(float* scores, int n, float scale, const float* sink) {
  using lanes::F4;
  // Scaled scores and their maximum (NaN skipped, as std::max(m, s) skips it).
  float max = -INFINITY;
  for (int j = 0; j < n; ++j) {
    const float s = scores[j] * scale;
    scores[j] = s;
    max = max < s ? s : max;
  }
  if (sink != nullptr) max = max < *sink ? *sink : max;
  const F4 vmax = lanes::SplatF4(max);
  int j = 0;
  for (; j + lanes::kLanes <= n; j += lanes::kLanes) {
    const F4 e = lanes::ExpLanes(lanes::LoadF4(scores + j) - vmax);
    std::memcpy(scores + j, &e, sizeof(e));
  }
  if (j < n) {
    // The last 1-3 scores in one more pass, the lanes past n padded with
    // the maximum (their exps are dropped); lane by lane the same exps.
    float tail[lanes::kLanes] = {max, max, max, max};
    std::memcpy(tail, scores + j, static_cast<size_t>(n - j) * sizeof(float));
    const F4 e = lanes::ExpLanes(lanes::LoadF4(tail) - vmax);
    std::memcpy(scores + j, &e, static_cast<size_t>(n - j) * sizeof(float));
  }
  float sum = 0.0f;
  for (int k = 0; k < n; ++k) sum += scores[k];
  if (sink != nullptr) sum += lanes::ExpLanes(lanes::SplatF4(*sink - max))[0];
  const float inv = 1.0f / sum;
  for (int k = 0; k < n; ++k) scores[k] *= inv;
}

void AttendDots(const float* q, int64_t q_stride, int n_q, const uint16_t* keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride) {
  WidenedDots(TensorType::kF16, q, q_stride, n_q, keys, key_stride * 2, n_keys, dim, dots,
              dots_stride);
}

void AttendValues(const float* const* p, const int* n, int n_q, const uint16_t* values,
                  int64_t value_stride, int dim, float* const* out) {
  WidenedValues(TensorType::kF16, p, n, n_q, values, value_stride * 2, dim, out);
}

void StoreQ8_0Row(const float* src, int n, Q8_0Rows dst) {
  internal::QuantizeQ8_0(src, dst.blocks, n);
}

void AttendDots(const float* q, int64_t q_stride, int n_q, Q8_0Rows keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride) {
  const internal::KernelSet& k = internal::ActiveKernels();
  if (k.attend_dots_q8_0 != nullptr) {
    k.attend_dots_q8_0(q, q_stride, n_q, keys.blocks, key_stride / kQK, n_keys, dim, dots,
                       dots_stride);
    return;
  }
  WidenedDots(TensorType::kQ8_0, q, q_stride, n_q, keys.blocks,
              key_stride / kQK * static_cast<int64_t>(sizeof(BlockQ8_0)), n_keys, dim, dots,
              dots_stride);
}

void AttendValues(const float* const* p, const int* n, int n_q, Q8_0Rows values,
                  int64_t value_stride, int dim, float* const* out) {
  const internal::KernelSet& k = internal::ActiveKernels();
  if (k.attend_values_q8_0 != nullptr) {
    k.attend_values_q8_0(p, n, n_q, values.blocks, value_stride / kQK, dim, out);
    return;
  }
  WidenedValues(TensorType::kQ8_0, p, n, n_q, values.blocks,
                value_stride / kQK * static_cast<int64_t>(sizeof(BlockQ8_0)), dim, out);
}

}  // namespace colibri::ops
