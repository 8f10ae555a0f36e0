// `colibri-coordinator plan`: where every expert would go and the bytes per
// node, moving nothing.
#ifndef COLIBRI_COORDINATOR_CLI_CLUSTER_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_CLUSTER_COMMAND_H_

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

// `colibri-coordinator plan`: where every expert would go and the bytes per
// node, moving nothing. Contacts the nodes for their ids and capacity unless
// assume_equal (then node ids are their addresses).
absl::Status RunPlan(const PlanOptions& options, std::ostream& out);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_CLUSTER_COMMAND_H_
