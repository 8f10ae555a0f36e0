// Hot-expert replication in the background (serve --rebalance): every
// interval, reads how often each expert was routed since the last round,
// decays the older counts, asks PlanHotExperts which extra copies the nodes
// should hold for that load and their speeds and budgets, and hands the answer
// to Cluster::SetExtraCopies (whose re-placement thread sends the copies and
// installs them once the nodes hold them). Generation never waits for it: it
// reads counters and the cluster's estimates and returns.
//
// Thread-safety: Round and stats are thread-safe; the background thread (Start)
// calls Round every interval until the object is destroyed.
#ifndef COLIBRI_COORDINATOR_CLUSTER_HOT_EXPERT_REBALANCER_H_
#define COLIBRI_COORDINATOR_CLUSTER_HOT_EXPERT_REBALANCER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/cluster/hot_experts.h"

namespace colibri::coordinator {

struct HotExpertRebalancerOptions {
  // Time between rounds. Default: 10 s.
  absl::Duration interval = absl::Seconds(10);
  // Bytes of new copies one round may ask for (HotExpertOptions::
  // max_bytes_added). Default: 256 MiB.
  int64_t max_bytes_per_round = int64_t{256} << 20;
  // The weight the previous rounds' decayed load keeps at each round, in
  // [0, 1): 0 plans on the last interval alone. Default: 0.5.
  double decay = 0.5;
  // HotExpertOptions::min_gain. Default: 0.02.
  double min_gain = 0.02;
};

// Cumulative figures of the rounds.
struct HotExpertRebalancerStats {
  int64_t rounds = 0;
  int64_t planned_added = 0;    // copies the plans added
  int64_t planned_dropped = 0;  // copies the plans dropped
  int64_t planned_bytes = 0;    // bytes of the added copies
  // The last plan's model cost (HotExpertPlan) with the extras in force and
  // with its own.
  double last_cost_before = 0;
  double last_cost_after = 0;
};

class HotExpertRebalancer {
 public:
  // [layer][expert]: routes so far (cumulative, e.g. ExpertUse::Snapshot).
  using UseSource = std::function<std::vector<std::vector<int64_t>>()>;

  // cluster: borrowed, outlives this. expert_bytes[layer]: bytes of one expert
  // of the layer (0: the layer gets no copies). Does not start a thread.
  HotExpertRebalancer(const HotExpertRebalancerOptions& options, Cluster* cluster,
                      std::vector<int64_t> expert_bytes, UseSource use);
  ~HotExpertRebalancer();
  HotExpertRebalancer(const HotExpertRebalancer&) = delete;
  HotExpertRebalancer& operator=(const HotExpertRebalancer&) = delete;

  // Runs Round every interval on a thread of its own until destruction.
  void Start();
  // One round: reads the use since the last round, plans and hands the plan
  // to the cluster; returns the plan.
  HotExpertPlan Round();
  HotExpertRebalancerStats stats() const;

  // Each node's budget for extra copies: its reported RAM budget
  // (InventoryReply.ram_budget_bytes) less the bytes of the experts the
  // placement gives it as rendezvous replicas, never below 0. Exposed for
  // tests.
  static std::vector<int64_t> ExtraBudgets(const Cluster& cluster, const Placement& placement,
                                           const std::vector<int64_t>& expert_bytes);

 private:
  const HotExpertRebalancerOptions options_;
  Cluster* const cluster_;
  const std::vector<int64_t> expert_bytes_;
  const UseSource use_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<int64_t>> last_use_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<double>> load_ ABSL_GUARDED_BY(mu_);
  HotExpertRebalancerStats stats_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_HOT_EXPERT_REBALANCER_H_
