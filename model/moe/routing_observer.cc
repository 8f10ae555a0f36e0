#include "model/moe/routing_observer.h"

namespace colibri::moe {

void ObservedExpertBackend::Submit(const ExpertBatch& batch, float* out) {
  for (RoutingObserver* o : observers_) o->OnRoutes(batch.layer, batch.n_tokens, batch.k, batch.experts);
  inner_->Submit(batch, out);
}

ExpertBackend* ObservedExpertBackend::SecondChannel() {
  if (second_ == nullptr) {
    ExpertBackend* inner = inner_->SecondChannel();
    if (inner == nullptr) return nullptr;
    second_ = std::make_unique<ObservedExpertBackend>(inner, observers_);
  }
  return second_.get();
}

void ObservedExpertBackend::Prefetch(int layer, absl::Span<const int32_t> experts) {
  for (RoutingObserver* o : observers_) o->OnHints(layer, experts);
  inner_->Prefetch(layer, experts);
}

}  // namespace colibri::moe
