// Where each routed expert lives: weighted rendezvous (highest random weight)
// hashing of (layer, expert) over the cluster's nodes.
//
// Every node gets, for every expert, the score -w / ln(u) where w is the node's
// weight and u in (0, 1) a 64-bit hash of (node id, layer, expert); the R
// highest-scoring nodes hold the expert, best first (the primary replica).
// Scores depend only on the node's own id and weight, so adding or removing a
// node moves only the experts that node gains or loses, and a node's expected
// share is proportional to its weight.
//
// Thread-safety: immutable after Compute; any number of readers.
#ifndef COLIBRI_COORDINATOR_PLACEMENT_H_
#define COLIBRI_COORDINATOR_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace colibri::coordinator {

struct PlacementNode {
  // Stable identity hashed into the scores (the node's reported id, or its
  // address when it reports none). Must be unique within a cluster.
  std::string id;
  // Relative capacity (> 0), e.g. the disk budget the node reports.
  double weight = 1.0;
};

// The rendezvous score of `node` for (layer, expert); exposed for tests.
double RendezvousScore(const PlacementNode& node, int layer, int expert);

class Placement {
 public:
  // experts_per_layer[l]: routed experts of layer l (0 for a dense layer).
  // replicas: copies of each expert on distinct nodes, 1 <= replicas <= nodes.
  // InvalidArgument for no nodes, duplicate ids, a weight <= 0 or a bad R.
  static absl::StatusOr<Placement> Compute(const std::vector<PlacementNode>& nodes,
                                           const std::vector<int>& experts_per_layer, int replicas);
  // The same over the nodes with available[i] set only; owners still index
  // `nodes`. Every expert keeps the owners it had among the available nodes,
  // so excluding a node moves only that node's experts.
  // InvalidArgument as above, or when replicas exceeds the available nodes.
  static absl::StatusOr<Placement> Compute(const std::vector<PlacementNode>& nodes,
                                           const std::vector<int>& experts_per_layer, int replicas,
                                           const std::vector<bool>& available);

  Placement() = default;

  int n_layer() const { return static_cast<int>(owners_.size()); }
  int n_expert(int layer) const { return static_cast<int>(owners_[layer].size()) / replicas_; }
  int replicas() const { return replicas_; }
  int n_nodes() const { return n_nodes_; }

  // The nodes (indexes into Compute's `nodes`) holding (layer, expert), best
  // first: [replicas].
  absl::Span<const int> Owners(int layer, int expert) const {
    return absl::MakeConstSpan(owners_[layer].data() + static_cast<size_t>(expert) * replicas_,
                               replicas_);
  }
  int Primary(int layer, int expert) const { return Owners(layer, expert)[0]; }

  // Every (layer, expert) a node holds as any replica, in layer then expert order.
  std::vector<std::pair<int, int>> ExpertsOf(int node) const;

 private:
  int replicas_ = 1;
  int n_nodes_ = 0;
  // owners_[layer][expert * replicas_ + i]
  std::vector<std::vector<int>> owners_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_PLACEMENT_H_
