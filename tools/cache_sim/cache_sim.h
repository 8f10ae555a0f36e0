// Replays a routing trace (model/moe/routing_trace.h) against one expert
// node's RAM tier at a fixed capacity in experts: the node's share of the
// trace under a placement, then LRU, the adaptive policy (both the RAM tier's
// own code, expert_node/cache_policy.h), LFU told the counts in advance, and
// Belady's optimum (evict the resident whose next use is farthest away;
// demand loads only).
//
// Model of the node: every expert of the node's share has the same size; a
// layer's experts are requested together and pinned until the layer's last
// request (none of them is evicted to admit another); a miss evicts one
// unpinned resident when the cache is full, or is served uncached when all
// are pinned. Hints matter only with SimOptions::prefetch (or prefetch_all),
// as a RAM tier hears of them only through prefetches (RamTier::Prefetch):
// then they reach the policies as CachePolicy::Hinted (the adaptive policy
// protects hinted residents) and load experts ahead of use by the RAM tier's
// rule (expert_node::PrefetchPays); without prefetching they are ignored.
// Belady and the frequency oracle ignore hints.
//
// Thread-safety: free functions over their arguments only.
#ifndef COLIBRI_TOOLS_CACHE_SIM_CACHE_SIM_H_
#define COLIBRI_TOOLS_CACHE_SIM_CACHE_SIM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "expert_node/cache_policy.h"
#include "model/moe/routing_trace.h"
#include "placement/placement.h"

namespace colibri::cache_sim {

// One request of the node's workload.
struct NodeEvent {
  enum class Kind { kUse, kHint };
  Kind kind = Kind::kUse;
  int layer = 0;
  int expert = 0;
  int64_t group = 0;  // kUse: the trace record it came from (one layer of one step)
};

// Experts per layer seen in `records`: max id + 1 for every layer with R
// records, 0 for the others (dense layers), up to the highest layer.
std::vector<int> ExpertsPerLayer(const std::vector<moe::TraceRecord>& records);

// Forward steps in `records`: runs of records of one step (so traces
// replayed in sequence count each trace's steps). A step is one token of
// each generation it runs (the prompt's prefill is one step).
int64_t CountSteps(const std::vector<moe::TraceRecord>& records);

// The requests and hints reaching `node` (an index into the placement's
// nodes): each routed expert goes to the replica BalanceReplicas chooses for
// its record (cost ExpertWork(tokens), every node healthy), each hint to the
// replica chosen for the hinted experts of its record. InvalidArgument for a
// layer or expert outside the placement, or a bad node.
absl::StatusOr<std::vector<NodeEvent>> NodeWorkload(const std::vector<moe::TraceRecord>& records,
                                                    const placement::Placement& placement,
                                                    int node);

struct SimOptions {
  // Experts the cache holds. Default: 1.
  int capacity = 1;
  // Load hinted experts ahead of use by PrefetchPays. Default: false.
  bool prefetch = false;
  // Cost of a background read relative to a demand miss, for PrefetchPays.
  // Default: the node's (expert_node::kDefaultPrefetchCost, 0.5).
  double prefetch_cost = expert_node::kDefaultPrefetchCost;
  // Load every hinted expert (protected until used or the hint horizon),
  // ignoring the benefit rule, as the RAM tier did without one.
  // Default: false.
  bool prefetch_all = false;
  expert_node::CachePolicy::Options policy;
};

struct SimResult {
  uint64_t requests = 0;
  uint64_t hits = 0;
  uint64_t uncached = 0;         // misses not admitted: every resident pinned
  uint64_t prefetch_issued = 0;  // experts loaded by a hint
  uint64_t prefetch_used = 0;    // of those, requested while resident
  uint64_t prefetch_wasted = 0;  // of those, evicted (or left at the end) unused
  double hit_rate() const { return requests == 0 ? 0 : static_cast<double>(hits) / requests; }
  // Experts read from disk: every miss (admitted or served uncached) and
  // every prefetch, used or wasted.
  uint64_t reads() const { return requests - hits + prefetch_issued; }
};

SimResult SimulatePolicy(const std::vector<NodeEvent>& events, expert_node::CachePolicyKind kind,
                         const SimOptions& options);
// Belady's MIN over the kUse events (hints ignored): a miss with a full cache
// evicts the unpinned resident whose next request is farthest away.
SimResult SimulateBelady(const std::vector<NodeEvent>& events, int capacity);
// An online policy's ceiling on a workload whose experts are used
// independently of their past (near-uniform routing): LFU told each
// expert's request count over the whole workload in advance, but not their
// order. A miss with a full cache evicts the unpinned resident with the
// fewest requests in the workload, then the least recently used.
SimResult SimulateOracleFrequency(const std::vector<NodeEvent>& events, int capacity);

}  // namespace colibri::cache_sim

#endif  // COLIBRI_TOOLS_CACHE_SIM_CACHE_SIM_H_
