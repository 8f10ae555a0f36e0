// Where routed experts run: the seam between the forward pass and the experts.
//
// The forward pass hands a backend one layer's routed work at a time — the
// normed MoE input of each token once, and each token's top-k experts — and
// receives every (token, rank) expert output, unweighted. It then sums them in
// rank order itself, so the result does not depend on which backend or node
// computed what.
//
// Two implementations: LocalExpertBackend (model/moe/local_expert_backend.h)
// reads experts from the coordinator's own GGUF; the remote backend (in
// coordinator/) sends them to expert nodes.
//
// Thread-safety: a backend serves one forward pass at a time, and has at most
// one batch submitted (between Submit and Wait). A forward pass that pipelines
// two half-batches keeps the second in flight on SecondChannel().
#ifndef COLIBRI_MODEL_MOE_EXPERT_BACKEND_H_
#define COLIBRI_MODEL_MOE_EXPERT_BACKEND_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace colibri::moe {

struct ExpertBatch {
  int layer = 0;
  int64_t n_tokens = 0;
  int64_t n_embd = 0;
  int k = 0;                         // experts per token
  const float* x = nullptr;          // [n_tokens][n_embd]
  const int32_t* experts = nullptr;  // [n_tokens][k]
  const float* weights = nullptr;    // [n_tokens][k], for backends that pre-reduce
};

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;

  // Starts computing out[t][r] = FFN_{experts[t][r]}(x[t]) for the batch.
  // `batch` and `out` ([n_tokens][k][n_embd]) must stay valid until Wait().
  // The caller may do other work between Submit and Wait.
  virtual void Submit(const ExpertBatch& batch, float* out) = 0;
  // Completes the submitted batch. A non-OK status means the outputs are not
  // usable (every retry and fallback the backend has was exhausted).
  virtual absl::Status Wait() = 0;

  // A backend whose batches can be in flight at the same time as this one's
  // (same experts, same results), for pipelining two half-batches, or null
  // when overlapping batches would not pay (the work is done on this
  // machine). Owned by this backend; created on first call.
  virtual ExpertBackend* SecondChannel() { return nullptr; }
  // False (the default): out[t][r] is the unweighted FFN output and the
  // caller weights and sums it. True: out[t][r] is already multiplied by
  // weights[t][r] (several ranks of a token may be summed into one of them,
  // the others then zero), so the caller sums out[t][r] unweighted. Constant
  // for a backend's lifetime.
  virtual bool OutputsWeighted() const { return false; }

  // Makes room for batches of up to n_tokens tokens before the first one:
  // scratch memory is allocated and touched now, so that the first prompt
  // does not pay a page fault per page of it. Advice only.
  virtual void Reserve(int64_t n_tokens, int k) {
    (void)n_tokens;
    (void)k;
  }

  // Advice that `experts` of `layer` will probably be needed soon.
  virtual void Prefetch(int layer, absl::Span<const int32_t> experts) {
    (void)layer;
    (void)experts;
  }
};

}  // namespace colibri::moe

#endif  // COLIBRI_MODEL_MOE_EXPERT_BACKEND_H_
