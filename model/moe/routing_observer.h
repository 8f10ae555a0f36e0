// Watching where routed work goes: every batch's routing and every
// prediction hint, as they reach the expert backend.
//
// ObservedExpertBackend sits between a forward pass and its backend and
// reports what passes through to any number of RoutingObservers; the
// dashboard's use counts, hot-expert rebalancing and routing traces all read
// the routing this way, so it is observed once, at one seam.
#ifndef COLIBRI_MODEL_MOE_ROUTING_OBSERVER_H_
#define COLIBRI_MODEL_MOE_ROUTING_OBSERVER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "model/moe/expert_backend.h"

namespace colibri::moe {

// Receives routing as it reaches a backend. Calls come on the thread
// driving the forward pass; with several forward passes (one per numeric
// path), from several threads at once, so implementations are thread-safe.
class RoutingObserver {
 public:
  virtual ~RoutingObserver() = default;
  // One layer's routed work: experts [n_tokens][k] expert ids, valid during
  // the call only (drafts included: they are computed like any token). A
  // layer run in two half-batches is reported as two calls.
  virtual void OnRoutes(int layer, int64_t n_tokens, int k, const int32_t* experts) = 0;
  // Prediction hints for `layer`, issued before that layer's routing is
  // known. Default: ignored.
  virtual void OnHints(int layer, absl::Span<const int32_t> experts) {
    (void)layer;
    (void)experts;
  }
};

// An ExpertBackend that reports every Submit's routing and every Prefetch's
// hints to `observers` (in order) and passes everything on to `inner`.
// `inner` and the observers are borrowed and must outlive it.
// Thread-safety: that of `inner`.
class ObservedExpertBackend final : public ExpertBackend {
 public:
  ObservedExpertBackend(ExpertBackend* inner, std::vector<RoutingObserver*> observers)
      : inner_(inner), observers_(std::move(observers)) {}

  void Submit(const ExpertBatch& batch, float* out) override;
  absl::Status Wait() override { return inner_->Wait(); }
  // The inner backend's second channel, observed by the same observers.
  ExpertBackend* SecondChannel() override;
  bool OutputsWeighted() const override { return inner_->OutputsWeighted(); }
  void Reserve(int64_t n_tokens, int k) override { inner_->Reserve(n_tokens, k); }
  void Prefetch(int layer, absl::Span<const int32_t> experts) override;

 private:
  ExpertBackend* const inner_;
  const std::vector<RoutingObserver*> observers_;
  std::unique_ptr<ObservedExpertBackend> second_;
};

}  // namespace colibri::moe

#endif  // COLIBRI_MODEL_MOE_ROUTING_OBSERVER_H_
