// How often each routed expert of each layer was chosen since start-up: the
// dashboard's heat map (GET /v1/cluster) and the input of hot-expert
// rebalancing. A RoutingObserver of the generation scheduler's backends.
//
// Thread-safety: OnRoutes and Snapshot may be called concurrently.
#ifndef COLIBRI_COORDINATOR_GENERATION_EXPERT_USE_H_
#define COLIBRI_COORDINATOR_GENERATION_EXPERT_USE_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "model/moe/routing_observer.h"

namespace colibri::coordinator {

class ExpertUse final : public moe::RoutingObserver {
 public:
  // experts_per_layer[l]: routed experts of layer l (0 for a dense layer).
  explicit ExpertUse(std::vector<int> experts_per_layer);

  // Counts one route per (token, rank); ids outside the layer's experts, and
  // the routes of layers outside the model or without routed experts, are
  // ignored (counted in ignored()).
  void OnRoutes(int layer, int64_t n_tokens, int k, const int32_t* experts) override;

  // [layer][expert] routes so far.
  std::vector<std::vector<int64_t>> Snapshot() const;
  // Tokens routed so far, once per MoE layer each (a token with no valid id
  // in a layer still counts there).
  int64_t token_layers() const;
  int64_t ignored() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::vector<int64_t>> counts_ ABSL_GUARDED_BY(mu_);
  int64_t token_layers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ignored_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_EXPERT_USE_H_
