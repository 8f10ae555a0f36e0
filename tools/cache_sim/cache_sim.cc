#include "tools/cache_sim/cache_sim.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace colibri::cache_sim {
namespace {

using expert_node::AdmitKind;
using expert_node::CachePolicy;
using expert_node::ExpertId;

ExpertId SimId(int layer, int expert) { return ExpertId{"sim", layer, expert}; }

}  // namespace

std::vector<int> ExpertsPerLayer(const std::vector<moe::TraceRecord>& records) {
  std::vector<int> experts;
  for (const moe::TraceRecord& r : records) {
    if (r.layer >= static_cast<int>(experts.size())) experts.resize(r.layer + 1, 0);
    if (r.kind != moe::TraceRecord::Kind::kRoute) continue;
    for (const auto& [e, tokens] : r.experts) experts[r.layer] = std::max(experts[r.layer], e + 1);
  }
  return experts;
}

int64_t CountSteps(const std::vector<moe::TraceRecord>& records) {
  int64_t steps = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    if (i == 0 || records[i].step != records[i - 1].step) ++steps;
  }
  return steps;
}

absl::StatusOr<std::vector<NodeEvent>> NodeWorkload(const std::vector<moe::TraceRecord>& records,
                                                    const placement::Placement& placement,
                                                    int node) {
  if (node < 0 || node >= placement.n_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", node, " is not in the placement's ", placement.n_nodes(), " nodes"));
  }
  const std::vector<bool> healthy(placement.n_nodes(), true);
  std::vector<NodeEvent> events;
  for (size_t i = 0; i < records.size(); ++i) {
    const moe::TraceRecord& r = records[i];
    if (r.layer >= placement.n_layer()) {
      return absl::InvalidArgumentError(absl::StrCat("trace record ", i, ": layer ", r.layer,
                                                     " beyond the placement's ",
                                                     placement.n_layer(), " layers"));
    }
    const int n_expert = placement.n_expert(r.layer);
    std::vector<int64_t> cost(n_expert, 0);
    for (const auto& [e, tokens] : r.experts) {
      if (e >= n_expert) {
        return absl::InvalidArgumentError(absl::StrCat("trace record ", i, ": layer ", r.layer,
                                                       " expert ", e, " beyond its ", n_expert,
                                                       " experts"));
      }
      cost[e] = placement::ExpertWork(r.kind == moe::TraceRecord::Kind::kRoute ? tokens : 1);
    }
    const std::vector<int> chosen =
        placement.replicas() > 1 ? placement::BalanceReplicas(placement, r.layer, cost, healthy)
                                 : std::vector<int>(n_expert, 0);
    for (const auto& [e, tokens] : r.experts) {
      if (placement.Owners(r.layer, e)[chosen[e]] != node) continue;
      NodeEvent ev;
      ev.kind =
          r.kind == moe::TraceRecord::Kind::kRoute ? NodeEvent::Kind::kUse : NodeEvent::Kind::kHint;
      ev.layer = r.layer;
      ev.expert = e;
      ev.group = static_cast<int64_t>(i);
      events.push_back(ev);
    }
  }
  return events;
}

SimResult SimulatePolicy(const std::vector<NodeEvent>& events, expert_node::CachePolicyKind kind,
                         const SimOptions& options) {
  std::unique_ptr<CachePolicy> policy = expert_node::MakeCachePolicy(kind, options.policy);
  const size_t capacity = static_cast<size_t>(std::max(options.capacity, 0));
  SimResult result;
  absl::flat_hash_map<ExpertId, bool> resident;  // -> admitted by a hint, not yet used
  absl::flat_hash_set<ExpertId> pinned;          // the current layer's requests
  int64_t group = -1;
  // The first resident a load may evict, or null.
  auto victim = [&]() -> std::unique_ptr<ExpertId> {
    for (const ExpertId& id : policy->VictimOrder()) {
      if (!pinned.contains(id)) return std::make_unique<ExpertId>(id);
    }
    return nullptr;
  };
  auto evict = [&](const ExpertId& id) {
    auto it = resident.find(id);
    if (it->second) ++result.prefetch_wasted;
    resident.erase(it);
    policy->Evicted(id);
  };
  const bool prefetch = options.prefetch || options.prefetch_all;
  for (const NodeEvent& ev : events) {
    const ExpertId id = SimId(ev.layer, ev.expert);
    if (ev.kind == NodeEvent::Kind::kHint) {
      // Hints reach a RAM tier only as prefetches (RamTier::Prefetch).
      if (!prefetch) continue;
      policy->Hinted(id);
      if (resident.contains(id) || capacity == 0) continue;
      std::unique_ptr<ExpertId> out;
      if (resident.size() >= capacity) {
        out = victim();
        if (out == nullptr) continue;
      }
      const double p_victim = out == nullptr ? 0 : policy->UseProbability(*out);
      if (!options.prefetch_all &&
          !expert_node::PrefetchPays(policy->HintPrecision(id), options.prefetch_cost, p_victim)) {
        continue;
      }
      if (out != nullptr) evict(*out);
      resident[id] = true;
      policy->Admitted(id, AdmitKind::kPrefetch);
      ++result.prefetch_issued;
      continue;
    }
    if (ev.group != group) {
      pinned.clear();
      group = ev.group;
    }
    ++result.requests;
    pinned.insert(id);
    auto it = resident.find(id);
    if (it != resident.end()) {
      ++result.hits;
      if (it->second) {
        ++result.prefetch_used;
        it->second = false;
      }
      policy->Used(id, true);
      continue;
    }
    policy->Used(id, false);
    if (resident.size() >= capacity) {
      std::unique_ptr<ExpertId> out = capacity == 0 ? nullptr : victim();
      if (out == nullptr) {
        ++result.uncached;
        continue;
      }
      evict(*out);
    }
    resident[id] = false;
    policy->Admitted(id, AdmitKind::kDemand);
  }
  for (const auto& [id, unused] : resident) result.prefetch_wasted += unused ? 1 : 0;
  return result;
}

namespace {

// What an offline policy knows of a resident.
struct OfflineEntry {
  size_t next = 0;   // index of its next request (kNever: none)
  size_t last = 0;   // index of its latest request
  int64_t uses = 0;  // its requests in the whole workload
};

constexpr size_t kNever = std::numeric_limits<size_t>::max();

int64_t Key(const NodeEvent& ev) { return (int64_t{ev.layer} << 32) | ev.expert; }

// Replays the kUse events with the layer pinning of SimulatePolicy; a miss
// with a full cache evicts the unpinned resident that `first` orders first
// (first(a, b): a goes before b; keys break ties, the smaller first).
template <typename First>
SimResult SimulateOffline(const std::vector<NodeEvent>& events, int capacity, First first) {
  // next[i]: the index of the next request of event i's expert, or kNever.
  std::vector<size_t> next(events.size(), kNever);
  absl::flat_hash_map<int64_t, size_t> seen;
  absl::flat_hash_map<int64_t, int64_t> uses;
  for (size_t i = events.size(); i-- > 0;) {
    if (events[i].kind != NodeEvent::Kind::kUse) continue;
    ++uses[Key(events[i])];
    auto [it, inserted] = seen.try_emplace(Key(events[i]), i);
    if (!inserted) {
      next[i] = it->second;
      it->second = i;
    }
  }
  SimResult result;
  absl::flat_hash_map<int64_t, OfflineEntry> resident;
  absl::flat_hash_set<int64_t> pinned;
  int64_t group = -1;
  for (size_t i = 0; i < events.size(); ++i) {
    const NodeEvent& ev = events[i];
    if (ev.kind != NodeEvent::Kind::kUse) continue;
    if (ev.group != group) {
      pinned.clear();
      group = ev.group;
    }
    ++result.requests;
    const int64_t k = Key(ev);
    pinned.insert(k);
    auto it = resident.find(k);
    if (it != resident.end()) {
      ++result.hits;
      it->second.next = next[i];
      it->second.last = i;
      continue;
    }
    if (static_cast<int>(resident.size()) >= capacity) {
      auto victim = resident.end();
      for (auto r = resident.begin(); r != resident.end(); ++r) {
        if (pinned.contains(r->first)) continue;
        if (victim == resident.end() || first(r->second, victim->second) ||
            (!first(victim->second, r->second) && r->first < victim->first)) {
          victim = r;
        }
      }
      if (victim == resident.end()) {
        ++result.uncached;
        continue;
      }
      resident.erase(victim);
    }
    resident[k] = OfflineEntry{next[i], i, uses[k]};
  }
  return result;
}

}  // namespace

SimResult SimulateBelady(const std::vector<NodeEvent>& events, int capacity) {
  return SimulateOffline(events, capacity, [](const OfflineEntry& a, const OfflineEntry& b) {
    return a.next > b.next;
  });
}

SimResult SimulateOracleFrequency(const std::vector<NodeEvent>& events, int capacity) {
  return SimulateOffline(events, capacity, [](const OfflineEntry& a, const OfflineEntry& b) {
    return a.uses != b.uses ? a.uses < b.uses : a.last < b.last;
  });
}

}  // namespace colibri::cache_sim
