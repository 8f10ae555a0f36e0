#include "coordinator/generation/expert_use.h"

#include <utility>

namespace colibri::coordinator {

ExpertUse::ExpertUse(std::vector<int> experts_per_layer) {
  counts_.reserve(experts_per_layer.size());
  for (int n : experts_per_layer) counts_.emplace_back(n > 0 ? n : 0, 0);
}

void ExpertUse::OnRoutes(int layer, int64_t n_tokens, int k, const int32_t* experts) {
  absl::MutexLock lock(&mu_);
  if (layer < 0 || layer >= static_cast<int>(counts_.size()) || counts_[layer].empty() ||
      n_tokens <= 0 || k <= 0) {
    ignored_ += n_tokens > 0 && k > 0 ? n_tokens * k : 0;
    return;
  }
  std::vector<int64_t>& row = counts_[layer];
  const int64_t n = n_tokens * k;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = experts[i];
    if (e < 0 || e >= static_cast<int32_t>(row.size())) {
      ++ignored_;
      continue;
    }
    ++row[e];
  }
  token_layers_ += n_tokens;
}

std::vector<std::vector<int64_t>> ExpertUse::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

int64_t ExpertUse::token_layers() const {
  absl::MutexLock lock(&mu_);
  return token_layers_;
}

int64_t ExpertUse::ignored() const {
  absl::MutexLock lock(&mu_);
  return ignored_;
}

}  // namespace colibri::coordinator
