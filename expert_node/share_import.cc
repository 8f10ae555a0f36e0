#include "expert_node/share_import.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/arch/model.h"
#include "model/gguf/gguf_fingerprint.h"
#include "placement/placement.h"

namespace colibri::expert_node {

absl::StatusOr<std::vector<std::pair<int, int>>> ShareOf(const std::vector<int>& experts_per_layer,
                                                         const std::vector<std::string>& member_ids,
                                                         const std::string& node_id, int replicas) {
  std::vector<placement::PlacementNode> nodes;
  int self = -1;
  for (const std::string& id : member_ids) {
    if (id == node_id) self = static_cast<int>(nodes.size());
    placement::PlacementNode node;
    node.id = id;
    nodes.push_back(std::move(node));
  }
  if (self < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("node id '", node_id, "' is not among the --import-share-of ids"));
  }
  COLIBRI_ASSIGN_OR_RETURN(placement::Placement placed,
                           placement::Placement::Compute(nodes, experts_per_layer, replicas));
  return placed.ExpertsOf(self);
}

absl::StatusOr<v1::ImportRequest> ShareImportRequest(const std::string& gguf_path,
                                                     const std::vector<std::string>& member_ids,
                                                     const std::string& node_id, int replicas) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<arch::Model> model, arch::Model::Open(gguf_path));
  COLIBRI_ASSIGN_OR_RETURN(std::string fingerprint, gguf::ModelFingerprint(model->file()));
  std::vector<int> experts_per_layer;
  for (const auto& layer : model->experts()) {
    experts_per_layer.push_back(static_cast<int>(layer.size()));
  }
  using Share = std::vector<std::pair<int, int>>;
  COLIBRI_ASSIGN_OR_RETURN(Share share, ShareOf(experts_per_layer, member_ids, node_id, replicas));
  v1::ImportRequest request;
  request.set_gguf_path(gguf_path);
  request.set_model_fingerprint(fingerprint);
  for (const auto& [layer, expert] : share) {
    v1::ExpertKey* key = request.add_experts();
    key->set_model_fingerprint(fingerprint);
    key->set_layer(layer);
    key->set_expert(expert);
  }
  return request;
}

}  // namespace colibri::expert_node
