#include "model/ops/vector_ops.h"

#include <algorithm>
#include <cmath>

#include "model/ops/vec_dot.h"

namespace colibri::ops {

void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (weight == nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * weight[i];
  }
}

void Softmax(float* x, int64_t n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void Silu(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = (gate[i] / (1.0f + std::exp(-gate[i]))) * up[i];
}

void Mul(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void Add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void AddScaled(const float* x, float alpha, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + alpha * x[i];
}

void Scale(float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

float Dot(const float* a, const float* b, int64_t n) {
  static const auto dot = internal::DefaultKernels().dot;
  return dot(a, b, n);
}

}  // namespace colibri::ops
