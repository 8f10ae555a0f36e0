#include "coordinator/cli/cluster_command.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/api/model_summary.h"
#include "model/gguf/gguf_fingerprint.h"

namespace colibri::coordinator {

uint64_t RecommendedNodeMemoryLimit(uint64_t ram_budget_bytes, uint64_t placed_bytes) {
  const uint64_t tier =
      ram_budget_bytes == 0 ? placed_bytes : std::min(ram_budget_bytes, placed_bytes);
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  return (tier + kNodeMemoryOverheadBytes + kGiB - 1) / kGiB * kGiB;
}

absl::Status RunPlan(const PlanOptions& options, std::ostream& out) {
  if (!options.cluster.enabled()) {
    return absl::InvalidArgumentError("plan needs --nodes, --nodes-dns or --nodes-file");
  }
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<arch::Model> model,
                           arch::Model::Open(options.model_path));
  COLIBRI_ASSIGN_OR_RETURN(std::string fingerprint, gguf::ModelFingerprint(model->file()));
  COLIBRI_ASSIGN_OR_RETURN(ClusterOptions cluster_options, MakeClusterOptions(options.cluster));
  std::vector<Cluster::Node> nodes;
  if (options.cluster.assume_equal) {
    for (const std::string& address : cluster_options.addresses) {
      Cluster::Node node;
      node.address = address;
      node.node_id = address;
      nodes.push_back(std::move(node));
    }
  } else {
    // Connect only to read ids and capacities; nothing is sent.
    COLIBRI_ASSIGN_OR_RETURN(
        std::unique_ptr<Cluster> cluster,
        Cluster::Connect(cluster_options, fingerprint, ExpertsPerLayer(*model)));
    for (int i = 0; i < cluster->n_nodes(); ++i) nodes.push_back(cluster->node(i));
  }
  const std::vector<PlacementNode> weighted = PlacementNodesOf(nodes, options.cluster.assume_equal);
  COLIBRI_ASSIGN_OR_RETURN(
      Placement placement,
      Placement::Compute(weighted, ExpertsPerLayer(*model), options.cluster.replicas));

  const auto& experts = model->experts();
  std::vector<int64_t> count(nodes.size()), primary(nodes.size());
  std::vector<uint64_t> bytes(nodes.size());
  int64_t total_experts = 0;
  for (int l = 0; l < placement.n_layer(); ++l) {
    for (int e = 0; e < placement.n_expert(l); ++e) {
      ++total_experts;
      absl::Span<const int> owners = placement.Owners(l, e);
      ++primary[owners[0]];
      for (int node : owners) {
        ++count[node];
        bytes[node] += experts[l][e].bytes();
      }
    }
  }
  out << absl::StrFormat("plan: %s, fingerprint %s, %d routed experts, %d replica(s), %d nodes\n",
                         options.model_path, fingerprint, total_experts, placement.replicas(),
                         nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    out << absl::StrFormat("node %s (id %s, weight %.3g): %d experts (%d primary), %s (%d bytes)\n",
                           nodes[i].address, nodes[i].node_id, weighted[i].weight, count[i],
                           primary[i], FormatBytes(bytes[i]), bytes[i]);
    const uint64_t budget = nodes[i].inventory.ram_budget_bytes();
    const uint64_t limit_gib = RecommendedNodeMemoryLimit(budget, bytes[i]) >> 30;
    out << absl::StrFormat(
        "  memory: RAM tier %s (%s) + %s -> systemd MemoryMax=%dG, Kubernetes limits.memory: "
        "%dGi\n",
        FormatBytes(budget == 0 ? bytes[i] : std::min(budget, bytes[i])),
        budget == 0          ? "its experts; ram-budget not known"
        : budget <= bytes[i] ? "its ram-budget"
                             : "its experts, under its ram-budget",
        FormatBytes(kNodeMemoryOverheadBytes), limit_gib, limit_gib);
  }
  if (options.list_experts) {
    for (int l = 0; l < placement.n_layer(); ++l) {
      for (int e = 0; e < placement.n_expert(l); ++e) {
        out << "layer " << l << " expert " << e << ":";
        for (int node : placement.Owners(l, e)) out << " " << nodes[node].address;
        out << "\n";
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
