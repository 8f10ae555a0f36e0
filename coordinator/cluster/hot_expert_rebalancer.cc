#include "coordinator/cluster/hot_expert_rebalancer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace colibri::coordinator {

HotExpertRebalancer::HotExpertRebalancer(const HotExpertRebalancerOptions& options,
                                         Cluster* cluster, std::vector<int64_t> expert_bytes,
                                         UseSource use)
    : options_(options),
      cluster_(cluster),
      expert_bytes_(std::move(expert_bytes)),
      use_(std::move(use)) {}

HotExpertRebalancer::~HotExpertRebalancer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void HotExpertRebalancer::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.interval);
        if (stop_) return;
      }
      Round();
    }
  });
}

std::vector<int64_t> HotExpertRebalancer::ExtraBudgets(const Cluster& cluster,
                                                       const Placement& placement,
                                                       const std::vector<int64_t>& expert_bytes) {
  const int n = placement.n_nodes();
  std::vector<int64_t> budget(n, 0);
  for (int i = 0; i < n && i < cluster.n_nodes(); ++i) {
    budget[i] = static_cast<int64_t>(cluster.node(i).inventory.ram_budget_bytes());
  }
  for (int l = 0; l < placement.n_layer(); ++l) {
    const int64_t bytes = l < static_cast<int>(expert_bytes.size()) ? expert_bytes[l] : 0;
    for (int e = 0; e < placement.n_expert(l); ++e) {
      for (int node : placement.Owners(l, e).first(placement.replicas())) budget[node] -= bytes;
    }
  }
  for (int64_t& b : budget) b = std::max<int64_t>(b, 0);
  return budget;
}

HotExpertPlan HotExpertRebalancer::Round() {
  absl::MutexLock lock(&mu_);
  const std::vector<std::vector<int64_t>> use = use_();
  // The decayed load: routes since the last round, plus the older load.
  load_.resize(use.size());
  last_use_.resize(use.size());
  for (size_t l = 0; l < use.size(); ++l) {
    load_[l].resize(use[l].size(), 0.0);
    last_use_[l].resize(use[l].size(), 0);
    for (size_t e = 0; e < use[l].size(); ++e) {
      const int64_t delta = std::max<int64_t>(0, use[l][e] - last_use_[l][e]);
      load_[l][e] = options_.decay * load_[l][e] + static_cast<double>(delta);
      last_use_[l][e] = use[l][e];
    }
  }
  const Placement& placement = cluster_->placement();
  const int n = placement.n_nodes();
  HotExpertInputs in;
  in.placement = &placement;
  in.load = load_;
  for (const NodeSpeed& s : cluster_->Speeds(n)) in.seconds_per_load.push_back(s.seconds_per_work);
  in.usable.resize(n);
  for (int i = 0; i < n; ++i) {
    in.usable[i] = cluster_->healthy(i) && !cluster_->excluded(i) && !cluster_->retired(i);
  }
  in.budget_bytes = ExtraBudgets(*cluster_, placement, expert_bytes_);
  in.expert_bytes = expert_bytes_;
  HotExpertOptions plan_options;
  plan_options.max_bytes_added = options_.max_bytes_per_round;
  plan_options.min_gain = options_.min_gain;
  HotExpertPlan plan = PlanHotExperts(in, plan_options);
  ++stats_.rounds;
  stats_.planned_added += static_cast<int64_t>(plan.added.size());
  stats_.planned_dropped += static_cast<int64_t>(plan.dropped.size());
  stats_.planned_bytes += plan.bytes_added;
  stats_.last_cost_before = plan.cost_before;
  stats_.last_cost_after = plan.cost_after;
  if (!plan.added.empty() || !plan.dropped.empty()) {
    cluster_->Log(absl::StrFormat(
        "rebalance: %d extra copies to add (%d bytes), %d to drop; plan cost %.3g -> %.3g (sum "
        "over layers of the busiest node's load x its seconds per unit)",
        plan.added.size(), plan.bytes_added, plan.dropped.size(), plan.cost_before,
        plan.cost_after));
    cluster_->SetExtraCopies(plan.extras);
  }
  return plan;
}

HotExpertRebalancerStats HotExpertRebalancer::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace colibri::coordinator
