#include "model/speculative/draft_length.h"

#include <algorithm>
#include <utility>

namespace colibri::speculative {
namespace {

// Below this, a draft's expected worth is not worth listing.
constexpr double kNegligibleYield = 1e-6;

}  // namespace

void DraftAcceptance::Observe(int accepted, bool rejected) {
  accepted_ = accepted_ * decay_ + std::max(0, accepted);
  rejected_ = rejected_ * decay_ + (rejected ? 1 : 0);
}

std::vector<int> PlanDrafts(const StepCost& cost, int base_tokens, double base_yield,
                            absl::Span<const DraftCandidate> candidates, int budget) {
  std::vector<int> plan(candidates.size(), 0);
  if (cost.empty() || budget <= 0) return plan;
  base_tokens = std::max(1, base_tokens);
  // Every candidate's j-th draft is worth a^j: listed by worth (a sequence's
  // own drafts stay in order, since a^j falls with j), the best plan of m
  // drafts is the first m.
  std::vector<std::pair<double, int>> worth;  // (expected tokens, candidate)
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double a = std::clamp(candidates[i].acceptance, 0.0, 1.0);
    double y = 1;
    for (int j = 0; j < candidates[i].most; ++j) {
      y *= a;
      if (y < kNegligibleYield) break;
      worth.emplace_back(y, static_cast<int>(i));
    }
  }
  std::stable_sort(worth.begin(), worth.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  const auto rate = [&](double yield, int tokens) {
    return yield / std::max(cost.Seconds(tokens), 1e-12);
  };
  const int most = std::min(budget, static_cast<int>(worth.size()));
  double yield = base_yield;
  double best_rate = rate(yield, base_tokens);
  int best = 0;
  for (int m = 1; m <= most; ++m) {
    yield += worth[m - 1].first;
    const double r = rate(yield, base_tokens + m);
    if (r > best_rate) {
      best_rate = r;
      best = m;
    }
  }
  for (int m = 0; m < best; ++m) ++plan[worth[m].second];
  return plan;
}

DraftLength::DraftLength(const DraftLengthOptions& options)
    : options_(options), cost_(options.timing_weight), acceptance_(options.acceptance_decay) {}

double DraftLength::draft_seconds() const {
  const int largest = cost_.largest_measured();
  if (largest <= 1) return 0;
  return (cost_.Seconds(largest) - cost_.Seconds(1)) / (largest - 1);
}

int DraftLength::Next() {
  const int max_draft = std::max(1, options_.max_draft);
  const int initial = std::min(std::max(1, options_.initial_draft), max_draft);
  if (!options_.adaptive) return max_draft;
  // Measure a plain step first, then one verify step, before trusting the
  // model of the cost.
  if (cost_.empty()) return 0;
  if (cost_.largest_measured() <= 1) return initial;
  const DraftCandidate self{acceptance(), max_draft};
  const int best = PlanDrafts(cost_, 1, 1.0, {&self, 1}, max_draft)[0];
  if (++steps_since_probe_ >= std::max(1, options_.probe_interval)) {
    steps_since_probe_ = 0;
    return best == 0 ? initial : 0;
  }
  return best;
}

void DraftLength::OnPlainStep(double seconds) { cost_.Observe(1, seconds); }

void DraftLength::OnVerifyStep(int drafted, int accepted, double seconds) {
  if (drafted <= 0) return;
  acceptance_.Observe(accepted, accepted < drafted);
  cost_.Observe(1 + drafted, seconds);
}

}  // namespace colibri::speculative
