#include "model/speculative/draft_planner.h"

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

DraftPlanner::DraftPlanner(const DraftPlannerOptions& options)
    : options_(options), cost_(options.timing_weight) {}

std::vector<int> DraftPlanner::Plan(absl::Span<const DraftCandidate> candidates,
                                    absl::Span<int> undrafted, int budget) {
  const int n = static_cast<int>(candidates.size());
  std::vector<int> plan(candidates.size(), 0);
  const bool any = std::any_of(candidates.begin(), candidates.end(),
                               [](const DraftCandidate& c) { return c.most > 0; });
  if (!any || budget <= 0) return plan;
  const int initial = std::min(std::max(1, options_.initial_draft), std::max(1, options_.max_draft));
  const int probe_interval = std::max(1, options_.probe_interval);
  if (!options_.adaptive) {
    for (int i = 0; i < n; ++i) plan[i] = candidates[i].most;
  } else if (++steps_ % probe_interval == 0) {
    // Now and then a step without drafts, so that the cost of the decoding
    // tokens alone stays measured.
  } else if (!cost_.measured(n)) {
    // These tokens alone first, so that what drafts add can be measured.
  } else if (cost_.largest_measured() <= n) {
    // Nothing longer than these tokens alone measured yet: try.
    for (int i = 0; i < n; ++i) plan[i] = std::min(initial, candidates[i].most);
  } else {
    plan = PlanDrafts(cost_, n, n, candidates, budget);
    // A sequence whose drafts do not pay still drafts now and then, so that
    // its acceptance can recover.
    for (int i = 0; i < n; ++i) {
      if (plan[i] == 0 && candidates[i].most > 0 && ++undrafted[i] >= probe_interval) {
        plan[i] = std::min(initial, candidates[i].most);
      }
    }
  }
  // Within the budget, the earlier sequences first.
  for (int i = 0; i < n; ++i) {
    plan[i] = std::min(plan[i], budget);
    budget -= plan[i];
  }
  return plan;
}

}  // namespace colibri::speculative
