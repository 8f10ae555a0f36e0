// Which copy of each expert of a layer computes it, when experts have copies
// on several nodes (--replica-choice).
//
// Thread-safety: pure functions.
#ifndef COLIBRI_COORDINATOR_CLUSTER_REPLICA_CHOICE_H_
#define COLIBRI_COORDINATOR_CLUSTER_REPLICA_CHOICE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "placement/placement.h"

namespace colibri::coordinator {

enum class ReplicaChoice {
  // The copy expected to answer first, given the work already given to each
  // node in the layer (ChooseFastestReplicas).
  kFastest,
  // The copy that keeps the busiest node's work least
  // (placement::BalanceReplicas), blind to the nodes' speed.
  kBalance,
  // Always the first healthy copy in Owners order.
  kPrimary,
};

// A node's expected reply time for a call: network_seconds plus
// seconds_per_work per placement::ExpertWork unit it carries.
struct NodeSpeed {
  double network_seconds = 0;
  double seconds_per_work = 0;
};

// Expected finish times within this factor of the earliest count as equally
// early: among those, the least loaded node wins, so that nodes of about the
// same speed share the work instead of the marginally faster one taking all.
inline constexpr double kEquallyFastSlack = 1.25;

// work[e]: the ExpertWork of expert e in the layer's batch (0: not in it).
// speed[node] and usable[node] for every node of the placement. Returns
// [n_expert] indexes into Owners(layer, e), like BalanceReplicas: experts
// with one usable copy go there first; the others, by decreasing work (then
// expert id), each to the usable copy with the earliest expected finish
// (network + seconds_per_work x (work given so far + its work)), the least
// loaded of those within kEquallyFastSlack of it, then the earlier in Owners
// order. 0 for experts not in the batch and those without a usable copy.
// Deterministic: the same arguments give the same choice.
std::vector<int> ChooseFastestReplicas(const placement::Placement& placement, int layer,
                                       absl::Span<const int64_t> work,
                                       const std::vector<NodeSpeed>& speed,
                                       const std::vector<bool>& usable);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_REPLICA_CHOICE_H_
