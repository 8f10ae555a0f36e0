// What a node tells about itself: Inventory (the experts it stores, with
// their content hashes, and the capacity it offers for placement) and
// NodeStats (its counters, also exported as /metrics by node_metrics.h).
//
// Thread-safety: every method is thread-safe. Inventory scans the store's
// index (disk); Stats reads counters only.
#ifndef COLIBRI_EXPERT_NODE_NODE_REPORT_H_
#define COLIBRI_EXPERT_NODE_NODE_REPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "colibri/v1/expert.pb.h"
#include "expert_node/expert_store.h"
#include "expert_node/ingest_assembly.h"
#include "expert_node/layer_computer.h"
#include "expert_node/prefetch_queue.h"
#include "expert_node/ram_tier.h"

namespace colibri::expert_node {

class NodeReport {
 public:
  struct Options {
    // Reported in Inventory and NodeStats. Default: "" (empty).
    std::string node_id;
    // HOST:PORT others should dial to reach this node, reported in
    // Inventory. Default: "" (the address the caller dialled).
    std::string advertise_address;
    // Disk capacity offered for placement (Inventory); 0: unknown.
    // Default: 0.
    uint64_t disk_budget_bytes = 0;
  };

  // The parts whose state is reported; borrowed, they must outlive the
  // report.
  struct Parts {
    ExpertStore* store = nullptr;
    const RamTier* tier = nullptr;
    const LayerComputer* compute = nullptr;
    const IngestAssembly* ingest = nullptr;
    const PrefetchQueue* prefetch = nullptr;
  };

  NodeReport(const Options& options, const Parts& parts) : options_(options), parts_(parts) {}

  // The stored experts of request.model_fingerprint (every model when it is
  // empty), by model and layer, with the node's identity and budgets.
  // InvalidArgument for a malformed fingerprint; store errors pass through.
  absl::Status Inventory(const v1::InventoryRequest& request, v1::InventoryReply* reply) const;

  // Every NodeStatsReply field.
  void Stats(v1::NodeStatsReply* reply) const;

  // ComputeLayer's time histogram (LayerComputer::seconds).
  const metrics::Histogram& compute_seconds() const { return parts_.compute->seconds(); }

 private:
  const Options options_;
  const Parts parts_;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_NODE_REPORT_H_
