#include "model/speculative/step_cost.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace colibri::speculative {

StepCost::StepCost(double weight) : weight_(std::clamp(weight, 1e-6, 1.0)) {}

void StepCost::Observe(int tokens, double seconds) {
  if (tokens < 1 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  auto [it, inserted] = mean_.emplace(tokens, seconds);
  if (!inserted) it->second += weight_ * (seconds - it->second);
}

double StepCost::Seconds(int tokens) const {
  if (mean_.empty()) return 0;
  const auto above = mean_.lower_bound(tokens);
  if (above != mean_.end() && above->first == tokens) return above->second;
  if (above == mean_.begin()) return above->second;
  const auto below = std::prev(above);
  if (above != mean_.end()) {
    const double t = static_cast<double>(tokens - below->first) / (above->first - below->first);
    return below->second + t * (above->second - below->second);
  }
  if (below == mean_.begin()) return below->second;
  const auto second = std::prev(below);
  const double slope =
      std::max(0.0, (below->second - second->second) / (below->first - second->first));
  return below->second + slope * (tokens - below->first);
}

}  // namespace colibri::speculative
