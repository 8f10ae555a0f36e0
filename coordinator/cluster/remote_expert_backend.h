// moe::ExpertBackend over expert nodes: per MoE layer, one ComputeLayer call
// per involved node, all in flight at once, with failover to replicas and a
// local fallback.
//
// Submit chooses, per expert of the batch, which healthy replica computes it
// (ClusterOptions::replica_choice: the one expected to answer first given the
// nodes' latency estimates, ChooseFastestReplicas; the one that keeps the
// busiest node's work least, BalanceReplicas; or the first healthy one), groups the
// batch's (token, rank) routes by it, sends each involved node the hidden rows it needs
// (each token once) and its routes, and returns: the calls are started on the
// backend's ComputeQueue from the caller's thread. Wait takes the replies on
// that thread (no thread hand-off either way) and scatters them into
// out[t][r]. A call's wait time runs from its start until Wait takes it, so it
// includes the caller's own work when the reply came before Wait; it feeds the
// node's latency estimate (Cluster::RecordCall), and the estimate sets the
// call's deadline (Cluster::CallDeadline). A call that
// fails or misses its deadline marks its node unhealthy (except DataLoss /
// NotFound from the node: an expert's loss, Cluster::ReportExpertLoss) and its
// routes go to each expert's next healthy replica (in Owners order after the
// chosen one, wrapping around); routes with no replica left
// are computed here from the model's own experts (ExpertGroupRunner), so a
// generation completes, bit for bit the same: every expert output depends only
// on its token's row, the weights and the path.
//
// Hedged calls: a call that has not answered after Cluster::HedgeDelay (its
// node's high-percentile time for the call's work times a factor, at least a
// floor) while the hedge budget allows (Cluster::TakeHedge) has its share re-sent:
// each of its experts with another healthy copy goes to the next one in Owners
// order, in one call per node (with wire.reduce only when every expert has
// one, since a reply of sums cannot be taken in part). The first answer per
// expert is taken; a call whose experts have all been answered by others is
// cancelled. The bytes of the losing calls (cancelled, or answered when their
// reply could no longer be used) count as wasted.
// A late call outrun by its hedges does not make its node suspect; its wait
// feeds the node's estimate as a lower bound (Cluster::RecordCancelledCall),
// and the node takes no first-choice work while it is Cluster::outrun (until
// it answers a call or a health probe) and another healthy copy exists.
// Calls that fail while another call covers their experts need no failover.
// Whichever call answers, the result is bitwise the same.
//
// Prefetch hints (moe::ExpertBackend::Prefetch) are stashed and sent with the
// next Submit, each to the replica that would compute its expert if the hinted
// experts of its layer were that layer's batch (one token each): riding on that
// node's ComputeLayer request when the node is involved in the submitted layer,
// otherwise in one separate Prefetch call per node. Separate calls go out on a
// thread per node and are never waited for; a node has at most one outstanding,
// and hints for a node whose call is still outstanding are dropped. Hints for a
// layer not after the submitted one are stale and dropped too. A hint for the
// first layer with experts (a forward step's first MoE layer, which no Submit
// precedes) is sent at once, in separate Prefetch calls, with whatever is
// stashed. Hints never change results.
//
// SecondChannel() is a sibling backend on the same cluster with its own
// queue, so that two half-batches of one forward pass are in flight at once;
// stats() includes its counters.
// Wire (WireOptions): activations go as float32 (default, remote outputs
// bitwise equal to local ones) or bfloat16 both ways; with `reduce` each node
// returns one weighted sum per token instead of one row per route, written
// into the token's first rank that node computed (its other ranks there zero,
// OutputsWeighted() true), equal to the local result only up to float
// rounding. Fallback routes are weighted here then. Every call's bytes are
// counted (RemoteBackendStats) against the hidden-state floor: n_embd x the
// call's tokens x 4 bytes, each way.
//
// Thread-safety: one forward pass at a time (moe::ExpertBackend's contract).
// Several backends may share one Cluster. stats() may be called from any
// thread.
#ifndef COLIBRI_COORDINATOR_CLUSTER_REMOTE_EXPERT_BACKEND_H_
#define COLIBRI_COORDINATOR_CLUSTER_REMOTE_EXPERT_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "colibri/v1/expert.pb.h"
#include "common/thread_pool.h"
#include "coordinator/cluster/cluster.h"
#include "model/moe/expert_backend.h"
#include "model/moe/local_expert_backend.h"

namespace colibri::coordinator {

// How activations travel to the nodes and back.
struct WireOptions {
  // v1::DTYPE_F32 or v1::DTYPE_BF16 (rpc/wire_tensor.h), both ways.
  // Default: DTYPE_F32.
  v1::DType dtype = v1::DTYPE_F32;
  // Ask each node for one weighted sum per token instead of one row per
  // route. Default: false.
  bool reduce = false;
};

// Counters of one backend, cumulative.
struct RemoteBackendStats {
  int64_t layers = 0;           // Submit calls
  int64_t round_trips = 0;      // ComputeLayer calls made, including retries
  int64_t involved_nodes = 0;   // Σ over layers of nodes the first dispatch involved
  int64_t fallback_routes = 0;  // routes computed locally
  int64_t failovers = 0;        // calls re-sent to a replica
  int64_t bytes_sent = 0;       // ComputeLayer request bytes, including retries
  int64_t bytes_received = 0;   // ComputeLayer reply bytes (successful calls)
  // Of those, the activation rows alone (Tensor.data): hidden rows sent,
  // output rows received.
  int64_t payload_sent = 0;
  int64_t payload_received = 0;
  // The hidden-state floor of the calls made: Σ 2 x tokens x n_embd x 4.
  int64_t floor_bytes = 0;
  // Prefetch hints (one per layer and expert) by how they went.
  int64_t hints_riding = 0;    // added to a ComputeLayer request
  int64_t hints_separate = 0;  // sent in a separate Prefetch call
  int64_t hints_dropped = 0;   // stale, no healthy owner, or the owner's call outstanding
  int64_t prefetch_calls = 0;  // separate Prefetch calls made
  // Of the slowest successful call of each layer (Σ over layers): what its
  // node reported computing and waiting for its disk, in microseconds.
  int64_t slowest_compute_micros = 0;
  int64_t slowest_disk_micros = 0;
  // Hedged calls (see the file comment; Cluster::hedges() sums all backends).
  int64_t hedges = 0;              // late calls whose share was re-sent
  int64_t hedge_wins = 0;          // of those, the re-sent share answered first
  int64_t hedge_wasted_bytes = 0;  // request + reply bytes of the losing calls

  // Adds every counter of `other` (a second channel's, for one total).
  RemoteBackendStats& operator+=(const RemoteBackendStats& other);
};

// What the nodes reported for one layer's calls (every reply, hedges and
// retries included; each figure clamped to [0, the call's wait]): where a
// layer's expert time goes.
struct LayerNodeStats {
  int64_t calls = 0;             // replies received
  int64_t wait_micros = 0;       // Σ the calls' waits as the coordinator saw them
  int64_t compute_micros = 0;    // Σ what the nodes reported computing
  int64_t disk_wait_micros = 0;  // Σ what the nodes reported waiting for their disks
  int64_t ram_hits = 0;          // experts found resident
  int64_t ram_misses = 0;        // experts read (or waited for) from disk: demand reads
  LayerNodeStats& operator+=(const LayerNodeStats& o);
};

class RemoteExpertBackend : public moe::ExpertBackend {
 public:
  // cluster: borrowed. local_experts ([layer][expert], the model's own views)
  // and pool serve the fallback; borrowed. path: the session's numeric path.
  // wire.dtype must be F32 or BF16, else every Wait() is InvalidArgument.
  RemoteExpertBackend(Cluster* cluster,
                      const std::vector<std::vector<moe::ExpertWeights>>* local_experts,
                      int n_expert, ops::NumericPath path, ThreadPool* pool,
                      const WireOptions& wire = {});
  ~RemoteExpertBackend() override;
  RemoteExpertBackend(const RemoteExpertBackend&) = delete;
  RemoteExpertBackend& operator=(const RemoteExpertBackend&) = delete;

  void Submit(const moe::ExpertBatch& batch, float* out) override;
  absl::Status Wait() override;
  void Prefetch(int layer, absl::Span<const int32_t> experts) override;
  moe::ExpertBackend* SecondChannel() override;
  bool OutputsWeighted() const override { return wire_.reduce; }

  // [layer]: what the nodes reported per layer, this backend's and its second
  // channel's together (sized to the highest layer submitted + 1).
  std::vector<LayerNodeStats> layer_stats() const;
  // This backend's counters plus its second channel's.
  RemoteBackendStats stats() const;

 private:
  class Worker;
  // Grows prefetch_workers_ to n_nodes (nodes join a running cluster).
  // Caller thread only.
  void AddWorkers(int n_nodes);
  // One ComputeLayer call: the routes (t * k + r) one node computes.
  struct Call {
    int node = -1;
    std::vector<int64_t> routes;
    std::vector<int32_t> experts;    // the distinct experts of routes
    std::vector<int64_t> tokens;     // batch token of each hidden row
    std::vector<int32_t> route_row;  // [routes]: its token's hidden row
    v1::ComputeLayerRequest request;
    absl::StatusOr<v1::ComputeLayerReply> reply;
    int64_t work = 0;         // Σ ExpertWork of its experts' tokens in the call
    absl::Duration deadline;  // Cluster::CallDeadline
    std::chrono::steady_clock::time_point start;  // when the call was started
    double wait_seconds = 0;
    // The node was retired (its client released) before the call went out:
    // the layer read a placement older than the one that moved its experts.
    bool retired = false;
    int64_t request_bytes = 0;
    bool live = false;       // started and not yet taken from queue_
    bool cancelled = false;  // its experts were all answered by other calls
    // When it is hedged if still live (time_point::max(): never), and
    // whether a hedge of it answered first.
    std::chrono::steady_clock::time_point hedge_at = std::chrono::steady_clock::time_point::max();
    bool hedge_won = false;
    // For a hedge: the call whose share it re-sends (null otherwise).
    Call* hedge_of = nullptr;
  };

  // [n_expert] indexes into Owners(layer, e): the replica of each expert
  // tried first, by cluster_->replica_choice(). work[e]: the expert's
  // ExpertWork in the batch; healthy[node]: the nodes that may be chosen.
  std::vector<int> ChooseReplicas(const Placement& placement, int layer,
                                  const std::vector<int64_t>& work,
                                  const std::vector<bool>& healthy) const;
  // The node of expert e's replica at try `attempt` (see first_).
  int OwnerAt(const Placement& placement, int32_t e, int attempt) const;
  // How many copies expert e of the batch's layer has.
  int Copies(const Placement& placement, int32_t e) const {
    return static_cast<int>(placement.Owners(batch_.layer, e).size());
  }
  // cluster_->healthy(node) of nodes 0 .. n_nodes - 1, read once.
  std::vector<bool> Healthy(int n_nodes) const;
  // Groups `routes` by each expert's current replica (attempt_) and sends the
  // calls; routes without a healthy replica go to fallback_experts_. With
  // send_hints, the stashed hints go out with these calls (SendHints).
  // hedge_of: the late call these routes are a hedge of (null otherwise).
  void Dispatch(const std::vector<int64_t>& routes, bool send_hints, Call* hedge_of = nullptr);
  // The live call to be hedged first, or null.
  Call* NextHedge() const;
  // Re-sends the share of the late `call` to the other copies of its experts,
  // budget permitting; never again for this call.
  void Hedge(Call* call);
  // A call came back: scatters its reply if it is the first for its experts,
  // records it, cancels calls whose experts are all answered, and fails over
  // the routes a failure left without a call.
  void Take(Call* call, absl::StatusOr<v1::ComputeLayerReply> reply);
  // Cancels the live calls whose experts have all been answered.
  void CancelAnswered();
  // Counts a losing call's bytes as wasted.
  void CountWasted(const Call& call, int64_t reply_bytes);
  // Sends the stashed hints for layers after `after_layer` (the others are
  // stale and dropped): with `ride`, in the requests of the calls just
  // grouped (node_slot_ maps nodes to them), called before those are posted;
  // otherwise, and for nodes without such a call, in one Prefetch call per
  // owner. Empties the stash.
  void SendHints(const Placement& placement, const std::vector<bool>& healthy, int after_layer,
                 bool ride);
  absl::Status Scatter(const Call& call);
  // Fills call->request's hidden rows and wire fields from call->tokens.
  void EncodeRequest(Call* call) const;
  // With wire_.reduce: multiplies the fallback routes' outputs by their weights.
  void WeighFallbackRoutes();

  Cluster* const cluster_;
  // The cluster's placement when the batch was submitted, used for all of it,
  // and kept alive by placement_hold_ however long the batch takes.
  const Placement* placement_ = nullptr;
  std::shared_ptr<const Placement> placement_hold_;
  const std::vector<std::vector<moe::ExpertWeights>>* const local_experts_;
  const int n_expert_;
  const ops::NumericPath path_;
  ThreadPool* const pool_;
  const WireOptions wire_;
  moe::ExpertGroupRunner fallback_;
  // Where this backend's ComputeLayer calls complete (caller thread only).
  ComputeQueue queue_;
  // [nodes the cluster had at the last Submit]: separate Prefetch calls.
  std::vector<std::unique_ptr<Worker>> prefetch_workers_;

  // The batch in progress (between Submit and Wait; touched by the caller only).
  moe::ExpertBatch batch_;
  float* out_ = nullptr;
  absl::Status submit_status_;
  // The replica at try a of expert e is Owners(e)[(first_[e] + a) % its copies].
  std::vector<int> first_;              // [n_expert]: the replica chosen first
  std::vector<int> attempt_;            // [n_expert]: the furthest try sent
  std::vector<bool> fallback_experts_;  // [n_expert]
  std::vector<bool> expert_done_;       // [n_expert]: a reply of it was scattered
  std::vector<int> expert_live_;        // [n_expert]: live calls that carry it
  // Of the calls whose answers this Wait used, the slowest one's wait and
  // what its node reported (microseconds): RemoteBackendStats::slowest_*.
  double slowest_wait_ = -1;
  int64_t slowest_compute_ = 0;
  int64_t slowest_disk_ = 0;
  std::vector<std::unique_ptr<Call>> calls_;
  std::vector<int> node_slot_;       // [n_nodes] scratch: call index or -1
  std::vector<int32_t> token_slot_;  // [n_tokens] scratch: row in a request or -1
  std::vector<int64_t> expert_tokens_;  // [n_expert] scratch: tokens of a call
  // Stashed hints (layer, expert), touched by the caller only.
  std::vector<std::pair<int, int32_t>> hints_;

  mutable absl::Mutex mu_;
  std::vector<bool> prefetch_outstanding_ ABSL_GUARDED_BY(mu_);  // [n_nodes]
  RemoteBackendStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<LayerNodeStats> layer_stats_ ABSL_GUARDED_BY(mu_);
  // SecondChannel(), created on first use (null before).
  std::unique_ptr<RemoteExpertBackend> second_ ABSL_GUARDED_BY(mu_);
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_REMOTE_EXPERT_BACKEND_H_
