#include "model/speculative/draft_length.h"

#include <algorithm>

namespace colibri::speculative {

DraftLength::DraftLength(const DraftLengthOptions& options) : options_(options) {}

double DraftLength::acceptance() const { return accepted_ / (accepted_ + rejected_); }

double DraftLength::Rate(int k) const {
  const double a = acceptance();
  double yield = 1, term = 1;
  for (int j = 1; j <= k; ++j) {
    term *= a;
    yield += term;
  }
  return yield / (t1_ + marginal_ * k);
}

int DraftLength::Next() {
  const int max_draft = std::max(1, options_.max_draft);
  if (!options_.adaptive) return max_draft;
  // Measure a plain step first, then one verify step, before trusting the
  // model of the cost.
  if (t1_ <= 0) return 0;
  if (!marginal_known_) return std::min(std::max(1, options_.initial_draft), max_draft);
  int best = 0;
  double best_rate = Rate(0);
  for (int k = 1; k <= max_draft; ++k) {
    const double rate = Rate(k);
    if (rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  if (++steps_since_probe_ >= std::max(1, options_.probe_interval)) {
    steps_since_probe_ = 0;
    return best == 0 ? std::min(std::max(1, options_.initial_draft), max_draft) : 0;
  }
  return best;
}

void DraftLength::OnPlainStep(double seconds) {
  t1_ = t1_ <= 0 ? seconds : t1_ + options_.timing_weight * (seconds - t1_);
}

void DraftLength::OnVerifyStep(int drafted, int accepted, double seconds) {
  if (drafted <= 0) return;
  accepted_ = accepted_ * options_.acceptance_decay + accepted;
  rejected_ = rejected_ * options_.acceptance_decay + (accepted < drafted ? 1 : 0);
  if (t1_ <= 0) return;
  // Time beyond a plain step, per drafted token (not below zero: noise).
  const double marginal = std::max(0.0, (seconds - t1_) / drafted);
  if (!marginal_known_) {
    marginal_ = marginal;
    marginal_known_ = true;
  } else {
    marginal_ += options_.timing_weight * (marginal - marginal_);
  }
}

}  // namespace colibri::speculative
