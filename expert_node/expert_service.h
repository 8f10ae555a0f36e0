// colibri.v1.ExpertService: ComputeLayer on gRPC's asynchronous API, the
// other methods on its callback API.
//
// ComputeLayer, the call on every token's path, is served by
// Options::compute_workers threads that wait on the server's completion queue
// themselves (ServeComputeLayer): the thread that receives a call checks its
// token, parses it, computes (sharing one ThreadPool of
// Options::compute_threads for the matmuls) and sends the reply, with no
// hand-off to another thread. (On the callback API a call went from gRPC's
// poller to its callback thread to an executor: two wake-ups more per call,
// which measured ~40% of a node's CPU per token on small layers.)
//
// The callback handlers never block the gRPC callback thread: they check the
// caller's token, then hand the request to an executor and return; the
// executor thread finishes the call. Executors:
//   io       (1 thread)  Ingest writes, Inventory scans;
//   import   (1 thread)  Import, which can run for minutes;
//   prefetch (the I/O pool: Options::io_threads, bounded queue) loads the
//            prefetch hints of Prefetch and of ComputeLayerRequest.prefetch
//            into the RAM tier.
// NodeStats reads counters only and answers inline.
//
// Prefetch hints are advice and never fail a call nor block it: the callback
// checks the key against the known models (in memory) and queues it unless
// the expert is resident or already queued / being loaded (coalesced); a full
// queue drops it. The I/O thread looks the expert's size up in the store's
// index (not stored: ignored) and asks the RAM tier to prefetch it, which
// drops it under memory pressure (ram_tier.h). The NodeStatsReply comment
// (expert.proto) defines each prefetch counter. Prefetch never changes
// results: outputs depend only on the expert bytes, whichever tier they come
// from.
//
// Import: opens only regular files (never blocks on a FIFO or a device); any
// failure to open or parse the file is NotFound "cannot import PATH", details
// in the node's log only, so a caller cannot probe which paths exist.
//
// Ingest: a chunk that does not parse ends the stream with INVALID_ARGUMENT;
// nothing of the expert it belonged to is stored (experts acknowledged
// before it stay).
//
// Errors: unknown model NotFound; malformed requests InvalidArgument naming the
// field (layer_compute.h); an expert the node does not hold NotFound; a damaged
// stored expert DataLoss (it is dropped; see expert_store.h); a full executor
// Unavailable. After any of these the node keeps serving.
//
// Auth: when Options::auth_token is set, every call of this service must carry
// the metadata "authorization: Bearer <token>" (compared in constant time)
// else UNAUTHENTICATED. NodeServer checks it in gRPC's auth filter, before a
// request body is read (rpc/call_auth.h); the handlers check it again. gRPC
// health and reflection are separate services and need no token (probes).
//
// Thread-safety: gRPC calls the handlers from any thread; all state is either
// constant after Create, atomic, or guarded by mu_.
#ifndef COLIBRI_EXPERT_NODE_EXPERT_SERVICE_H_
#define COLIBRI_EXPERT_NODE_EXPERT_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "colibri/v1/expert.grpc.pb.h"
#include "common/metrics.h"
#include "common/thread_pool.h"
#include "expert_node/expert_store.h"
#include "expert_node/ram_tier.h"
#include "expert_node/task_queue.h"
#include "expert_node/usage_counts.h"
#include "grpcpp/alarm.h"
#include "rpc/raw_unary.h"

namespace colibri::expert_node {

// Every method is registered raw (ByteBuffer) and parses its requests
// itself: a chunk of Ingest that does not parse ends the stream with
// INVALID_ARGUMENT instead of looking like the end of the stream, and a unary
// request that does not parse gets INVALID_ARGUMENT (not gRPC's UNIMPLEMENTED).
// Each unary method has a request size cap checked before parsing
// (RESOURCE_EXHAUSTED): ComputeLayer's follows from the registered models'
// shapes and Options::max_batch_tokens (ComputeLayerRequestLimit), Prefetch
// and Import take at most kMaxControlRequestBytes, Inventory and NodeStats
// kMaxQueryRequestBytes.
using ExpertServiceBase = v1::ExpertService::WithRawMethod_ComputeLayer<
    v1::ExpertService::WithRawCallbackMethod_Prefetch<
        v1::ExpertService::WithRawCallbackMethod_Ingest<
            v1::ExpertService::WithRawCallbackMethod_Import<
                v1::ExpertService::WithRawCallbackMethod_Inventory<
                    v1::ExpertService::WithRawCallbackMethod_NodeStats<
                        v1::ExpertService::Service>>>>>>;

class ExpertServiceImpl final : public ExpertServiceBase {
 public:
  // Request caps of the small methods (bytes of the serialized request).
  static constexpr uint64_t kMaxControlRequestBytes = uint64_t{4} << 20;  // Prefetch, Import
  static constexpr uint64_t kMaxQueryRequestBytes = uint64_t{64} << 10;   // Inventory, NodeStats

  struct Options {
    // Reported in Inventory and NodeStats. Default: "" (empty).
    std::string node_id;
    // HOST:PORT others should dial to reach this node when that is not the
    // listen address (a wildcard, NAT, a container's port mapping), reported
    // in Inventory. Default: "" (the address the caller dialled).
    std::string advertise_address;
    // Required bearer token; empty disables auth. Default: "".
    std::string auth_token;
    // Threads of the matmul pool; <= 0: physical cores. Default: 0.
    int compute_threads = 0;
    // ComputeLayer requests served concurrently (they share the pool, so this
    // overlaps one request's disk reads with another's compute). Default: 2.
    int compute_workers = 2;
    // Prefetch loads waiting at most; more are dropped. Default: 256.
    size_t prefetch_queue_limit = 256;
    // Threads of the I/O pool serving prefetch hints. Default: 2.
    int io_threads = 2;
    // Largest expert (gate + up + down bytes) Ingest accepts. Default: 4 GiB.
    uint64_t max_expert_bytes = uint64_t{4} << 30;
    // Largest ComputeLayer reply: a request whose outputs would be larger is
    // refused by its shape (InvalidArgument) before any work. NodeServer sets
    // it just under its max_message_bytes. Default: 256 MiB - 64 KiB.
    uint64_t max_reply_bytes = (uint64_t{256} << 20) - (uint64_t{64} << 10);
    // Tokens (hidden rows) one ComputeLayer request may carry: a coordinator
    // sends at most its --batch-size. Sets ComputeLayer's request cap.
    // Default: 8192.
    int64_t max_batch_tokens = 8192;
    // Bytes all Ingest streams together may hold in experts being assembled
    // (each stream holds at most one); an expert that would go beyond ends
    // its stream with RESOURCE_EXHAUSTED, counted in NodeStats
    // ingest_refused. Default: 2 GiB.
    uint64_t max_ingest_buffer_bytes = uint64_t{2} << 30;
    // Largest serialized IngestChunk; a bigger one ends the stream with
    // RESOURCE_EXHAUSTED before it is parsed. Default: 64 MiB.
    // So one stream buffers at most one expert (<= max_expert_bytes and within
    // max_ingest_buffer_bytes) plus one chunk.
    uint64_t max_ingest_chunk_bytes = uint64_t{64} << 20;
    // An Ingest stream from which no message arrives for this long (while the
    // node waits for one) ends with DEADLINE_EXCEEDED, counted in NodeStats
    // ingest_timeouts; nothing of its partial expert is stored. Checked about
    // every quarter of it (at most every second). Must be > 0.
    // Default: 60 s.
    absl::Duration ingest_idle_timeout = absl::Seconds(60);
    // Disk capacity offered for placement (Inventory); 0: unknown. Default: 0.
    uint64_t disk_budget_bytes = 0;
    // How often Import logs progress. Default: 5 s.
    absl::Duration progress_interval = absl::Seconds(5);
  };

  // store, tier and usage are borrowed and must outlive the service; usage
  // may be null (no usage counting). Reads the model records from the store.
  static absl::StatusOr<std::unique_ptr<ExpertServiceImpl>> Create(const Options& options,
                                                                   ExpertStore* store,
                                                                   RamTier* tier,
                                                                   UsageCounts* usage = nullptr);
  // Waits for queued work to finish. Call after the gRPC server has shut down.
  ~ExpertServiceImpl() override;

  // Makes an Import in progress stop before its next expert, and later ones
  // fail at once, with Unavailable (what was imported stays stored; a later
  // Import skips it). Call when shutting down, so that a long Import does not
  // hold the node up. Thread-safe.
  void BeginShutdown();

  // Starts the ComputeLayer workers on `queue`, a completion queue of the
  // server this service is registered with (ServerBuilder::AddCompletionQueue),
  // once the server has started. Until then ComputeLayer calls wait in gRPC.
  void ServeComputeLayer(std::unique_ptr<grpc::ServerCompletionQueue> queue);
  // Stops accepting ComputeLayer calls, lets every worker finish the call it
  // serves (its reply or error is sent: the queue is still open), joins the
  // workers, then shuts the queue down and drains it. No operation starts on
  // the queue after its shutdown (gRPC aborts the process if one does). Call
  // after the server's Shutdown (which fails the calls still waiting for a
  // worker); the destructor calls it too. Idempotent.
  void StopComputeLayer();

  // The callback handlers read a serialized request and write a serialized
  // reply.
  grpc::ServerUnaryReactor* Prefetch(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // Reads serialized IngestChunks; writes a serialized IngestReply.
  grpc::ServerReadReactor<grpc::ByteBuffer>* Ingest(grpc::CallbackServerContext* context,
                                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Import(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Inventory(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* NodeStats(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;

  // ComputeLayer's request cap: the largest over the registered models of
  // max_batch_tokens hidden rows of n_embd floats, each token routed to at
  // most every expert once, prefetch hints for at most every expert of the
  // model, plus 64 KiB; 64 KiB while no model is registered (every
  // ComputeLayer is then NotFound anyway).
  uint64_t ComputeLayerRequestLimit() const;

  // The blocking bodies of the handlers, run on executor threads (and by
  // main for --import-gguf).
  absl::Status DoComputeLayer(const v1::ComputeLayerRequest& request,
                              v1::ComputeLayerReply* reply);
  absl::Status DoImport(const v1::ImportRequest& request, v1::ImportReply* reply);
  absl::Status DoInventory(const v1::InventoryRequest& request, v1::InventoryReply* reply);
  void FillNodeStats(v1::NodeStatsReply* reply) const;

  // Calls of this service started and not yet finished.
  int active_calls() const { return active_calls_.load(); }
  // Seconds of every ComputeLayer call's work (queueing excluded).
  const metrics::Histogram& compute_seconds() const { return compute_seconds_; }

 private:
  class IngestReactor;
  struct ComputeCall;

  // Registers one ComputeCall waiting for the next ComputeLayer call (none
  // once StopComputeLayer has begun).
  void AwaitComputeCall();
  // A ComputeLayer worker: takes the queue's events until it is drained.
  void ComputeWorkerLoop();
  // Serves one received call to its end and finishes it (the call is deleted
  // when its finish event comes back).
  void ServeComputeCall(ComputeCall* call);

  ExpertServiceImpl(const Options& options, ExpertStore* store, RamTier* tier,
                    UsageCounts* usage);

  // True when the call carries the configured token (or none is configured).
  bool Authorized(const grpc::ServerContextBase* context) const;
  // The model's record, NotFound when the node holds none.
  absl::StatusOr<ModelInfo> FindModel(const std::string& fingerprint) const;
  // Records (or completes) a model's shape durably; InvalidArgument when it
  // contradicts the known one. Zero fields of `shape` mean unknown.
  absl::Status RegisterModel(const std::string& fingerprint, const ModelInfo& shape);
  // Counts a prefetch hint and queues it unless it is ignored, resident,
  // coalesced or dropped; true when queued.
  bool QueuePrefetch(const v1::ExpertKey& key);
  // The I/O pool's work for one queued hint.
  void RunPrefetch(const ExpertId& id);
  // Takes `bytes` of Options::max_ingest_buffer_bytes; false (counted) when
  // they are not available.
  bool ReserveIngestBytes(uint64_t bytes);
  // The idle-stream watchdog: ends the streams idle for longer than
  // Options::ingest_idle_timeout until watchdog_stop_ is set.
  void WatchIngestStreams();
  // Finishes a unary call (serializing its reply when OK) and counts it done.
  void Finish(rpc::RawUnaryReactor* reactor, const grpc::Status& status);

  const Options options_;
  ExpertStore* const store_;
  RamTier* const tier_;
  UsageCounts* const usage_;  // may be null
  ThreadPool compute_pool_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, ModelInfo> models_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<ExpertId> prefetch_pending_ ABSL_GUARDED_BY(mu_);
  // Serialises model record writes (held across one small RocksDB write, by
  // executor threads only).
  absl::Mutex model_write_mu_;

  // Ingest streams in progress (registered by their reactors, unregistered
  // in OnDone before they are deleted). Lock order: ingest_mu_, then a
  // reactor's own mutex.
  absl::Mutex ingest_mu_;
  absl::flat_hash_set<IngestReactor*> ingest_streams_ ABSL_GUARDED_BY(ingest_mu_);
  bool watchdog_stop_ ABSL_GUARDED_BY(ingest_mu_) = false;
  std::thread watchdog_;

  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> ingest_buffered_{0};  // bytes of experts being assembled
  std::atomic<uint64_t> ingest_refused_{0};
  std::atomic<uint64_t> ingest_timeouts_{0};
  std::atomic<uint64_t> compute_requests_{0};
  std::atomic<uint64_t> compute_routes_{0};
  std::atomic<int32_t> in_flight_{0};     // ComputeLayer calls
  std::atomic<int32_t> active_calls_{0};  // every call of this service
  // 100 us to ~13 s.
  metrics::Histogram compute_seconds_{metrics::ExponentialBuckets(1e-4, 2, 18)};
  // Prefetch hint counters of the service (the tier keeps the others).
  std::atomic<uint64_t> prefetch_hints_{0};
  std::atomic<uint64_t> prefetch_issued_{0};
  std::atomic<uint64_t> prefetch_ignored_{0};
  std::atomic<uint64_t> prefetch_resident_{0};   // resident when hinted
  std::atomic<uint64_t> prefetch_coalesced_{0};  // already queued or loading
  std::atomic<uint64_t> prefetch_queue_full_{0};

  // Last members: destroyed (drained and joined) first, while everything the
  // tasks use is still alive.
  std::unique_ptr<TaskQueue> io_queue_;
  std::unique_ptr<TaskQueue> import_queue_;
  std::unique_ptr<TaskQueue> prefetch_queue_;

  // ComputeLayer's queue and workers (ServeComputeLayer). compute_mu_ orders
  // AwaitComputeCall's registrations before the queue's shutdown.
  absl::Mutex compute_mu_;
  bool compute_stopping_ ABSL_GUARDED_BY(compute_mu_) = false;
  std::unique_ptr<grpc::ServerCompletionQueue> compute_cq_;
  std::vector<std::thread> compute_workers_;
  // One per worker, set by StopComputeLayer to fire at once with
  // kStopWorkerTag: the worker that takes it returns.
  std::vector<std::unique_ptr<grpc::Alarm>> stop_alarms_;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_EXPERT_SERVICE_H_
