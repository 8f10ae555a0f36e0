#include "coordinator/cluster/node_latency.h"

#include <algorithm>
#include <cmath>

namespace colibri::coordinator {
namespace {

// The p-quantile of `values` (nearest rank; 0 when empty).
double Quantile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  const size_t rank =
      static_cast<size_t>(std::min<double>(static_cast<double>(values.size()) - 1,
                                           std::ceil(p * static_cast<double>(values.size())) - 1));
  std::nth_element(values.begin(), values.begin() + rank, values.end());
  return values[rank];
}

// The median of the newest min(3, size) entries of `ring`, whose newest entry
// is at newest.
double RecentMedian(const std::vector<double>& ring, size_t newest) {
  const size_t n = std::min<size_t>(3, ring.size());
  double v[3] = {0, 0, 0};
  for (size_t i = 0; i < n; ++i) v[i] = ring[(newest + ring.size() - i) % ring.size()];
  std::sort(v, v + n);
  return n == 2 ? 0.5 * (v[0] + v[1]) : v[n / 2];
}

}  // namespace

LatencyEstimator::LatencyEstimator(const LatencyOptions& options) : options_(options) {
  options_.ewma_alpha = std::clamp(options_.ewma_alpha, 1e-3, 1.0);
  options_.window = std::max(options_.window, 1);
  options_.percentile = std::clamp(options_.percentile, 0.0, 1.0);
}

bool LatencyEstimator::Stale(absl::Time now) const {
  return estimate_.samples == 0 || now - estimate_.last_reply > options_.refresh_after;
}

void LatencyEstimator::Observe(absl::Time now, int64_t work, double wait_seconds,
                               double node_seconds) {
  // A reply is untrusted and clocks may step: keep every figure finite and
  // within the call's own wait.
  const double wait = std::isfinite(wait_seconds) ? std::max(0.0, wait_seconds) : 0.0;
  const double node = std::isfinite(node_seconds) ? std::clamp(node_seconds, 0.0, wait) : 0.0;
  const double network = wait - node;
  const double per_work = work > 0 ? node / static_cast<double>(work) : 0.0;

  if (Stale(now)) {
    estimate_ = LatencyEstimate();
    wait_.clear();
    network_.clear();
    per_work_.clear();
    next_ = 0;
    estimate_.wait_ewma = wait;
    estimate_.network_ewma = network;
    estimate_.seconds_per_work_ewma = per_work;
  } else {
    const double a = options_.ewma_alpha;
    estimate_.wait_ewma += a * (wait - estimate_.wait_ewma);
    estimate_.network_ewma += a * (network - estimate_.network_ewma);
    estimate_.seconds_per_work_ewma += a * (per_work - estimate_.seconds_per_work_ewma);
  }
  ++estimate_.samples;
  estimate_.last_reply = now;

  size_t newest;
  if (static_cast<int>(wait_.size()) < options_.window) {
    newest = wait_.size();
    wait_.push_back(wait);
    network_.push_back(network);
    per_work_.push_back(per_work);
  } else {
    newest = next_;
    wait_[next_] = wait;
    network_[next_] = network;
    per_work_[next_] = per_work;
    next_ = (next_ + 1) % wait_.size();
  }
  estimate_.network_recent = RecentMedian(network_, newest);
  estimate_.seconds_per_work_recent = RecentMedian(per_work_, newest);
  estimate_.wait_high = Quantile(wait_, options_.percentile);
  estimate_.network_high = Quantile(network_, options_.percentile);
  estimate_.seconds_per_work_high = Quantile(per_work_, options_.percentile);
}

}  // namespace colibri::coordinator
