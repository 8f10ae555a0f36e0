// The expert nodes one coordinator drives: their clients, the placement of
// experts over them, their health and per-node counters. Shared by every
// RemoteExpertBackend (one per session) of a `run` or `serve`.
//
// Health: a node is marked unhealthy when a call to it fails; a background
// thread probes unhealthy nodes with grpc.health.v1 every probe_interval and
// marks them healthy again when they answer SERVING. Meanwhile work for an
// unhealthy node goes to the next replica, or is computed by the coordinator
// itself.
//
// Re-placement: a node unhealthy for longer than replace_after is excluded
// and its experts are re-placed onto the others (rendezvous placement moves
// only that node's experts). A second background thread hands the new
// placement to the rebalancer (SetRebalancer: it makes the nodes hold what the
// placement assigns them) and installs it once that succeeds; until then the
// old placement stays in force. When an excluded node is healthy again it is
// placed back the same way (it usually still holds its experts, so nothing is
// sent). Without a rebalancer placement never changes.
//
// Repair: a node that answers DataLoss or NotFound for an expert it should
// hold (a stored value failed its checksum and was dropped) gets it back: the
// same thread runs the rebalancer for the placement in force, which re-sends
// what the nodes' inventories miss. Such a loss is the expert's, not the
// node's: ReportExpertLoss leaves the node healthy (its other experts keep
// being served); only that call's routes move on.
//
// Thread-safety: thread-safe. Clients are used without holding mutex_.
#ifndef COLIBRI_COORDINATOR_CLUSTER_H_
#define COLIBRI_COORDINATOR_CLUSTER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "colibri/v1/expert.pb.h"
#include "coordinator/node_client.h"
#include "coordinator/placement.h"

namespace colibri::coordinator {

struct ClusterOptions {
  // host:port of every node. Required (at least one).
  std::vector<std::string> addresses;
  // Copies of each expert on distinct nodes. Default: 1.
  int replicas = 1;
  // Weigh every node 1 instead of by its reported capacity. Default: false.
  bool assume_equal = false;
  // Template for every node's client; `address` is filled in per node.
  NodeClientOptions client;
  // How often unhealthy nodes are probed. Default: 500 ms.
  absl::Duration probe_interval = absl::Milliseconds(500);
  // A node unhealthy for longer than this has its experts re-placed onto the
  // other nodes. absl::InfiniteDuration(): never. Default: 2 minutes.
  absl::Duration replace_after = absl::Minutes(2);
  // Where significant events (a node lost, a node back) are logged, one line
  // each. Default: null, meaning std::cerr.
  std::ostream* log = nullptr;
};

// Cumulative per-node counters.
struct NodeCounters {
  int64_t requests = 0;        // ComputeLayer calls made (= round trips)
  int64_t failures = 0;        // of which failed or missed their deadline
  int64_t failovers = 0;       // failed calls whose routes moved to a replica
  int64_t bytes_sent = 0;      // ComputeLayer request bytes
  int64_t bytes_received = 0;  // ComputeLayer reply bytes
  double wait_seconds = 0;     // time from sending a call to its completion
};

class Cluster {
 public:
  // One node of the cluster as start-up found it.
  struct Node {
    std::string address;
    std::string node_id;           // reported, or the address when empty
    v1::InventoryReply inventory;  // for the model's fingerprint
  };

  // Connects to every node of options.addresses, reads its inventory for
  // `fingerprint` and places experts_per_layer[l] experts of each layer over
  // the nodes that answered. A node that does not answer starts unhealthy and
  // excluded (its id is its address, its weight 1): work goes around it, and
  // once it answers its health probe it is placed in like a node coming back
  // (with a rebalancer). Unavailable when no node answers; InvalidArgument for
  // bad options.
  static absl::StatusOr<std::unique_ptr<Cluster>> Connect(
      const ClusterOptions& options, const std::string& fingerprint,
      const std::vector<int>& experts_per_layer);

  // The same from ready clients (tests pass mocks). clients[i] serves nodes[i];
  // reachable[i] false starts node i unhealthy and excluded (empty: every
  // node reachable; at least one must be).
  static absl::StatusOr<std::unique_ptr<Cluster>> Create(
      const ClusterOptions& options, const std::string& fingerprint,
      const std::vector<int>& experts_per_layer, std::vector<std::unique_ptr<NodeClient>> clients,
      std::vector<Node> nodes, std::vector<bool> reachable = {});

  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  int n_nodes() const { return static_cast<int>(clients_.size()); }
  NodeClient* client(int node) const { return clients_[node].get(); }
  const Node& node(int i) const { return nodes_[i]; }
  const std::string& fingerprint() const { return fingerprint_; }
  int replicas() const { return options_.replicas; }

  // The placement in force. The reference stays valid for the cluster's
  // lifetime, but a re-placement may install a newer one at any time: read it
  // once per unit of work (a layer) and use that copy throughout.
  const Placement& placement() const { return *current_.load(std::memory_order_acquire); }

  // Makes every node hold what `placement` assigns it (called on the cluster's
  // re-placement thread, never concurrently with itself). OK means the
  // placement may be installed.
  using Rebalancer = std::function<absl::Status(const Placement& placement)>;
  // Enables re-placement. Call once, before work starts.
  void SetRebalancer(Rebalancer rebalancer);
  // Asks the re-placement thread to re-send what nodes miss of the placement
  // in force (no-op without a rebalancer). Cheap; repeated requests coalesce.
  void RequestRepair();
  // Repairs completed.
  int64_t repairs() const;
  // True while node is excluded from the placement in force.
  bool excluded(int node) const;
  // Placements installed after the first.
  int64_t replacements() const;

  bool healthy(int node) const;
  // Records a failed call; the first failure of a healthy node logs one line.
  void MarkUnhealthy(int node, const absl::Status& why);
  // A node answered that it lost (DataLoss) or does not hold (NotFound) an
  // expert it should hold: logs it, counts it and requests a repair; the node
  // stays healthy.
  void ReportExpertLoss(int node, const absl::Status& why);
  // Expert losses reported so far.
  int64_t expert_losses() const;

  void RecordCall(int node, int64_t bytes_sent, int64_t bytes_received, double wait_seconds,
                  bool ok);
  void RecordFailover(int node);
  void RecordFallbackRoutes(int64_t n);
  NodeCounters counters(int node) const;
  int64_t fallback_routes() const;

  // Stops the background threads early (the destructor does too). Waits for a
  // re-placement in progress, which should poll stopping().
  void Shutdown();
  bool stopping() const;

 private:
  Cluster(const ClusterOptions& options, std::string fingerprint,
          std::vector<int> experts_per_layer, Placement placement,
          std::vector<std::unique_ptr<NodeClient>> clients, std::vector<Node> nodes,
          std::vector<bool> reachable);
  void ProbeLoop();
  // Updates wanted_available_ from health and how long nodes have been away.
  void UpdateWantedPlacement() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebalanceLoop();
  void Log(const std::string& line) const;

  const ClusterOptions options_;
  const std::string fingerprint_;
  const std::vector<int> experts_per_layer_;
  const std::vector<std::unique_ptr<NodeClient>> clients_;
  const std::vector<Node> nodes_;
  // Points into placements_; written by the re-placement thread only.
  std::atomic<const Placement*> current_{nullptr};

  mutable absl::Mutex mu_;
  std::vector<bool> healthy_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> unhealthy_since_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeCounters> counters_ ABSL_GUARDED_BY(mu_);
  int64_t fallback_routes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Every placement ever installed (a handful), so references stay valid.
  std::vector<std::unique_ptr<const Placement>> placements_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> available_ ABSL_GUARDED_BY(mu_);         // of the placement in force
  std::vector<bool> wanted_available_ ABSL_GUARDED_BY(mu_);  // what health asks for
  Rebalancer rebalancer_ ABSL_GUARDED_BY(mu_);
  bool repair_requested_ ABSL_GUARDED_BY(mu_) = false;
  int64_t repairs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expert_losses_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::Mutex log_mu_;
  std::thread prober_;
  std::thread rebalancer_thread_;
};

// Placement weights of nodes: their disk budget in GiB (the RAM budget when no
// disk budget is reported; 1 when neither is), or 1 each with assume_equal.
std::vector<PlacementNode> PlacementNodesOf(const std::vector<Cluster::Node>& nodes,
                                            bool assume_equal);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_H_
