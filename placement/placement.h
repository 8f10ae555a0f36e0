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
// The coordinator places experts with it; an expert node computes its own
// share with it (expert_node/share_import.h). Both must agree, so it lives
// below both and depends on neither.
//
// Thread-safety: immutable after Compute; any number of readers.
#ifndef COLIBRI_PLACEMENT_PLACEMENT_H_
#define COLIBRI_PLACEMENT_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace colibri::placement {

struct PlacementNode {
  // Stable identity hashed into the scores (the node's reported id, or its
  // address when it reports none). Must be unique within a cluster.
  std::string id;
  // Relative capacity (> 0), e.g. the disk budget the node reports.
  double weight = 1.0;
};

// A copy of (layer, expert) on node beyond its rendezvous replicas (hot-expert
// replication: the coordinator adds them for load).
struct ExtraCopy {
  int layer = 0;
  int expert = 0;
  int node = 0;
  bool operator==(const ExtraCopy& o) const {
    return layer == o.layer && expert == o.expert && node == o.node;
  }
  bool operator<(const ExtraCopy& o) const {
    return layer != o.layer     ? layer < o.layer
           : expert != o.expert ? expert < o.expert
                                : node < o.node;
  }
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

  // This placement with extra copies: each (layer, expert, node) of `extras`
  // appends node to the expert's owners, after its rendezvous replicas, in
  // the order given. InvalidArgument for a layer, expert or node out of
  // range, or a node that already holds the expert (duplicates included).
  absl::StatusOr<Placement> WithExtraCopies(const std::vector<ExtraCopy>& extras) const;

  Placement() = default;

  int n_layer() const { return static_cast<int>(offsets_.size()); }
  int n_expert(int layer) const { return static_cast<int>(offsets_[layer].size()) - 1; }
  // The rendezvous copies every expert has (Compute's `replicas`); an expert
  // may have more (WithExtraCopies).
  int replicas() const { return replicas_; }
  // The most copies any expert has: 1 means no expert has a choice.
  int max_copies() const { return max_copies_; }
  int n_nodes() const { return n_nodes_; }

  // The nodes (indexes into Compute's `nodes`) holding (layer, expert): its
  // replicas() rendezvous copies best first, then its extra copies.
  absl::Span<const int> Owners(int layer, int expert) const {
    const size_t begin = offsets_[layer][expert];
    return absl::MakeConstSpan(owners_[layer].data() + begin, offsets_[layer][expert + 1] - begin);
  }
  int Primary(int layer, int expert) const { return Owners(layer, expert)[0]; }
  // The extra copies of (layer, expert): Owners after the first replicas().
  absl::Span<const int> Extras(int layer, int expert) const {
    return Owners(layer, expert).subspan(replicas_);
  }
  // Every extra copy, in layer, expert, then owners order.
  std::vector<ExtraCopy> AllExtras() const;

  // Every (layer, expert) a node holds as any replica, in layer then expert order.
  std::vector<std::pair<int, int>> ExpertsOf(int node) const;

 private:
  int replicas_ = 1;
  int max_copies_ = 1;
  int n_nodes_ = 0;
  // The owners of (layer, expert) are owners_[layer][offsets_[layer][expert],
  // offsets_[layer][expert + 1]); offsets_[layer] has n_expert + 1 entries.
  std::vector<std::vector<int>> owners_;
  std::vector<std::vector<size_t>> offsets_;
};

// Which replica computes each expert of one layer's batch, so that the
// busiest healthy node carries as little of the layer as it can: a layer ends
// when its slowest node replies.
//
// cost[e] (0 <= e < placement.n_expert(layer)): the work expert e brings to
// whichever node computes it (0: not in the batch; ExpertWork gives the
// figure the coordinator uses). healthy[node]: the nodes that may be chosen.
// Returns [n_expert] indexes into Owners(layer, e): the chosen replica, 0 for
// the experts not in the batch and for those without a healthy replica (the
// caller's failover finds none either). Experts with one healthy replica go
// there first; the others, by decreasing cost (then expert id), to their
// least loaded healthy replica, the earlier one in Owners order on a tie, so
// that a balanced layer stays on the primaries and their RAM tiers.
// Deterministic: the same arguments give the same choice.
std::vector<int> BalanceReplicas(const Placement& placement, int layer,
                                 absl::Span<const int64_t> cost, const std::vector<bool>& healthy);

// The cost BalanceReplicas weighs for an expert routed `tokens` tokens of a
// batch: reading its weights once (4) and 3 per token (a token's multiplies
// take about 3/4 of the weight read's time in a batched product), in integer
// units so that choices do not depend on float rounding.
inline int64_t ExpertWork(int64_t tokens) { return tokens > 0 ? 4 + 3 * tokens : 0; }

}  // namespace colibri::placement

#endif  // COLIBRI_PLACEMENT_PLACEMENT_H_
