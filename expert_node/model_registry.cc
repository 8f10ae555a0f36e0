#include "expert_node/model_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rpc/untrusted_text.h"

namespace colibri::expert_node {

absl::StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Load(ExpertStore* store) {
  std::unique_ptr<ModelRegistry> registry(new ModelRegistry(store));
  COLIBRI_ASSIGN_OR_RETURN(auto models, store->ListModels());
  absl::MutexLock lock(&registry->mu_);
  for (const auto& [fingerprint, info] : models) registry->models_[fingerprint] = info;
  return registry;
}

absl::StatusOr<ModelInfo> ModelRegistry::Find(const std::string& fingerprint) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(fingerprint);
  if (it == models_.end()) {
    return absl::NotFoundError(
        absl::StrCat("node holds no experts of model '", rpc::EscapeUntrusted(fingerprint), "'"));
  }
  return it->second;
}

bool ModelRegistry::Covers(const ExpertId& id) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(id.fingerprint);
  if (it == models_.end()) return false;
  const ModelInfo& model = it->second;
  return !(model.n_layer > 0 && id.layer >= model.n_layer) &&
         !(model.n_expert > 0 && id.expert >= model.n_expert);
}

absl::Status ModelRegistry::Register(const std::string& fingerprint, const ModelInfo& shape) {
  absl::MutexLock write_lock(&write_mu_);
  ModelInfo merged = shape;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(fingerprint);
    if (it != models_.end()) {
      const ModelInfo& known = it->second;
      if ((shape.n_embd != 0 && shape.n_embd != known.n_embd) ||
          (shape.n_layer != 0 && known.n_layer != 0 && shape.n_layer != known.n_layer) ||
          (shape.n_expert != 0 && known.n_expert != 0 && shape.n_expert != known.n_expert)) {
        return absl::InvalidArgumentError(
            absl::StrCat("model ", fingerprint, ": shape ", shape.n_layer, "x", shape.n_expert, "x",
                         shape.n_embd, " contradicts the stored ", known.n_layer, "x",
                         known.n_expert, "x", known.n_embd));
      }
      merged.n_embd = known.n_embd;
      if (merged.n_layer == 0) merged.n_layer = known.n_layer;
      if (merged.n_expert == 0) merged.n_expert = known.n_expert;
      if (merged.n_layer == known.n_layer && merged.n_expert == known.n_expert) {
        return absl::OkStatus();
      }
    }
  }
  COLIBRI_RETURN_IF_ERROR(store_->PutModel(fingerprint, merged));
  absl::MutexLock lock(&mu_);
  models_[fingerprint] = merged;
  return absl::OkStatus();
}

uint64_t ModelRegistry::ComputeRequestLimit(int64_t max_batch_tokens) const {
  // Serialized sizes, generously: a Route (token, expert, weight, framing)
  // and an ExpertKey of a prefetch hint (fingerprint <= 128 bytes).
  constexpr uint64_t kRouteBytes = 24;
  constexpr uint64_t kKeyBytes = 160;
  constexpr uint64_t kOverhead = 64 << 10;
  const uint64_t tokens = static_cast<uint64_t>(std::max<int64_t>(max_batch_tokens, 1));
  uint64_t limit = kOverhead;
  absl::MutexLock lock(&mu_);
  for (const auto& [fingerprint, model] : models_) {
    const uint64_t n_embd = static_cast<uint64_t>(std::max<int64_t>(model.n_embd, 1));
    const uint64_t n_expert = static_cast<uint64_t>(std::max(model.n_expert, 1));
    const uint64_t n_layer = static_cast<uint64_t>(std::max(model.n_layer, 1));
    limit = std::max(limit, tokens * n_embd * 4 + tokens * n_expert * kRouteBytes +
                                n_layer * n_expert * kKeyBytes + kOverhead);
  }
  return limit;
}

}  // namespace colibri::expert_node
