// The feed-forward network of one expert, batched over the tokens routed to it:
//   out[t] = down · (silu(gate · x[t]) ⊙ (up · x[t]))
// or, with biases and the gpt-oss activation (Activation::kSwigluOai):
//   g = gate · x[t] + bg, u = up · x[t] + bu, g = min(g, limit), u = clamp(u, ±limit)
//   out[t] = down · (g ⊙ sigmoid(alpha g) ⊙ (u + 1)) + bd   (gpt-oss: alpha 1.702, limit 7)
// Used for routed experts (locally and on expert nodes), shared experts and the
// dense FFN of leading dense layers.
#ifndef COLIBRI_MODEL_MOE_EXPERT_FFN_H_
#define COLIBRI_MODEL_MOE_EXPERT_FFN_H_

#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "model/ops/matmul.h"

namespace colibri::moe {

enum class Activation {
  kSilu,       // silu(gate) * up
  kSwigluOai,  // gpt-oss: clamped, alpha 1.702, (up + 1)
};

// gate, up: [n_ff][n_embd]; down: [n_embd][n_ff] (rows × cols, GGML order).
struct ExpertWeights {
  ops::WeightMatrix gate;
  ops::WeightMatrix up;
  ops::WeightMatrix down;
  // Optional float32 biases (borrowed): [n_ff], [n_ff], [n_embd].
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  Activation activation = Activation::kSilu;
  // kSwigluOai's parameters. Default: gpt-oss's 1.702 and 7.
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;

  bool has_bias() const {
    return gate_bias != nullptr || up_bias != nullptr || down_bias != nullptr;
  }

  int64_t n_embd() const { return gate.cols; }
  int64_t n_ff() const { return gate.rows; }
  uint64_t bytes() const {
    return gate.rows * gate.row_bytes + up.rows * up.row_bytes + down.rows * down.row_bytes;
  }
};

// Reusable buffers for ExpertFfn; grows to the largest batch seen, then stays.
struct ExpertFfnScratch {
  std::vector<float> gate;  // [n][n_ff]
  std::vector<float> up;    // [n][n_ff]
  ops::MatMulScratch matmul;
};

// x: [n][n_embd] (row stride n_embd); out: [n][n_embd]. Batch invariant like
// ops::MatMul: out[t] depends only on x[t], the weights and the path.
void ExpertFfn(const ExpertWeights& w, const float* x, int64_t n, float* out,
               ops::NumericPath path, ThreadPool* pool, ExpertFfnScratch* scratch);

}  // namespace colibri::moe

#endif  // COLIBRI_MODEL_MOE_EXPERT_FFN_H_
