// Top-k expert selection from router logits, as the GGUF families define it:
// softmax over all experts, the k most probable in descending order, and
// optionally their weights renormalised to sum to one.
#ifndef COLIBRI_MODEL_MOE_ROUTER_H_
#define COLIBRI_MODEL_MOE_ROUTER_H_

#include <cstdint>

namespace colibri::moe {

// logits: [n_tokens][n_expert]; experts, weights: [n_tokens][k], rank order
// (most probable first; ties go to the lower expert id).
void SelectExperts(const float* logits, int64_t n_tokens, int n_expert, int k, bool normalize,
                   int32_t* experts, float* weights);

}  // namespace colibri::moe

#endif  // COLIBRI_MODEL_MOE_ROUTER_H_
