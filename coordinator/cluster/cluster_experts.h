// The cluster side of `run --nodes`, `serve` and `plan`: the cluster flags'
// options, and a connected cluster with the model's experts in place
// (ClusterExperts) whose backends the generation scheduler's sessions use.
#ifndef COLIBRI_COORDINATOR_CLUSTER_CLUSTER_EXPERTS_H_
#define COLIBRI_COORDINATOR_CLUSTER_CLUSTER_EXPERTS_H_

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/cluster/cluster_setup.h"
#include "coordinator/cluster/expert_checksums.h"
#include "coordinator/cluster/hot_expert_rebalancer.h"
#include "coordinator/cluster/membership_watcher.h"
#include "coordinator/cluster/remote_expert_backend.h"
#include "model/arch/model.h"

namespace colibri::coordinator {

struct ClusterCommandOptions {
  // host:port of every expert node; empty means no cluster (local experts).
  // Default: empty.
  std::vector<std::string> nodes;
  // Instead of `nodes`: NAME:PORT, every address NAME resolves to is a node
  // (at start-up; `serve` resolves it again every nodes_dns_interval_seconds).
  // Default: empty.
  std::string nodes_dns;
  // Seconds between resolutions of nodes_dns while `serve` runs. Default: 30.
  double nodes_dns_interval_seconds = 30;
  // Instead of `nodes`: a file with one HOST:PORT per line (ReadNodesFile);
  // `serve` reads it again on SIGHUP. Default: empty.
  std::string nodes_file;
  // Whether SIGHUP reloads nodes_file (main blocks SIGHUP first). Default: false.
  bool reload_on_sighup = false;
  // Copies of each expert on distinct nodes. Default: 1.
  int replicas = 1;
  // ClusterOptions::replica_choice (--replica-choice). Default: kFastest.
  ReplicaChoice replica_choice = ReplicaChoice::kFastest;
  // ClusterOptions::deadline_factor and deadline_floor (--deadline-factor,
  // --deadline-floor). Defaults: 8 and 1 s.
  double deadline_factor = 8;
  double deadline_floor_seconds = 1;
  // ClusterOptions::hedge_factor, hedge_floor and hedge_budget (--hedge-factor,
  // --hedge-floor, --hedge-budget; budget 0: no hedging). Defaults: 3, 20 ms,
  // 20 per second.
  double hedge_factor = 3;
  double hedge_floor_seconds = 0.02;
  double hedge_budget = 20;
  // File holding the shared auth token (surrounding whitespace ignored).
  // Default: empty, no token.
  std::string auth_token_file;
  // PEM files for TLS to the nodes; tls_ca_file turns TLS on. Default: empty
  // (plaintext).
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Nodes import experts from their own copy of the GGUF at this path instead
  // of receiving them. Default: empty (stream them).
  std::string node_gguf;
  // Seconds a node may stay unhealthy before its experts are re-placed onto
  // the other nodes; 0 or less: never. Default: 120.
  double replace_after_seconds = 120;
  // Seconds between health probes of unhealthy nodes. Default: 0.5.
  double probe_interval_seconds = 0.5;
  // Plan with every node weighted 1, without contacting nodes (plan only).
  // Default: false.
  bool assume_equal = false;
  // Hot-expert replication (HotExpertRebalancer; serve --rebalance): copies
  // of the most used experts on the nodes that relieve the busiest one most,
  // within their RAM budgets. Default: false (serve turns it on: a server
  // runs long enough for the load to be learnt and the copies to pay off; a
  // `run` ends before).
  bool rebalance = false;
  // Seconds between rebalancing rounds (--rebalance-interval). Default: 10.
  double rebalance_interval_seconds = 10;
  // Bytes of new copies one round may send (--rebalance-bytes). Default: 256 MiB.
  int64_t rebalance_bytes = int64_t{256} << 20;
  // Activations on the wire (--wire-dtype, --wire-reduce; run and serve).
  // Default: float32 rows, one per route.
  WireOptions wire;
  // Where the experts' checksums are cached (ExpertChecksums; main takes it
  // from the environment, common/process_knobs.h); "": not cached.
  // Default: "".
  std::string cache_dir;
  // Ingest progress rewritten in place (ExpertSetupOptions::progress_in_place;
  // main sets it when stderr is a terminal). Default: false (plain lines).
  bool progress_in_place = false;

  // True when nodes, nodes_dns or nodes_file names expert nodes.
  bool enabled() const { return !nodes.empty() || !nodes_dns.empty() || !nodes_file.empty(); }
};

// Resolves nodes_dns or reads nodes_file, and reads the token and PEM files
// into cluster options. InvalidArgument /
// NotFound for unreadable files or bad values.
absl::StatusOr<ClusterOptions> MakeClusterOptions(const ClusterCommandOptions& options);

// Routed experts per layer of a model: experts_per_layer for placement.
std::vector<int> ExpertsPerLayer(const arch::Model& model);

// A connected cluster with the model's experts in place, and the expert
// backends of the sessions over it (one per numeric path).
//
// Thread-safety: Backend, MarkPromptDone and PrintStats are called by one
// thread at a time (the generation scheduler's stepping thread, or the
// command once it is stopped); cluster() is thread-safe (Cluster is).
class ClusterExperts {
 public:
  // Connects, ingests (or imports) what nodes miss, prints "ingest: N bytes
  // sent" to `err`, and releases the coordinator's expert pages. The model
  // and pool are borrowed by the backends too.
  static absl::StatusOr<std::unique_ptr<ClusterExperts>> Start(const ClusterCommandOptions& options,
                                                               const arch::Model& model,
                                                               ThreadPool* pool, std::ostream& err);

  Cluster& cluster() { return *cluster_; }
  // The backend of the batched session of numeric path `path`, made on the
  // first call; owned here.
  RemoteExpertBackend* Backend(ops::NumericPath path);

  // Keeps the node list current while serving: nodes_dns re-resolved, and
  // nodes_file re-read on SIGHUP with reload_on_sighup (MembershipWatcher);
  // changes go to Cluster::SetMembers. OK without doing anything when the
  // nodes were given by `nodes`. Call once.
  absl::Status WatchMembership(const ClusterCommandOptions& options, std::ostream& err);

  // With options.rebalance, starts hot-expert replication (HotExpertRebalancer)
  // fed by `use` (cumulative routes per [layer][expert], e.g. ExpertUse::
  // Snapshot); its copies are sent or imported like re-placed experts. OK
  // without doing anything otherwise. Call once.
  absl::Status StartRebalancing(const ClusterCommandOptions& options,
                                HotExpertRebalancer::UseSource use, std::ostream& err);
  // Null unless StartRebalancing started it.
  const HotExpertRebalancer* rebalancer() const { return hot_.get(); }

  // Marks the end of prompt processing: later figures print as "decode".
  // Also reads every healthy node's NodeStats (one call each).
  void MarkPromptDone();
  // One line per node (requests, failures, failovers, bytes, wait, health),
  // the balance of the nodes' work ("node work:", the busiest node's ExpertWork
  // units against the mean), then the totals of the backends made and the decode-only totals, then the wire bytes
  // ("wire decode:", per generated token and against the hidden-state floor,
  // over `decode_tokens` tokens generated after the prompt), then the prefetch
  // hints when any were given, then per node the decode-only change of its
  // tier counters (RAM hits and misses, disk bytes and wait, prefetches),
  // then per layer the decode-only figures its nodes' replies reported
  // (LayerNodeStats, per generated token), to `err`.
  void PrintStats(std::ostream& err, int64_t decode_tokens = 0) const;

 private:
  ClusterExperts() = default;
  // The sum of the counters of the backends made.
  RemoteBackendStats BackendTotals() const;
  // The sum of the backends' per-layer figures.
  std::vector<LayerNodeStats> LayerTotals() const;
  const arch::Model* model_ = nullptr;
  ThreadPool* pool_ = nullptr;
  // Before cluster_: its rebalancer uses them until the cluster is gone.
  std::unique_ptr<ExpertChecksums> checksums_;
  std::unique_ptr<Cluster> cluster_;
  std::vector<std::string> start_addresses_;
  WireOptions wire_;
  std::unique_ptr<RemoteExpertBackend> backends_[2];  // [0] fast, [1] exact path
  // Declared after cluster_: stops before the cluster it feeds is destroyed.
  std::unique_ptr<MembershipWatcher> watcher_;
  std::unique_ptr<HotExpertRebalancer> hot_;
  RemoteBackendStats at_prompt_done_;
  std::vector<LayerNodeStats> layers_at_prompt_done_;
  std::vector<absl::StatusOr<v1::NodeStatsReply>> tiers_at_prompt_done_;  // [n_nodes]
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_CLUSTER_EXPERTS_H_
