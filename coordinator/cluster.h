// The expert nodes one coordinator drives: their clients, the placement of
// experts over them, their health and per-node counters. Shared by every
// RemoteExpertBackend (one per session) of a `run` or `serve`.
//
// Health: a node is marked unhealthy when a call to it fails; a background
// thread probes unhealthy nodes with grpc.health.v1 every probe_interval and
// marks them healthy again when they answer SERVING. Placement does not change
// with health: work for an unhealthy node goes to the next replica, or is
// computed by the coordinator itself.
//
// Thread-safety: thread-safe. Clients are used without holding mutex_.
#ifndef COLIBRI_COORDINATOR_CLUSTER_H_
#define COLIBRI_COORDINATOR_CLUSTER_H_

#include <cstdint>
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
  // `fingerprint` and places experts_per_layer[l] experts of each layer.
  // Unavailable when a node does not answer; InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<Cluster>> Connect(
      const ClusterOptions& options, const std::string& fingerprint,
      const std::vector<int>& experts_per_layer);

  // The same from ready clients (tests pass mocks). clients[i] serves nodes[i].
  static absl::StatusOr<std::unique_ptr<Cluster>> Create(
      const ClusterOptions& options, const std::string& fingerprint,
      const std::vector<int>& experts_per_layer, std::vector<std::unique_ptr<NodeClient>> clients,
      std::vector<Node> nodes);

  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  int n_nodes() const { return static_cast<int>(clients_.size()); }
  NodeClient* client(int node) const { return clients_[node].get(); }
  const Node& node(int i) const { return nodes_[i]; }
  const Placement& placement() const { return placement_; }
  const std::string& fingerprint() const { return fingerprint_; }

  bool healthy(int node) const;
  // Records a failed call; the first failure of a healthy node logs one line.
  void MarkUnhealthy(int node, const absl::Status& why);

  void RecordCall(int node, int64_t bytes_sent, int64_t bytes_received, double wait_seconds,
                  bool ok);
  void RecordFailover(int node);
  void RecordFallbackRoutes(int64_t n);
  NodeCounters counters(int node) const;
  int64_t fallback_routes() const;

  // Stops the prober early (the destructor does too).
  void Shutdown();

 private:
  Cluster(const ClusterOptions& options, std::string fingerprint, Placement placement,
          std::vector<std::unique_ptr<NodeClient>> clients, std::vector<Node> nodes);
  void ProbeLoop();
  void Log(const std::string& line) const;

  const ClusterOptions options_;
  const std::string fingerprint_;
  const Placement placement_;
  const std::vector<std::unique_ptr<NodeClient>> clients_;
  const std::vector<Node> nodes_;

  mutable absl::Mutex mu_;
  std::vector<bool> healthy_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeCounters> counters_ ABSL_GUARDED_BY(mu_);
  int64_t fallback_routes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::Mutex log_mu_;
  std::thread prober_;
};

// Placement weights of nodes: their disk budget in GiB (the RAM budget when no
// disk budget is reported; 1 when neither is), or 1 each with assume_equal.
std::vector<PlacementNode> PlacementNodesOf(const std::vector<Cluster::Node>& nodes,
                                            bool assume_equal);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_H_
