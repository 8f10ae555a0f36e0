// How long one expert node takes to answer a ComputeLayer call, estimated
// from its replies: a running average (EWMA) and a high percentile of the
// window of the newest replies, each split into the network part (the call's
// wait minus the time the node reports working on it: transport, queueing,
// the gRPC paths) and the node's work per unit of expert work
// (placement::ExpertWork units, so that a call of many routes is expected to
// take longer than one of a few).
//
// An estimate with no reply for longer than LatencyOptions::refresh_after is
// stale: the node's speed may have changed since (a slow node given no work
// is never measured again otherwise). The next reply starts the estimate
// afresh from itself instead of averaging it into the old one.
//
// Thread-safety: LatencyEstimator is not thread-safe (Cluster guards each
// under its mutex); LatencyEstimate is a plain value.
#ifndef COLIBRI_COORDINATOR_CLUSTER_NODE_LATENCY_H_
#define COLIBRI_COORDINATOR_CLUSTER_NODE_LATENCY_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace colibri::coordinator {

struct LatencyOptions {
  // Weight of the newest reply in the running averages, in (0, 1].
  // Default: 0.3.
  double ewma_alpha = 0.3;
  // Replies the high percentile is taken over (the newest ones). Default: 64.
  int window = 64;
  // The high percentile, in (0, 1]. Default: 0.95.
  double percentile = 0.95;
  // An estimate without a reply for longer than this is stale. Default: 1 s.
  absl::Duration refresh_after = absl::Seconds(1);
};

// A node's estimate at one moment. Seconds throughout.
struct LatencyEstimate {
  int64_t samples = 0;   // replies observed since the last fresh start
  double wait_ewma = 0;  // whole call
  double wait_high = 0;
  double network_ewma = 0;  // wait minus the node's reported work
  double network_high = 0;
  double seconds_per_work_ewma = 0;  // node's reported work / ExpertWork units
  double seconds_per_work_high = 0;
  // The median of the newest 3 replies (of all there are when fewer): what
  // the node does now, unmoved by one late reply.
  double network_recent = 0;
  double seconds_per_work_recent = 0;
  absl::Time last_reply = absl::InfinitePast();

  // The expected time of a call carrying `work` ExpertWork units.
  double Expected(int64_t work) const {
    return network_ewma + seconds_per_work_ewma * static_cast<double>(work);
  }
  // The same from the high percentiles: a call that takes much longer than
  // this is late.
  double High(int64_t work) const {
    return network_high + seconds_per_work_high * static_cast<double>(work);
  }
};

class LatencyEstimator {
 public:
  explicit LatencyEstimator(const LatencyOptions& options = {});

  // A reply at `now` to a call of `work` ExpertWork units that took
  // wait_seconds from start to completion, of which node_seconds the node
  // reported working (clamped to [0, wait_seconds]).
  void Observe(absl::Time now, int64_t work, double wait_seconds, double node_seconds);
  // True when there is no reply yet or the newest is older than refresh_after.
  bool Stale(absl::Time now) const;
  const LatencyEstimate& estimate() const { return estimate_; }

 private:
  LatencyOptions options_;
  LatencyEstimate estimate_;
  // Rings of the newest replies (up to options_.window), oldest overwritten
  // first at next_.
  std::vector<double> wait_;
  std::vector<double> network_;
  std::vector<double> per_work_;
  size_t next_ = 0;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_NODE_LATENCY_H_
