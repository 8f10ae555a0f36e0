// Element-wise and reduction helpers for the layer maths around the matmuls.
//
// Every function reads and writes float32 vectors of n elements; an output may
// alias an input unless noted. Results depend only on the inputs (no threads),
// and Dot gives the same bits on every kernel set (the canonical float order of
// model/ops/vec_dot.h, as MatMul's float path).
#ifndef COLIBRI_MODEL_OPS_VECTOR_OPS_H_
#define COLIBRI_MODEL_OPS_VECTOR_OPS_H_

#include <cstdint>

namespace colibri::ops {

// out[i] = x[i] / sqrt(mean(x²) + eps) * weight[i], as llama.cpp's rms_norm
// (sum of squares in double). weight may be null (no scale).
void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* out);

// x[i] = exp(x[i] - max) / Σ exp(x[j] - max), in place; n >= 1.
void Softmax(float* x, int64_t n);

// out[i] = x[i] / (1 + exp(-x[i])).
void Silu(const float* x, float* out, int64_t n);

// out[i] = silu(gate[i]) * up[i] (the SwiGLU feed-forward gate).
void SiluMul(const float* gate, const float* up, float* out, int64_t n);

// out[i] = a[i] * b[i].
void Mul(const float* a, const float* b, float* out, int64_t n);

// out[i] = a[i] + b[i].
void Add(const float* a, const float* b, float* out, int64_t n);

// y[i] += alpha * x[i] (product then sum, not fused).
void AddScaled(const float* x, float alpha, float* y, int64_t n);

// x[i] *= alpha.
void Scale(float* x, float alpha, int64_t n);

// Σ a[i] * b[i] in the canonical order: eight lanes (element i into lane i % 8,
// lane + a*b unfused), reduced ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
float Dot(const float* a, const float* b, int64_t n);

}  // namespace colibri::ops

#endif  // COLIBRI_MODEL_OPS_VECTOR_OPS_H_
