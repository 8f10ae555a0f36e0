// Cluster's re-placement thread (RebalanceLoop): computes the placement that
// health, membership and the wanted extra copies ask for, has the rebalancer
// realise it and installs it. See cluster.h.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster/cluster.h"

namespace colibri::coordinator {

namespace {

// (layer, expert, node) assignments of `to` that `from` does not have.
int64_t NewAssignments(const Placement& from, const Placement& to) {
  int64_t n = 0;
  for (int l = 0; l < to.n_layer(); ++l) {
    for (int e = 0; e < to.n_expert(l); ++e) {
      absl::Span<const int> before = from.Owners(l, e);
      for (int node : to.Owners(l, e)) {
        n += std::find(before.begin(), before.end(), node) == before.end() ? 1 : 0;
      }
    }
  }
  return n;
}

// `base` with those of `extras` that are placeable: on an available node in
// range that does not hold the expert already.
absl::StatusOr<Placement> WithPlaceableExtras(const Placement& base,
                                              const std::vector<placement::ExtraCopy>& extras,
                                              const std::vector<bool>& available) {
  std::vector<placement::ExtraCopy> placeable;
  for (const placement::ExtraCopy& x : extras) {
    if (x.layer < 0 || x.layer >= base.n_layer() || x.expert < 0 ||
        x.expert >= base.n_expert(x.layer) || x.node < 0 || x.node >= base.n_nodes() ||
        x.node >= static_cast<int>(available.size()) || !available[x.node]) {
      continue;
    }
    absl::Span<const int> owners = base.Owners(x.layer, x.expert);
    if (std::find(owners.begin(), owners.end(), x.node) != owners.end()) continue;
    placeable.push_back(x);
  }
  return base.WithExtraCopies(placeable);
}

// The extra copies of `to` that `from` lacks.
int64_t NewExtras(const Placement& from, const Placement& to) {
  const std::vector<placement::ExtraCopy> a = from.AllExtras();
  const std::vector<placement::ExtraCopy> b = to.AllExtras();
  int64_t n = 0;
  for (const placement::ExtraCopy& x : b) n += std::find(a.begin(), a.end(), x) == a.end();
  return n;
}

// The addresses of nodes [0, want.size()) that are left out of `want`,
// retired ones apart.
std::string NodeList(const Cluster& cluster, const std::vector<bool>& want,
                     const std::vector<bool>& retired, bool list_retired) {
  std::string out;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] || retired[i] != list_retired) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", cluster.node(static_cast<int>(i)).address);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

void Cluster::RebalanceLoop() {
  absl::Duration backoff = options_.probe_interval;
  while (true) {
    std::vector<bool> want;
    std::vector<bool> retired;
    std::vector<PlacementNode> placement_nodes;
    std::vector<placement::ExtraCopy> extras;
    bool repair = false;
    Rebalancer rebalancer;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || wanted_available_ != available_ || repair_requested_ ||
               wanted_extras_ != extras_;
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      want = wanted_available_;
      retired = retired_;
      placement_nodes = PlacementNodesOfSlots(static_cast<int>(want.size()));
      extras = wanted_extras_;
      repair = want == available_ && extras == extras_;
      repair_requested_ = false;
      rebalancer = rebalancer_;
    }
    const bool only_extras = !repair && want == available_;
    absl::Status status;
    std::unique_ptr<Placement> next;
    if (repair) {
      Log("cluster: repairing: re-sending the experts nodes reported lost");
      status = rebalancer(placement());
    } else {
      const int n_available = static_cast<int>(std::count(want.begin(), want.end(), true));
      absl::StatusOr<Placement> computed = Placement::Compute(
          placement_nodes, experts_per_layer_, std::min(options_.replicas, n_available), want);
      if (computed.ok()) computed = WithPlaceableExtras(*computed, extras, want);
      status = computed.status();
      if (status.ok()) {
        next = std::make_unique<Placement>(*std::move(computed));
        if (only_extras) {
          Log(absl::StrCat("cluster: extra copies of hot experts: ", NewExtras(placement(), *next),
                           " to add, ", NewExtras(*next, placement()), " to drop"));
        } else {
          Log(absl::StrCat(
              "cluster: re-placing experts (excluded: ", NodeList(*this, want, retired, false),
              "; retired: ", NodeList(*this, want, retired, true), "; ",
              NewAssignments(placement(), *next), " expert copies move)"));
        }
        status = rebalancer(*next);
      }
    }
    if (!status.ok()) {
      Log(absl::StrCat(repair ? "cluster: repair failed, will retry: "
                              : "cluster: re-placement failed, the current placement stays: ",
                       status.message()));
      absl::MutexLock lock(&mu_);
      if (repair) repair_requested_ = true;
      mu_.AwaitWithTimeout(absl::Condition(&stop_), backoff);
      backoff = std::min(backoff * 2, absl::Seconds(30));
      continue;
    }
    backoff = options_.probe_interval;
    if (repair) {
      absl::MutexLock lock(&mu_);
      ++repairs_;
      continue;
    }
    const int64_t moved = NewAssignments(placement(), *next);
    const int64_t added = NewExtras(placement(), *next);
    const int64_t dropped = NewExtras(*next, placement());
    {
      absl::MutexLock lock(&mu_);
      extras_ = extras;
      extra_counters_.added += added;
      extra_counters_.dropped += dropped;
      const absl::Time now = Now();
      placements_.back().second = now;
      placements_.erase(
          std::remove_if(placements_.begin(), placements_.end(),
                         [now](const auto& p) { return now - p.second > kPlacementGrace; }),
          placements_.end());
      placements_.emplace_back(std::move(next), absl::InfiniteFuture());
      ++installed_;
      available_ = want;
      // Nodes that joined meanwhile are not in this placement yet.
      available_.resize(wanted_available_.size(), false);
      moved_experts_ += moved;
      current_.store(placements_.back().first.get(), std::memory_order_release);
    }
    if (only_extras) {
      Log(absl::StrCat("cluster: extra copies in force: ", added, " added, ", dropped, " dropped"));
    } else {
      Log(absl::StrCat("cluster: new placement in force (excluded: ",
                       NodeList(*this, want, retired, false), ")"));
    }
    ReleaseRetiredClients();
  }
}

}  // namespace colibri::coordinator
