// colibri.v1.ExpertService: the gRPC edge of the node's domain classes.
// Each method checks the caller's token, parses its request, calls one
// domain class and replies, converting statuses with rpc::ToGrpcStatus:
//   ComputeLayer  LayerComputer (layer_computer.h), its prefetch hints
//                 PrefetchQueue (prefetch_queue.h)
//   Prefetch      PrefetchQueue
//   Ingest        IngestAssembly (ingest_assembly.h) through IngestStreams
//                 (ingest_streams.h)
//   Import, ImportWithProgress  ExpertImporter (expert_import.h); the
//                 latter streams its progress (import_progress_writer.h)
//   Inventory, NodeStats  NodeReport (node_report.h)
// over the models of ModelRegistry (model_registry.h). Tests and main use
// those classes directly; this file only adapts them to gRPC.
//
// ComputeLayer, the call on every token's path, runs on gRPC's asynchronous
// API: Options::compute_workers threads wait on the server's completion
// queue themselves (ServeComputeLayer), and the thread that receives a call
// checks its token, parses it, computes (sharing LayerComputer's pool of
// Options::compute_threads for the matmuls) and sends the reply, with no
// hand-off to another thread: every hand-off is a wake-up more per call, per
// layer, per token.
//
// The other methods run on the callback API and never block gRPC's callback
// thread: they check the token, parse, then either answer inline (Prefetch,
// NodeStats: in-memory work) or hand the work to an executor whose thread
// finishes the call:
//   io       (1 thread)  Ingest writes, Inventory scans;
//   import   (1 thread)  Import and ImportWithProgress, which can run for minutes;
//   prefetch (PrefetchQueue's I/O pool: Options::io_threads, bounded queue).
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
// Thread-safety: gRPC calls the handlers from any thread; the domain classes
// are thread-safe, the rest is constant after Create, atomic, or guarded by
// compute_mu_.
#ifndef COLIBRI_EXPERT_NODE_EXPERT_SERVICE_H_
#define COLIBRI_EXPERT_NODE_EXPERT_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "colibri/v1/expert.grpc.pb.h"
#include "expert_node/expert_import.h"
#include "expert_node/expert_store.h"
#include "expert_node/ingest_assembly.h"
#include "expert_node/ingest_streams.h"
#include "expert_node/layer_computer.h"
#include "expert_node/model_registry.h"
#include "expert_node/node_report.h"
#include "expert_node/prefetch_queue.h"
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
// shapes and Options::max_batch_tokens (ModelRegistry::ComputeRequestLimit),
// Prefetch and Import take at most kMaxControlRequestBytes, Inventory and
// NodeStats kMaxQueryRequestBytes.
using ExpertServiceBase = v1::ExpertService::WithRawMethod_ComputeLayer<
    v1::ExpertService::WithRawCallbackMethod_Prefetch<
        v1::ExpertService::WithRawCallbackMethod_Ingest<
            v1::ExpertService::WithRawCallbackMethod_Import<
                v1::ExpertService::WithRawCallbackMethod_ImportWithProgress<
                    v1::ExpertService::WithRawCallbackMethod_Inventory<
                        v1::ExpertService::WithRawCallbackMethod_NodeStats<
                            v1::ExpertService::Service>>>>>>>;

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
    // Replaces every spin of the matmul pool (LayerComputer::Options::spin_us).
    // Default: none.
    std::optional<int> compute_spin_us;
    // ComputeLayer requests served concurrently (they share the pool, so this
    // overlaps one request's disk reads with another's compute). Default: 2.
    int compute_workers = 2;
    // Prefetch loads waiting at most; more are dropped. Default: 256.
    size_t prefetch_queue_limit = 256;
    // Threads of the I/O pool serving prefetch hints; each waits on one read
    // in the store's read queue, so this many prefetches are in flight.
    // Default: 8.
    int io_threads = 8;
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
    // How often ImportWithProgress sends its counts. Default: 0.5 s.
    absl::Duration import_report_interval = absl::Milliseconds(500);
  };

  // store, tier and usage are borrowed and must outlive the service; usage
  // may be null (no usage counting). Builds the domain classes from
  // `options`; store errors of ModelRegistry::Load pass through.
  static absl::StatusOr<std::unique_ptr<ExpertServiceImpl>> Create(const Options& options,
                                                                   ExpertStore* store,
                                                                   RamTier* tier,
                                                                   UsageCounts* usage = nullptr);
  // Waits for queued work to finish. Call after the gRPC server has shut down.
  ~ExpertServiceImpl() override;

  // Makes an Import in progress stop before its next expert, and later ones
  // fail at once, with Unavailable (ExpertImporter::BeginShutdown). Call when
  // shutting down, so that a long Import does not hold the node up.
  // Thread-safe.
  void BeginShutdown() { importer_->BeginShutdown(); }

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
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ImportWithProgress(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) override;
  grpc::ServerUnaryReactor* Import(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Inventory(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* NodeStats(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;

  // The domain classes behind the methods (thread-safe; owned by the
  // service).
  ExpertImporter* importer() { return importer_.get(); }
  const NodeReport* report() const { return report_.get(); }

  // Calls of this service started and not yet finished.
  int active_calls() const { return active_calls_.load(); }

 private:
  struct ComputeCall;

  ExpertServiceImpl(const Options& options, ExpertStore* store, RamTier* tier, UsageCounts* usage,
                    std::unique_ptr<ModelRegistry> registry);

  // The gate of every call: UNAUTHENTICATED (absl's code) unless the call
  // carries the configured token, then the request parsed within its cap
  // (rpc::ParseRequest's errors).
  template <typename Request>
  absl::Status AuthorizeAndParse(const grpc::ServerContextBase& context,
                                 const grpc::ByteBuffer& raw, uint64_t max_bytes,
                                 absl::string_view method, Request* request) const;
  // True when the call carries the configured token (or none is configured).
  bool Authorized(const grpc::ServerContextBase& context) const;
  // Every unary method: counts the call (active_calls), passes it through
  // AuthorizeAndParse, then runs work(request, reply) -> absl::Status inline
  // (executor null: in-memory work only) or on `executor` (Unavailable when
  // it does not take it), and finishes the call with that status.
  template <typename Request, typename Reply, typename Work>
  grpc::ServerUnaryReactor* ServeUnary(const grpc::ServerContextBase& context,
                                       const grpc::ByteBuffer& raw, grpc::ByteBuffer* response,
                                       uint64_t max_bytes, absl::string_view method,
                                       TaskQueue* executor, Work work);
  // Finishes a unary call (serializing its reply when OK), counts it done
  // and returns it (for the handler to return).
  grpc::ServerUnaryReactor* Finish(rpc::RawUnaryReactor* call, const absl::Status& status);

  // Registers one ComputeCall waiting for the next ComputeLayer call (none
  // once StopComputeLayer has begun).
  void AwaitComputeCall();
  // A ComputeLayer worker: takes the queue's events until it is drained.
  void ComputeWorkerLoop();
  // Serves one received call to its end and finishes it (the call is deleted
  // when its finish event comes back).
  void ServeComputeCall(ComputeCall* call);

  const Options options_;
  std::atomic<int32_t> active_calls_{0};  // every call of this service

  // The domain, in dependency order (destroyed last to first, after the
  // executors below, whose tasks use it).
  const std::unique_ptr<ModelRegistry> registry_;
  const std::unique_ptr<IngestAssembly> ingest_;
  const std::unique_ptr<ExpertImporter> importer_;
  std::unique_ptr<LayerComputer> compute_;
  std::unique_ptr<PrefetchQueue> prefetch_;
  const std::unique_ptr<NodeReport> report_;

  // Executors: destroyed (drained and joined) before the domain.
  std::unique_ptr<TaskQueue> io_queue_;
  std::unique_ptr<TaskQueue> import_queue_;
  std::unique_ptr<IngestStreams> ingest_streams_;

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
