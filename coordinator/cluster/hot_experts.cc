#include "coordinator/cluster/hot_experts.h"

#include <algorithm>
#include <numeric>

namespace colibri::coordinator {
namespace {

using placement::ExtraCopy;
using placement::Placement;

// Experts of a busiest node tried as copies per layer and round.
constexpr int kCandidatesPerLayer = 8;

double Max(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// The inputs sized to the placement, with their defaults filled in.
struct Normalized {
  std::vector<double> seconds_per_load;   // [node] > 0
  std::vector<bool> usable;               // [node]
  std::vector<int64_t> budget;            // [node]
  std::vector<std::vector<double>> load;  // [layer][expert]
  std::vector<int64_t> expert_bytes;      // [layer]
};

Normalized Normalize(const HotExpertInputs& in) {
  const Placement& p = *in.placement;
  const int n = p.n_nodes();
  Normalized out;
  double sum = 0;
  int known = 0;
  for (int i = 0; i < n && i < static_cast<int>(in.seconds_per_load.size()); ++i) {
    if (in.seconds_per_load[i] > 0) {
      sum += in.seconds_per_load[i];
      ++known;
    }
  }
  const double fill = known > 0 ? sum / known : 1.0;
  out.seconds_per_load.assign(n, fill);
  out.usable.assign(n, true);
  out.budget.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (i < static_cast<int>(in.seconds_per_load.size()) && in.seconds_per_load[i] > 0) {
      out.seconds_per_load[i] = in.seconds_per_load[i];
    }
    if (i < static_cast<int>(in.usable.size())) out.usable[i] = in.usable[i];
    if (i < static_cast<int>(in.budget_bytes.size())) out.budget[i] = in.budget_bytes[i];
  }
  out.load.resize(p.n_layer());
  out.expert_bytes.assign(p.n_layer(), 0);
  for (int l = 0; l < p.n_layer(); ++l) {
    out.load[l].assign(p.n_expert(l), 0.0);
    if (l < static_cast<int>(in.load.size())) {
      for (int e = 0; e < p.n_expert(l) && e < static_cast<int>(in.load[l].size()); ++e) {
        out.load[l][e] = std::max(0.0, in.load[l][e]);
      }
    }
    if (l < static_cast<int>(in.expert_bytes.size())) {
      out.expert_bytes[l] = std::max<int64_t>(0, in.expert_bytes[l]);
    }
  }
  return out;
}

double LayerCost(const std::vector<std::vector<int>>& owners, const Normalized& m, int layer) {
  return Max(LayerNodeTimes(owners, m.load[layer], m.seconds_per_load, m.usable));
}

}  // namespace

std::vector<double> LayerNodeTimes(const std::vector<std::vector<int>>& owners,
                                   const std::vector<double>& load,
                                   const std::vector<double>& seconds_per_load,
                                   const std::vector<bool>& usable) {
  const int n_nodes = static_cast<int>(seconds_per_load.size());
  std::vector<double> time(n_nodes, 0.0);
  const int n_expert = static_cast<int>(std::min(owners.size(), load.size()));
  std::vector<int> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return load[a] > load[b]; });
  std::vector<int> copies;
  for (int e : order) {
    const double w = load[e];
    if (!(w > 0)) continue;
    copies.clear();
    for (int node : owners[e]) {
      if (node >= 0 && node < n_nodes &&
          (node >= static_cast<int>(usable.size()) || usable[node])) {
        copies.push_back(node);
      }
    }
    if (copies.empty()) continue;
    std::stable_sort(copies.begin(), copies.end(), [&](int a, int b) { return time[a] < time[b]; });
    // Water-filling: the m earliest copies rise to a common finish time T
    // with sum_i (T - time_i) / seconds_per_load_i = w, T below the next copy's
    // time.
    double weighted = 0;  // sum time_i * rate_i over the first m
    double rate = 0;      // sum rate_i over the first m
    double level = 0;
    size_t m = 0;
    while (m < copies.size()) {
      const double r = 1.0 / seconds_per_load[copies[m]];
      weighted += time[copies[m]] * r;
      rate += r;
      ++m;
      level = (w + weighted) / rate;
      if (m == copies.size() || level <= time[copies[m]]) break;
    }
    for (size_t i = 0; i < m; ++i) time[copies[i]] = level;
  }
  return time;
}

HotExpertPlan PlanHotExperts(const HotExpertInputs& in, const HotExpertOptions& options) {
  HotExpertPlan plan;
  if (in.placement == nullptr) return plan;
  const Placement& p = *in.placement;
  const Normalized m = Normalize(in);
  const int n_nodes = p.n_nodes();

  // [layer][expert]: the owners the plan is working on.
  std::vector<std::vector<std::vector<int>>> owners(p.n_layer());
  for (int l = 0; l < p.n_layer(); ++l) {
    owners[l].resize(p.n_expert(l));
    for (int e = 0; e < p.n_expert(l); ++e) {
      const auto o = p.Owners(l, e);
      owners[l][e].assign(o.begin(), o.end());
    }
  }
  auto total_cost = [&]() {
    double c = 0;
    for (int l = 0; l < p.n_layer(); ++l) c += LayerCost(owners[l], m, l);
    return c;
  };
  plan.cost_before = total_cost();
  const std::vector<ExtraCopy> current = p.AllExtras();
  double total_load = 0;
  for (const auto& layer : m.load) {
    total_load = std::accumulate(layer.begin(), layer.end(), total_load);
  }
  if (!(total_load > 0)) {
    plan.extras = current;
    plan.cost_after = plan.cost_before;
    return plan;
  }

  auto remove = [&](const ExtraCopy& x) {
    std::vector<int>& o = owners[x.layer][x.expert];
    o.erase(std::find(o.begin(), o.end(), x.node));
  };
  std::vector<bool> keep(current.size(), true);
  std::vector<int64_t> used(n_nodes, 0);
  // Copies on unusable nodes, of layers without a size, or beyond their
  // node's budget (the least loaded first) go.
  for (size_t i = 0; i < current.size(); ++i) {
    const ExtraCopy& x = current[i];
    if (!m.usable[x.node] || m.expert_bytes[x.layer] <= 0) {
      keep[i] = false;
    } else {
      used[x.node] += m.expert_bytes[x.layer];
    }
  }
  std::vector<size_t> by_load(current.size());
  std::iota(by_load.begin(), by_load.end(), 0);
  std::stable_sort(by_load.begin(), by_load.end(), [&](size_t a, size_t b) {
    return m.load[current[a].layer][current[a].expert] <
           m.load[current[b].layer][current[b].expert];
  });
  for (size_t i : by_load) {
    const ExtraCopy& x = current[i];
    if (keep[i] && used[x.node] > m.budget[x.node]) {
      keep[i] = false;
      used[x.node] -= m.expert_bytes[x.layer];
    }
  }
  for (size_t i = 0; i < current.size(); ++i) {
    if (!keep[i]) remove(current[i]);
  }
  // Cold copies: per layer, the least loaded first, each dropped while the
  // layer's cost stays within min_gain of what it was with them.
  {
    std::vector<double> reference(p.n_layer(), -1);
    for (size_t i : by_load) {
      if (!keep[i]) continue;
      const ExtraCopy& x = current[i];
      if (reference[x.layer] < 0) reference[x.layer] = LayerCost(owners[x.layer], m, x.layer);
      remove(x);
      if (LayerCost(owners[x.layer], m, x.layer) <= reference[x.layer] * (1 + options.min_gain)) {
        keep[i] = false;
        used[x.node] -= m.expert_bytes[x.layer];
      } else {
        owners[x.layer][x.expert].push_back(x.node);
      }
    }
  }
  for (size_t i = 0; i < current.size(); ++i) {
    (keep[i] ? plan.extras : plan.dropped).push_back(current[i]);
  }

  // Adds: each round, the one copy that lowers some layer's cost most, of an
  // expert its busiest node computes, on a node with room.
  while (true) {
    double best_gain = 0;
    ExtraCopy best;
    for (int l = 0; l < p.n_layer(); ++l) {
      const int64_t bytes = m.expert_bytes[l];
      if (bytes <= 0 || plan.bytes_added + bytes > options.max_bytes_added) continue;
      const std::vector<double> time =
          LayerNodeTimes(owners[l], m.load[l], m.seconds_per_load, m.usable);
      const int busiest =
          static_cast<int>(std::max_element(time.begin(), time.end()) - time.begin());
      const double cost = time[busiest];
      if (!(cost > 0)) continue;
      std::vector<int> candidates;
      for (int e = 0; e < p.n_expert(l); ++e) {
        const std::vector<int>& o = owners[l][e];
        if (m.load[l][e] > 0 && std::find(o.begin(), o.end(), busiest) != o.end()) {
          candidates.push_back(e);
        }
      }
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](int a, int b) { return m.load[l][a] > m.load[l][b]; });
      if (candidates.size() > kCandidatesPerLayer) candidates.resize(kCandidatesPerLayer);
      for (int e : candidates) {
        std::vector<int>& o = owners[l][e];
        for (int node = 0; node < n_nodes; ++node) {
          if (!m.usable[node] || used[node] + bytes > m.budget[node] ||
              std::find(o.begin(), o.end(), node) != o.end() ||
              std::find(plan.dropped.begin(), plan.dropped.end(), ExtraCopy{l, e, node}) !=
                  plan.dropped.end()) {
            continue;
          }
          o.push_back(node);
          const double gain = cost - LayerCost(owners[l], m, l);
          o.pop_back();
          if (gain > options.min_gain * cost && gain > best_gain) {
            best_gain = gain;
            best = {l, e, node};
          }
        }
      }
    }
    if (!(best_gain > 0)) break;
    owners[best.layer][best.expert].push_back(best.node);
    used[best.node] += m.expert_bytes[best.layer];
    plan.bytes_added += m.expert_bytes[best.layer];
    plan.added.push_back(best);
    plan.extras.push_back(best);
  }
  plan.cost_after = total_cost();
  return plan;
}

}  // namespace colibri::coordinator
