#include "coordinator/cluster/replica_choice.h"

#include <algorithm>

namespace colibri::coordinator {

NodeSpeed SpeedOf(const LatencyEstimate& e) {
  NodeSpeed s;
  s.network_seconds = std::min({e.network_ewma, e.network_recent, e.network_high});
  s.seconds_per_work =
      std::min({e.seconds_per_work_ewma, e.seconds_per_work_recent, e.seconds_per_work_high});
  if (e.samples >= kSpreadReplies) s.network_high_seconds = e.network_high;
  return s;
}

std::vector<int> ChooseFastestReplicas(const placement::Placement& placement, int layer,
                                       absl::Span<const int64_t> work,
                                       const std::vector<NodeSpeed>& speed,
                                       const std::vector<bool>& usable,
                                       absl::Span<const int64_t> node_work) {
  const int n_expert = placement.n_expert(layer);
  std::vector<int> chosen(n_expert, 0);
  if (placement.max_copies() == 1) return chosen;
  auto owner = [&](int e, int i) { return placement.Owners(layer, e)[i]; };
  auto copies = [&](int e) { return static_cast<int>(placement.Owners(layer, e).size()); };
  std::vector<int64_t> load(placement.n_nodes(), 0);  // [node]: work given so far
  std::vector<int> open;  // experts of the batch with more than one usable copy
  for (int e = 0; e < n_expert && e < static_cast<int>(work.size()); ++e) {
    if (work[e] <= 0) continue;
    int first = -1;
    int n_usable = 0;
    for (int i = 0; i < copies(e); ++i) {
      if (!usable[owner(e, i)]) continue;
      if (first < 0) first = i;
      ++n_usable;
    }
    if (n_usable == 0) continue;
    chosen[e] = first;
    if (n_usable == 1) {
      load[owner(e, first)] += work[e];
    } else {
      open.push_back(e);
    }
  }
  std::stable_sort(open.begin(), open.end(), [&](int a, int b) { return work[a] > work[b]; });
  std::vector<double> finish(placement.max_copies());
  for (int e : open) {
    int earliest = -1;  // replica index
    for (int i = 0; i < copies(e); ++i) {
      const int node = owner(e, i);
      if (!usable[node]) continue;
      finish[i] = speed[node].Expected(load[node] + work[e]);
      if (earliest < 0 || finish[i] < finish[earliest]) earliest = i;
    }
    const double band = std::max(finish[earliest] * kEquallyFastSlack,
                                 finish[earliest] + speed[owner(e, earliest)].NetworkSpread());
    int best = -1;
    for (int i = 0; i < copies(e); ++i) {
      const int node = owner(e, i);
      if (!usable[node] || finish[i] > band) continue;
      if (best < 0 || load[node] < load[owner(e, best)]) {
        best = i;
      } else if (load[node] == load[owner(e, best)] &&
                 static_cast<size_t>(node) < node_work.size() &&
                 static_cast<size_t>(owner(e, best)) < node_work.size() &&
                 node_work[node] < node_work[owner(e, best)]) {
        best = i;
      }
    }
    chosen[e] = best;
    load[owner(e, best)] += work[e];
  }
  return chosen;
}

}  // namespace colibri::coordinator
