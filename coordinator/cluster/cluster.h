// The expert nodes one coordinator drives: their clients, the placement of
// experts over them, their health and per-node counters. Shared by every
// RemoteExpertBackend (one per session) of a `run` or `serve`.
//
// Health: a node is marked unhealthy when a call to it fails or misses its
// deadline (a late node is "suspect": it may only be slow); a background
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
// Membership: SetMembers gives the addresses the cluster should consist of
// (serve re-resolves --nodes-dns or reloads --nodes-file). The probe thread
// contacts each listed address without a node; once one answers its
// Inventory it becomes a new node (a new index; its id and capacity as it
// reports them) and is placed in like a node coming back: the rebalancer
// sends or has it import its rendezvous share, and only then does the new
// placement route work to it. A node whose address is no longer listed is
// retired: a placement without it is installed first (its experts held by
// their new owners), then its client is released (the connection closes once
// calls in flight finish); client() returns null for it from then on. Node
// indexes are never reused: a node back after its retirement, or on another
// address, takes a new one. A node unreachable at start-up (Connect) gets a
// provisional index under its address that never holds experts; when it
// answers, it joins as above under its reported id and the provisional index
// is retired. The last node in force is retired only once another can take
// its experts. Without a rebalancer membership never changes.
//
// Extra copies: SetExtraCopies names copies of experts beyond the rendezvous
// replicas (hot-expert replication). The re-placement thread makes a placement
// with those of them on nodes in force, hands it to the rebalancer (the nodes
// receive or import the new copies and acknowledge them) and installs it only
// once that succeeds: a copy is used only once its node confirmed it. A copy
// no longer named is dropped by installing a placement without it; the
// rendezvous copies stay in every placement, so an expert always keeps a
// confirmed copy. If the rebalancer fails (a node lost mid-transfer), the
// placement in force stays and the copies are tried again after a back-off.
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
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "colibri/v1/expert.pb.h"
#include "coordinator/cluster/node_client.h"
#include "coordinator/cluster/node_latency.h"
#include "coordinator/cluster/replica_choice.h"
#include "placement/placement.h"

namespace colibri::coordinator {

// The coordinator's code names placement/'s parts without their namespace.
using placement::BalanceReplicas;
using placement::ExpertWork;
using placement::Placement;
using placement::PlacementNode;
using placement::RendezvousScore;

struct ClusterOptions {
  // host:port of every node. Required (at least one).
  std::vector<std::string> addresses;
  // Copies of each expert on distinct nodes. Default: 1.
  int replicas = 1;
  // With replicas > 1: which copy computes each expert of a layer
  // (ReplicaChoice). With kFastest and kBalance the nodes read experts they
  // hold as secondaries too, so their RAM tiers need room for them.
  // Default: kFastest.
  ReplicaChoice replica_choice = ReplicaChoice::kFastest;
  // The per-node reply-time estimates (NodeLatency).
  LatencyOptions latency;
  // A ComputeLayer call to a node with an estimate gets the deadline
  // max(deadline_factor x its high-percentile time for the call's work,
  // deadline_floor), at most client.compute_deadline (which calls to a node
  // without an estimate get). A call that misses it marks the node suspect
  // (unhealthy: no new work, probed until it answers). Defaults: 8 and 1 s.
  double deadline_factor = 8;
  absl::Duration deadline_floor = absl::Seconds(1);
  // Hedged calls: a ComputeLayer call to a node with an estimate that has not
  // answered after max(hedge_factor x its high-percentile time for the call's
  // work, hedge_floor) has its share re-sent to the other copies of its
  // experts (RemoteExpertBackend); the first answer per expert is taken.
  // hedge_budget: hedges per second, a token bucket holding one second's
  // worth (at least one); 0 disables hedging. Defaults: 3, 20 ms, 20.
  double hedge_factor = 3;
  absl::Duration hedge_floor = absl::Milliseconds(20);
  double hedge_budget = 20;
  // The clock of the latency estimates (staleness), of the hedge budget and
  // of the grace of replaced placements (kPlacementGrace). Default: empty,
  // meaning absl::Now.
  std::function<absl::Time()> clock;
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
  // Node indexes the cluster may ever hand out (each join takes one, see
  // Membership); a join beyond them is refused with a log line.
  // Default: 256.
  int max_node_slots = 256;
  // Makes the client of a node joining later (`client` with the address
  // filled in is the template). Default: empty, meaning CreateGrpcNodeClient.
  std::function<absl::StatusOr<std::unique_ptr<NodeClient>>(const NodeClientOptions&)>
      client_factory;
};

// Cumulative per-node counters.
struct NodeCounters {
  int64_t requests = 0;        // ComputeLayer calls made (= round trips)
  int64_t failures = 0;        // of which failed or missed their deadline
  int64_t deadline_misses = 0;  // of which missed their deadline
  int64_t failovers = 0;       // failed calls whose routes moved to a replica
  int64_t bytes_sent = 0;      // ComputeLayer request bytes
  int64_t bytes_received = 0;  // ComputeLayer reply bytes
  double wait_seconds = 0;     // time from sending a call to its completion
  // Of that, the time the node reported working on the calls (its replies'
  // compute_micros + disk_wait_micros); the rest is transport, queueing and
  // the gRPC paths on both ends.
  double node_seconds = 0;
  // The hidden-state floor of those calls: 2 x tokens x n_embd x 4 bytes
  // (each token's row once each way, float32).
  int64_t floor_bytes = 0;
  // ExpertWork units of the calls the node answered (hedged ones included).
  int64_t work_units = 0;
  // Calls of the node cancelled because hedges answered their share first.
  int64_t outruns = 0;
};

// Hedged calls, cumulative (RemoteBackendStats has the same per backend).
struct HedgeCounters {
  int64_t hedges = 0;        // late calls whose share was re-sent to other copies
  int64_t wins = 0;          // of those, the re-sent share answered first
  int64_t wasted_bytes = 0;  // request + reply bytes of the losing calls
  int64_t refused = 0;       // hedges the budget refused (Cluster only)
};

class Cluster {
 public:
  // One node of the cluster as start-up found it.
  struct Node {
    std::string address;
    std::string node_id;           // reported, or the address when empty
    v1::InventoryReply inventory;  // for the model's fingerprint
    // Unreachable at start-up: id and capacity unknown, never holds experts.
    bool provisional = false;
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
  // node reachable; at least one must be). Nodes marked provisional join
  // under their reported id once they answer (see Membership).
  static absl::StatusOr<std::unique_ptr<Cluster>> Create(
      const ClusterOptions& options, const std::string& fingerprint,
      const std::vector<int>& experts_per_layer, std::vector<std::unique_ptr<NodeClient>> clients,
      std::vector<Node> nodes, std::vector<bool> reachable = {});

  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Node indexes handed out so far (including retired nodes); only grows.
  int n_nodes() const { return n_nodes_.load(std::memory_order_acquire); }
  // The client of a node, shared so that a call in flight keeps it alive;
  // null once the node is retired and released.
  std::shared_ptr<NodeClient> client(int node) const;
  // Immutable once the index is handed out.
  const Node& node(int i) const { return slots_[i]; }
  const std::string& fingerprint() const { return fingerprint_; }
  int replicas() const { return options_.replicas; }
  ReplicaChoice replica_choice() const { return options_.replica_choice; }
  // ClusterOptions::clock.
  absl::Time Now() const { return options_.clock ? options_.clock() : absl::Now(); }

  // The placement in force. A re-placement may install a newer one at any
  // time: read it once per unit of work (a layer) and use that reference
  // throughout. The reference stays valid for at least kPlacementGrace after
  // a newer placement replaced it, on the cluster's clock (then it may be
  // freed, so that hot-expert rounds do not pile placements up).
  const Placement& placement() const { return *current_.load(std::memory_order_acquire); }
  static constexpr absl::Duration kPlacementGrace = absl::Minutes(1);
  // The placement in force, kept alive for as long as the caller holds it:
  // for work that may outlast kPlacementGrace (a layer waiting on slow nodes).
  std::shared_ptr<const Placement> HoldPlacement() const;

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
  // The extra copies wanted from now on (see Extra copies); returns at once,
  // the re-placement thread does the rest (no-op without a rebalancer).
  // Copies of nodes out of the placement, or of experts a node holds as a
  // rendezvous replica, are left out when placing.
  void SetExtraCopies(std::vector<placement::ExtraCopy> extras);
  // Extra copies installed placements added and dropped, and the bytes the
  // rebalancer reported moving for placements (RecordMovedBytes), cumulative.
  struct ExtraCopyCounters {
    int64_t added = 0;
    int64_t dropped = 0;
    int64_t moved_bytes = 0;
  };
  ExtraCopyCounters extra_copy_counters() const;
  // Adds bytes a rebalancer sent or had imported (for extra_copy_counters).
  void RecordMovedBytes(int64_t bytes);
  // Expert copies the installed placements gave to a node that did not hold
  // them in the placement before (Σ over re-placements).
  int64_t moved_experts() const;

  // The addresses the cluster should consist of (see Membership); returns at
  // once, the probe thread does the rest. InvalidArgument when empty.
  absl::Status SetMembers(const std::vector<std::string>& addresses);
  // True once node's address is no longer a member (it may still be in force
  // until the placement without it is installed).
  bool retired(int node) const;

  bool healthy(int node) const;
  // True when a node that is not retired is healthy: the cluster can compute
  // (what readiness probes and the health services report).
  bool AnyHealthy() const;
  // Records a failed call; the first failure of a healthy node logs one line.
  void MarkUnhealthy(int node, const absl::Status& why);
  // A node answered that it lost (DataLoss) or does not hold (NotFound) an
  // expert it should hold: logs it, counts it and requests a repair; the node
  // stays healthy.
  void ReportExpertLoss(int node, const absl::Status& why);
  // Expert losses reported so far.
  int64_t expert_losses() const;

  // A ComputeLayer call completed with `status` after wait_seconds, of which
  // the node reported node_seconds working; `work`: its ExpertWork units. OK
  // calls feed the node's latency estimate; DeadlineExceeded ones count as
  // deadline misses.
  void RecordCall(int node, int64_t bytes_sent, int64_t bytes_received, double wait_seconds,
                  double node_seconds, int64_t work, const absl::Status& status);
  // The node's latency estimate now.
  LatencyEstimate latency(int node) const;
  // The speed ChooseFastestReplicas weighs for nodes [0, n_nodes): their
  // estimates (SpeedOf), except that a node whose estimate is stale or absent,
  // has been sent fewer than kTrustedReplies calls, or has not replied for
  // kProbeAfterWaits of its waits, counts as fast as the fastest other one,
  // so that it is given work and measured.
  std::vector<NodeSpeed> Speeds(int n_nodes) const;
  // The deadline of a ComputeLayer call of `work` ExpertWork units to node
  // (see ClusterOptions::deadline_factor).
  absl::Duration CallDeadline(int node, int64_t work) const;
  // How long a ComputeLayer call of `work` ExpertWork units to node may go
  // unanswered before it is hedged (see ClusterOptions::hedge_factor);
  // absl::InfiniteDuration() when hedging is off or the node has no estimate.
  absl::Duration HedgeDelay(int node, int64_t work) const;
  // Takes a hedge from the budget (ClusterOptions::hedge_budget); false when
  // it is spent or hedging is off.
  bool TakeHedge();
  // A ComputeLayer call to node cancelled before it answered, after
  // wait_seconds: counted as a request of bytes_sent. With outrun (hedges
  // answered its share first) it took at least that long, so the wait feeds
  // the node's estimate as a reply of that time without reported work: a
  // slow or hung node loses new work while the estimate is fresh, and is not
  // marked suspect for it. An outrun node is also outrun() until it answers a
  // call or its next health probe (every probe_interval).
  void RecordCancelledCall(int node, int64_t bytes_sent, double wait_seconds, int64_t work,
                           bool outrun);
  // True from a call of node outrun by hedges until the node answers a call
  // (RecordCall OK) or a health probe: it gets no new first-choice work while
  // another healthy copy exists, so that a hung node costs one hedge delay,
  // not one per layer.
  bool outrun(int node) const;
  // Adds a backend's hedge counters.
  void RecordHedges(const HedgeCounters& delta);
  HedgeCounters hedges() const;
  void RecordWireFloor(int node, int64_t floor_bytes);
  void RecordFailover(int node);
  void RecordFallbackRoutes(int64_t n);
  NodeCounters counters(int node) const;
  // NodeCounters::work_units of nodes [0, n), read at once (0 beyond n_nodes).
  std::vector<int64_t> WorkUnits(int n) const;
  int64_t fallback_routes() const;

  // Stops the background threads early (the destructor does too). Waits for a
  // re-placement in progress, which should poll stopping().
  void Shutdown();
  bool stopping() const;

  // Writes `line` and a newline to ClusterOptions::log in one write, so that
  // lines from the cluster's threads and the rebalancer never interleave.
  void Log(const std::string& line) const;

 private:
  Cluster(const ClusterOptions& options, std::string fingerprint,
          std::vector<int> experts_per_layer, Placement placement,
          std::vector<std::unique_ptr<NodeClient>> clients, std::vector<Node> nodes,
          std::vector<bool> reachable);
  void ProbeLoop();
  // Retires nodes no longer listed and takes listed addresses in (RPCs
  // outside mu_). Probe thread only.
  void UpdateMembership();
  // Makes node index for a joining node; false when refused (logged).
  bool AddNode(const std::string& address, v1::InventoryReply inventory,
               std::shared_ptr<NodeClient> client);
  // Releases the clients of retired nodes out of the placement in force.
  void ReleaseRetiredClients();
  // Placement weights of nodes [0, n); retired nodes get a unique
  // placeholder id so a node re-joining with its old id is not a duplicate.
  std::vector<PlacementNode> PlacementNodesOfSlots(int n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Updates wanted_available_ from health and how long nodes have been away.
  void UpdateWantedPlacement() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebalanceLoop();

  const ClusterOptions options_;
  const std::string fingerprint_;
  const std::vector<int> experts_per_layer_;
  const int capacity_;
  // [capacity_]; entry i written once, before n_nodes_ passes i.
  const std::unique_ptr<Node[]> slots_;
  std::atomic<int> n_nodes_{0};
  mutable absl::Mutex clients_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<std::shared_ptr<NodeClient>> clients_ ABSL_GUARDED_BY(clients_mu_);
  // Points into placements_; written by the re-placement thread only.
  std::atomic<const Placement*> current_{nullptr};

  mutable absl::Mutex mu_;
  std::vector<bool> healthy_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> unhealthy_since_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> outrun_ ABSL_GUARDED_BY(mu_);  // [nodes]: see outrun()
  std::vector<NodeCounters> counters_ ABSL_GUARDED_BY(mu_);
  std::vector<LatencyEstimator> latency_ ABSL_GUARDED_BY(mu_);  // [nodes]
  int64_t fallback_routes_ ABSL_GUARDED_BY(mu_) = 0;
  HedgeCounters hedges_ ABSL_GUARDED_BY(mu_);
  // The hedge budget's token bucket: tokens left at hedge_refilled_ (Now()).
  double hedge_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time hedge_refilled_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The placement in force (last) and those it replaced less than
  // kPlacementGrace ago, each with the time it was replaced
  // (absl::InfiniteFuture() for the one in force).
  std::vector<std::pair<std::shared_ptr<const Placement>, absl::Time>> placements_
      ABSL_GUARDED_BY(mu_);
  int64_t installed_ ABSL_GUARDED_BY(mu_) = 0;               // placements installed after the first
  std::vector<bool> available_ ABSL_GUARDED_BY(mu_);         // of the placement in force
  std::vector<bool> wanted_available_ ABSL_GUARDED_BY(mu_);  // what health asks for
  Rebalancer rebalancer_ ABSL_GUARDED_BY(mu_);
  bool repair_requested_ ABSL_GUARDED_BY(mu_) = false;
  int64_t repairs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expert_losses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t moved_experts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> retired_ ABSL_GUARDED_BY(mu_);
  // Extra copies wanted (SetExtraCopies) and those of the placement in force
  // as they were asked for (before leaving out the unplaceable ones).
  std::vector<placement::ExtraCopy> wanted_extras_ ABSL_GUARDED_BY(mu_);
  std::vector<placement::ExtraCopy> extras_ ABSL_GUARDED_BY(mu_);
  ExtraCopyCounters extra_counters_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> members_ ABSL_GUARDED_BY(mu_);
  // Probe thread only: clients of listed addresses not yet in, and those
  // whose failure was logged.
  std::map<std::string, std::shared_ptr<NodeClient>> pending_;
  std::set<std::string> pending_logged_;
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
