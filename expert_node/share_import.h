// The Import request for a node's own rendezvous share of a GGUF's experts,
// computed by the node itself from the ids of all nodes: what an init step
// (Kubernetes) runs before the coordinator starts, so that the coordinator
// finds the experts in place and sends nothing.
//
// The share is the coordinator's placement (placement/placement.h) with
// every node weighted equally; it is the coordinator's own share when every
// node reports the same budget (one config for all nodes). Where they differ,
// the coordinator imports or sends the difference at start-up as usual.
#ifndef COLIBRI_EXPERT_NODE_SHARE_IMPORT_H_
#define COLIBRI_EXPERT_NODE_SHARE_IMPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/v1/expert.pb.h"

namespace colibri::expert_node {

// (layer, expert) of every expert node_id holds as any of `replicas` copies
// when experts_per_layer[l] experts of each layer are placed over member_ids.
// InvalidArgument when node_id is not a member, an id repeats, or replicas is
// not in [1, members].
absl::StatusOr<std::vector<std::pair<int, int>>> ShareOf(const std::vector<int>& experts_per_layer,
                                                         const std::vector<std::string>& member_ids,
                                                         const std::string& node_id, int replicas);

// An ImportRequest for node_id's share of the GGUF at gguf_path (opened to
// read its expert counts and fingerprint). NotFound / DataLoss for a file that
// cannot be opened or parsed; InvalidArgument as ShareOf.
absl::StatusOr<v1::ImportRequest> ShareImportRequest(const std::string& gguf_path,
                                                     const std::vector<std::string>& member_ids,
                                                     const std::string& node_id, int replicas);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_SHARE_IMPORT_H_
