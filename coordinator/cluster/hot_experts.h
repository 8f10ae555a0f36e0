// Hot-expert replication: which extra copies of experts the cluster should
// hold, given how much each expert is used, how fast each node works and how
// many bytes each node may give to extra copies. The decision only; the
// HotExpertRebalancer (hot_expert_rebalancer.h) feeds it and hands its answer
// to Cluster::SetExtraCopies.
//
// The model of a layer: every expert's load (routes per unit of time) is
// shared among its usable copies so that the nodes holding them finish as
// evenly as they can (water-filling in expert order, the heaviest first, as
// the coordinator's replica choice shares a busy expert over many steps); a
// node's time is its share of the load x its seconds per unit; the layer costs
// its busiest node's time, since a layer ends when its slowest call answers.
// A plan's cost is the sum over layers.
//
// Thread-safety: pure function.
#ifndef COLIBRI_COORDINATOR_CLUSTER_HOT_EXPERTS_H_
#define COLIBRI_COORDINATOR_CLUSTER_HOT_EXPERTS_H_

#include <cstdint>
#include <vector>

#include "placement/placement.h"

namespace colibri::coordinator {

struct HotExpertInputs {
  // The placement in force: its rendezvous copies are kept, its extra copies
  // (Placement::Extras) are the ones held now. Required.
  const placement::Placement* placement = nullptr;
  // [layer][expert]: the expert's recent load (e.g. routes per interval,
  // decayed); a layer or expert beyond it counts 0. All 0: the plan keeps the
  // extras in force (no traffic says nothing about which are hot).
  std::vector<std::vector<double>> load;
  // [node]: seconds per unit of load (> 0); nodes beyond it, or with a
  // figure <= 0, count as the mean of the others (1 when none has one).
  std::vector<double> seconds_per_load;
  // [node]: whether the node may hold and compute copies now; nodes beyond
  // it count as usable. An extra copy on an unusable node is dropped.
  std::vector<bool> usable;
  // [node]: bytes of extra copies the node may hold in all (its RAM budget
  // less its rendezvous share); nodes beyond it get 0. Extra copies beyond a
  // node's budget are dropped, the least loaded first.
  std::vector<int64_t> budget_bytes;
  // [layer]: bytes of one expert of the layer (what a copy costs to send and
  // hold). Layers beyond it, or with 0, never get extra copies.
  std::vector<int64_t> expert_bytes;
};

struct HotExpertOptions {
  // Bytes of new copies one plan may add (what one round may move).
  // Default: 256 MiB.
  int64_t max_bytes_added = int64_t{256} << 20;
  // A copy is added only when it lowers its layer's cost by more than this
  // fraction of it, and an extra copy is dropped only when dropping it raises
  // its layer's cost by no more than this fraction (so that a copy is not
  // added and dropped in turns). Default: 0.02.
  double min_gain = 0.02;
};

struct HotExpertPlan {
  // Every extra copy to hold: those in force that stay, then the added ones.
  std::vector<placement::ExtraCopy> extras;
  // Added and dropped copies; a copy dropped is not added back in the same plan.
  std::vector<placement::ExtraCopy> added;
  std::vector<placement::ExtraCopy> dropped;
  int64_t bytes_added = 0;
  // The model's cost (sum over layers of the busiest node's time) with the
  // extras in force and with `extras`.
  double cost_before = 0;
  double cost_after = 0;
};

HotExpertPlan PlanHotExperts(const HotExpertInputs& in, const HotExpertOptions& options = {});

// The model's view of one layer: [node] the time each node spends on the
// layer's load when the experts' loads are shared over `owners` (per expert:
// the nodes holding it; unusable ones are skipped) as described above.
// Exposed for tests and the stats.
std::vector<double> LayerNodeTimes(const std::vector<std::vector<int>>& owners,
                                   const std::vector<double>& load,
                                   const std::vector<double>& seconds_per_load,
                                   const std::vector<bool>& usable);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_HOT_EXPERTS_H_
