#include "model/moe/expert_ffn.h"

#include "model/ops/vector_ops.h"

namespace colibri::moe {

void ExpertFfn(const ExpertWeights& w, const float* x, int64_t n, float* out,
               ops::NumericPath path, ThreadPool* pool, ExpertFfnScratch* scratch) {
  const int64_t n_ff = w.n_ff();
  const size_t size = static_cast<size_t>(n * n_ff);
  if (scratch->gate.size() < size) {
    scratch->gate.resize(size);
    scratch->up.resize(size);
  }
  float* gate = scratch->gate.data();  // [n][n_ff]
  float* up = scratch->up.data();      // [n][n_ff]
  ops::MatMul(w.gate, x, n, gate, n_ff, path, pool, &scratch->matmul);
  ops::MatMul(w.up, x, n, up, n_ff, path, pool, &scratch->matmul);
  ops::SiluMul(gate, up, gate, static_cast<int64_t>(size));
  ops::MatMul(w.down, gate, n, out, w.down.rows, path, pool, &scratch->matmul);
}

}  // namespace colibri::moe
