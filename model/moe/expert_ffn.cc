#include "model/moe/expert_ffn.h"

#include <cmath>

#include "model/ops/vector_ops.h"

namespace colibri::moe {

void ExpertFfn(const ExpertWeights& w, const float* x, int64_t n, float* out, ops::NumericPath path,
               ThreadPool* pool, ExpertFfnScratch* scratch) {
  const int64_t n_ff = w.n_ff();
  const size_t size = static_cast<size_t>(n * n_ff);
  if (scratch->gate.size() < size) {
    scratch->gate.resize(size);
    scratch->up.resize(size);
  }
  float* gate = scratch->gate.data();  // [n][n_ff]
  float* up = scratch->up.data();      // [n][n_ff]
  // Gate and up read the same x: quantized once, one parallel job.
  const ops::MatMulOutput gate_up[2] = {{&w.gate, gate, n_ff}, {&w.up, up, n_ff}};
  ops::MatMulSharedInput(gate_up, 2, x, n, path, pool, &scratch->matmul);
  if (w.gate_bias != nullptr || w.up_bias != nullptr) {
    for (int64_t t = 0; t < n; ++t) {
      if (w.gate_bias != nullptr) ops::Add(gate + t * n_ff, w.gate_bias, gate + t * n_ff, n_ff);
      if (w.up_bias != nullptr) ops::Add(up + t * n_ff, w.up_bias, up + t * n_ff, n_ff);
    }
  }
  if (w.activation == Activation::kSwigluOai) {
    const float alpha = w.swiglu_alpha, limit = w.swiglu_limit;
    for (size_t i = 0; i < size; ++i) {
      const float g = std::fmin(gate[i], limit);
      const float u = std::fmax(std::fmin(up[i], limit), -limit);
      gate[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
    }
  } else {
    ops::SiluMul(gate, up, gate, static_cast<int64_t>(size));
  }
  ops::MatMul(w.down, gate, n, out, w.down.rows, path, pool, &scratch->matmul);
  if (w.down_bias != nullptr) {
    const int64_t n_embd = w.down.rows;
    for (int64_t t = 0; t < n; ++t) {
      ops::Add(out + t * n_embd, w.down_bias, out + t * n_embd, n_embd);
    }
  }
}

}  // namespace colibri::moe
