// Top-k expert selection from router logits, as the GGUF families define it.
//
// SelectExperts: softmax over all experts, the k most probable in descending
// order, and optionally their weights renormalised to sum to one (Qwen, Mixtral,
// OLMoE).
//
// RouteExperts adds the DeepSeek-V3 style options: sigmoid gating, a selection
// bias that decides which experts are chosen but not their weights,
// group-limited selection, and a final scale.
#ifndef COLIBRI_MODEL_MOE_ROUTER_H_
#define COLIBRI_MODEL_MOE_ROUTER_H_

#include <cstdint>

namespace colibri::moe {

// logits: [n_tokens][n_expert]; experts, weights: [n_tokens][k], rank order
// (most probable first; ties go to the lower expert id).
void SelectExperts(const float* logits, int64_t n_tokens, int n_expert, int k, bool normalize,
                   int32_t* experts, float* weights);

struct RoutingOptions {
  // p = sigmoid(logit) per expert instead of a softmax over all. Default: false.
  bool sigmoid = false;
  // [n_expert] added to p to choose the experts; the weights stay p. Default:
  // none.
  const float* selection_bias = nullptr;
  // Experts 0..n_expert-1 form n_groups consecutive groups of equal size; a
  // group scores the sum of its two largest biased scores (its only one when a
  // group has one expert) and only the n_groups_used best groups (ties to the
  // lower group) may be chosen from. n_groups must divide n_expert and k must
  // not exceed n_groups_used experts' groups. Default: 1 and 1 (no grouping).
  int n_groups = 1;
  int n_groups_used = 1;
  // Weights divided by their sum (at least 6.103515625e-5). Default: false.
  bool normalize = false;
  // Weights multiplied by scale unless it is 0 or 1. Default: 1.
  float scale = 1.0f;
  // gpt-oss: [n_expert] added to the logits before anything else. Default: none.
  const float* logit_bias = nullptr;
  // gpt-oss: choose the k largest (biased) logits and weight them by a softmax
  // over those k only; sigmoid, selection_bias and groups are then ignored.
  // Default: false.
  bool softmax_topk = false;

  // True when the options reduce to SelectExperts (softmax, no bias, no
  // groups, no scale); RouteExperts then gives SelectExperts' exact bits.
  bool plain() const {
    return !sigmoid && selection_bias == nullptr && n_groups <= 1 &&
           (scale == 0.0f || scale == 1.0f) && logit_bias == nullptr && !softmax_topk;
  }
};

// Floats of scratch RouteExperts needs for n_expert experts.
inline int64_t RouteScratchSize(int n_expert) { return 3 * static_cast<int64_t>(n_expert); }

// logits: [n_tokens][n_expert]; experts, weights: [n_tokens][k], ordered by
// biased score (highest first; ties to the lower expert id). scratch holds
// RouteScratchSize(n_expert) floats. Does not allocate.
void RouteExperts(const float* logits, int64_t n_tokens, int n_expert, int k,
                  const RoutingOptions& options, float* scratch, int32_t* experts, float* weights);

}  // namespace colibri::moe

#endif  // COLIBRI_MODEL_MOE_ROUTER_H_
