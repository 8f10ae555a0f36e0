// ComputeLayer without the wire: one layer's routed experts for a request's
// tokens, computed from the experts in the RAM tier (read from the disk tier
// on a miss) and pinned there while they are used.
//
// layer_compute.h holds the request's validation and the arithmetic; this
// class adds the node's side: the model's shape (ModelRegistry), the tiers,
// usage counting, the shared matmul pool and the counters NodeStats reports.
// Outputs depend only on the request and the experts' bytes: bitwise what the
// coordinator computes locally (layer_compute.h). Compute streams behind the
// disk: the request's missing experts are read by Options::miss_loaders
// threads together (their disk reads overlap each other), the resident ones
// are computed at once on the matmul pool while those reads are in flight,
// and each miss is computed as soon as its read lands (those that landed
// together, as one part), in completion order. LayerRows keeps each route's
// row in its own slot and sums per token in request order at the end, so the
// reply is bitwise the same whatever order the reads land in. Every expert
// stays pinned until the request's outputs are computed.
//
// Thread-safety: Compute may run on several threads at once (they share the
// matmul pool, so one request's disk reads overlap another's compute); the
// accessors from any thread.
#ifndef COLIBRI_EXPERT_NODE_LAYER_COMPUTER_H_
#define COLIBRI_EXPERT_NODE_LAYER_COMPUTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "colibri/v1/expert.pb.h"
#include "common/metrics.h"
#include "common/thread_pool.h"
#include "expert_node/model_registry.h"
#include "expert_node/ram_tier.h"
#include "expert_node/task_queue.h"
#include "expert_node/usage_counts.h"

namespace colibri::expert_node {

class LayerComputer {
 public:
  struct Options {
    // Threads of the matmul pool; <= 0: physical cores. Default: 0.
    int threads = 0;
    // Largest reply: a request whose outputs would be larger is refused by
    // its shape (InvalidArgument) before any work.
    // Default: 256 MiB - 64 KiB.
    uint64_t max_reply_bytes = (uint64_t{256} << 20) - (uint64_t{64} << 10);
    // Replaces every spin of the matmul pool (ThreadPool::WithSpinOverride).
    // Default: none (ThreadPool::ForIntermittentJobs as it is).
    std::optional<int> spin_us;
    // Threads acquiring a request's experts that are not resident, so that
    // all of a layer's misses are read from disk at once (in flight together
    // in the store's read queue) while the request computes what it has;
    // they wait on the disk, not on a core. 0: one at a time, as compute
    // asks for them, nothing overlapped. Default: 8.
    int miss_loaders = 8;
    // Called on the request's thread after each part of a request's experts
    // (of `layer`) was computed, before the next part waits for the disk; an
    // observation point for tests. Default: none.
    std::function<void(int32_t layer, const std::vector<int32_t>& experts)> on_part_computed;
  };

  struct Counters {
    uint64_t requests = 0;  // computed successfully
    uint64_t routes = 0;    // routes of those
    int32_t in_flight = 0;  // Compute calls running now
    // Experts whose compute ended while a read of the same request was still
    // in flight (compute that overlapped the disk), over all requests.
    uint64_t overlapped_experts = 0;
    // Time the requests computed successfully waited for the disk (the sum
    // of their replies' disk_wait_micros).
    uint64_t disk_wait_micros = 0;
  };

  // registry, tier and usage are borrowed and must outlive the computer;
  // usage may be null (no usage counting).
  LayerComputer(const Options& options, const ModelRegistry* registry, RamTier* tier,
                UsageCounts* usage);
  LayerComputer(const LayerComputer&) = delete;
  LayerComputer& operator=(const LayerComputer&) = delete;

  // Computes `request` into *reply (outputs and the reply's timing and RAM
  // counters). NotFound for a model the node does not hold or an expert it
  // does not store; InvalidArgument as ParseLayerRequest; DataLoss for a
  // damaged stored expert (the store drops it).
  absl::Status Compute(const v1::ComputeLayerRequest& request, v1::ComputeLayerReply* reply);

  Counters counters() const;
  // Seconds of every Compute call, failed ones included.
  const metrics::Histogram& seconds() const { return seconds_; }

 private:
  absl::Status ComputeUncounted(const v1::ComputeLayerRequest& request,
                                v1::ComputeLayerReply* reply);
  class MissReads;

  const Options options_;
  const ModelRegistry* const registry_;
  RamTier* const tier_;
  UsageCounts* const usage_;  // may be null
  ThreadPool pool_;
  std::unique_ptr<TaskQueue> miss_loaders_;  // null when Options::miss_loaders is 0
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> routes_{0};
  std::atomic<int32_t> in_flight_{0};
  std::atomic<uint64_t> overlapped_experts_{0};
  std::atomic<uint64_t> disk_wait_micros_{0};
  // 100 us to ~13 s.
  metrics::Histogram seconds_{metrics::ExponentialBuckets(1e-4, 2, 18)};
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_LAYER_COMPUTER_H_
