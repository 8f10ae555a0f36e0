// `colibri-coordinator plan`: where every expert would go and the bytes per
// node, moving nothing.
#ifndef COLIBRI_COORDINATOR_CLI_CLUSTER_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_CLUSTER_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "coordinator/cluster/cluster_experts.h"

namespace colibri::coordinator {

struct PlanOptions {
  std::string model_path;
  ClusterCommandOptions cluster;
  // List every expert's nodes, not only the per-node totals. Default: true.
  bool list_experts = true;
};

// What an expert node needs besides its RAM tier: requests in flight,
// RocksDB's memtables and block cache, the process itself.
inline constexpr uint64_t kNodeMemoryOverheadBytes = uint64_t{1} << 30;

// The memory limit recommended for an expert node (systemd MemoryMax=, a
// Kubernetes limits.memory): its RAM tier, the smaller of its ram-budget and
// the bytes of the experts placed on it (the tier holds nothing else), plus
// kNodeMemoryOverheadBytes, rounded up to a whole GiB. ram_budget_bytes 0
// means unknown (not asked, or not reported): the placed bytes alone.
uint64_t RecommendedNodeMemoryLimit(uint64_t ram_budget_bytes, uint64_t placed_bytes);

// `colibri-coordinator plan`: where every expert would go and the bytes per
// node, with each node's recommended memory limit, moving nothing. Contacts the nodes for their ids
// and capacity unless assume_equal (then node ids are their addresses).
absl::Status RunPlan(const PlanOptions& options, std::ostream& out);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_CLUSTER_COMMAND_H_
