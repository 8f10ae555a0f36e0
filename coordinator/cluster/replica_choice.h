// Which copy of each expert of a layer computes it, when experts have copies
// on several nodes (--replica-choice).
//
// Thread-safety: pure functions.
#ifndef COLIBRI_COORDINATOR_CLUSTER_REPLICA_CHOICE_H_
#define COLIBRI_COORDINATOR_CLUSTER_REPLICA_CHOICE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "coordinator/cluster/node_latency.h"
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
// seconds_per_work per placement::ExpertWork unit it carries; and how late
// the fixed network part plausibly is (the high percentile of the node's
// replies), which bounds how precisely the expectation is known.
struct NodeSpeed {
  // Default: 0.
  double network_seconds = 0;
  // Default: 0.
  double seconds_per_work = 0;
  // Below network_seconds (e.g. the default 0: no spread known) counts as
  // network_seconds. Default: 0.
  double network_high_seconds = 0;

  double Expected(int64_t work) const {
    return network_seconds + seconds_per_work * static_cast<double>(work);
  }
  // How much later than expected a call may answer by the network's noise
  // alone: never negative.
  double NetworkSpread() const {
    return network_high_seconds > network_seconds ? network_high_seconds - network_seconds : 0.0;
  }
};

// Replies an estimate needs before SpeedOf takes its spread: with fewer, the
// 95th percentile is the slowest reply, and a node's first replies are often
// slow (cold caches and connections), which would make a 20 ms link look as
// early as loopback.
inline constexpr int64_t kSpreadReplies = 20;

// The speed of a node with estimate `e`: each figure the least of its
// average (EWMA), its recent figure (median of the newest 3 replies) and its
// high percentile; network_high_seconds its high percentile from
// kSpreadReplies replies on (0 before). One late reply lifts the average
// (30% of the way) but neither of the others, and a node judged slow on it
// would get no work, so no replies to correct it, until its estimate is
// stale; a node that stays slow lifts all three within a few replies.
NodeSpeed SpeedOf(const LatencyEstimate& e);

// Cluster::Speeds measures a node again (counts it as fast as the fastest)
// once it has not replied for this many of its waits (the larger of
// LatencyEstimate::wait_ewma and wait_high: a call outrun by a hedge, as a
// hung node's, lifts the average by 30% of the hedge's delay). A node is kept
// off work only by its estimate, which only its replies correct: the first
// replies of a node are often slow (a cold connection, caches, a sleeping
// process), and a node judged from them would otherwise wait for
// LatencyOptions::refresh_after (1 s: a whole short generation) to be tried
// again. A node that really is slow is tried at most once per this many of
// its waits, a bounded share of the time.
inline constexpr double kProbeAfterWaits = 50;

// Calls a node must have been sent since it joined before Cluster::Speeds
// weighs its estimate: before, it counts as fast as the fastest, so that it is
// given work and measured. A node's first replies are often slow (a fresh
// connection, a process woken on a loaded host); judged on one of them alone,
// the node waits kProbeAfterWaits of that slow wait, which can be a whole short
// generation, before it is tried again. Three replies make the recent figure
// (their median) mean something. Counted over the node's life, not per fresh
// estimate: a slow node re-measured after a pause costs one call, not three.
inline constexpr int64_t kTrustedReplies = 3;

// Expected finish times within this factor of the earliest count as equally
// early: among those, the least loaded node wins, so that nodes of about the
// same speed share the work instead of the marginally faster one taking all.
inline constexpr double kEquallyFastSlack = 1.25;

// work[e]: the ExpertWork of expert e in the layer's batch (0: not in it).
// speed[node] and usable[node] for every node of the placement. Returns
// [n_expert] indexes into Owners(layer, e), like BalanceReplicas: experts
// with one usable copy go there first; the others, by decreasing work (then
// expert id), each to the usable copy with the earliest expected finish
// (NodeSpeed::Expected(work given so far + its work)), the least loaded of
// the copies equally early, then the one of least node_work[node] when
// node_work is given (e.g. the work the nodes answered so far: a one-token
// layer is a tie between idle copies every time, and this spreads an expert's
// load over its copies across steps), then the earlier in Owners order.
// Equally early:
// expected no later than kEquallyFastSlack x the earliest, or than the
// earliest plus the earliest copy's NodeSpeed::NetworkSpread. The latter
// keeps equally fast nodes sharing the work when their estimates differ by
// noise (replies on a busy host vary by more than the slack, and a small
// call's time is mostly its fixed network part, which the work given does
// not move), while a node slower than the earliest copy's late replies (a
// 20 ms link beside loopback) gets nothing until the faster copies' load
// makes it earlier. The work's part is compared within the slack alone: a
// long prompt's layer is not handed to a slow node for the spread of tiny
// calls' per-work figures. 0 for experts not in the batch and those without
// a usable copy.
// Deterministic: the same arguments give the same choice.
std::vector<int> ChooseFastestReplicas(const placement::Placement& placement, int layer,
                                       absl::Span<const int64_t> work,
                                       const std::vector<NodeSpeed>& speed,
                                       const std::vector<bool>& usable,
                                       absl::Span<const int64_t> node_work = {});

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_REPLICA_CHOICE_H_
