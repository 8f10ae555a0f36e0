#include "expert_node/expert_service.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "expert_node/import_progress_writer.h"
#include "grpc/support/time.h"
#include "rpc/server_support.h"

namespace colibri::expert_node {

absl::StatusOr<std::unique_ptr<ExpertServiceImpl>> ExpertServiceImpl::Create(const Options& options,
                                                                             ExpertStore* store,
                                                                             RamTier* tier,
                                                                             UsageCounts* usage) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<ModelRegistry> registry, ModelRegistry::Load(store));
  return std::unique_ptr<ExpertServiceImpl>(
      new ExpertServiceImpl(options, store, tier, usage, std::move(registry)));
}

ExpertServiceImpl::ExpertServiceImpl(const Options& options, ExpertStore* store, RamTier* tier,
                                     UsageCounts* usage, std::unique_ptr<ModelRegistry> registry)
    : options_(options),
      registry_(std::move(registry)),
      ingest_(std::make_unique<IngestAssembly>(
          IngestAssembly::Options{options.max_expert_bytes, options.max_ingest_buffer_bytes}, store,
          registry_.get())),
      importer_(std::make_unique<ExpertImporter>(
          ExpertImporter::Options{options.progress_interval, options.import_report_interval}, store,
          registry_.get())),
      compute_(std::make_unique<LayerComputer>(
          LayerComputer::Options{options.compute_threads, options.max_reply_bytes,
                                 options.compute_spin_us},
          registry_.get(), tier, usage)),
      prefetch_(std::make_unique<PrefetchQueue>(
          PrefetchQueue::Options{options.io_threads, options.prefetch_queue_limit}, store, tier,
          registry_.get())),
      report_(std::make_unique<NodeReport>(
          NodeReport::Options{options.node_id, options.advertise_address,
                              options.disk_budget_bytes},
          NodeReport::Parts{store, tier, compute_.get(), ingest_.get(), prefetch_.get()})),
      io_queue_(std::make_unique<TaskQueue>(1, 0)),
      import_queue_(std::make_unique<TaskQueue>(1, 0)),
      ingest_streams_(std::make_unique<IngestStreams>(
          IngestStreams::Options{options.max_ingest_chunk_bytes, options.ingest_idle_timeout},
          ingest_.get(), io_queue_.get(), [this] { active_calls_.fetch_sub(1); })) {}

ExpertServiceImpl::~ExpertServiceImpl() {
  ingest_streams_.reset();  // the watchdog
  StopComputeLayer();
  prefetch_.reset();
  import_queue_.reset();
  io_queue_.reset();
}

// The unary methods: one domain call each, through ServeUnary.

grpc::ServerUnaryReactor* ExpertServiceImpl::Prefetch(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* raw,
                                                      grpc::ByteBuffer* response) {
  return ServeUnary<v1::PrefetchRequest, v1::PrefetchReply>(
      *context, *raw, response, kMaxControlRequestBytes, "Prefetch", /*executor=*/nullptr,
      [this](const v1::PrefetchRequest& request, v1::PrefetchReply* reply) {
        reply->set_accepted(prefetch_->HintAll(request.experts()));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ExpertServiceImpl::Import(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* raw,
                                                    grpc::ByteBuffer* response) {
  return ServeUnary<v1::ImportRequest, v1::ImportReply>(
      *context, *raw, response, kMaxControlRequestBytes, "Import", import_queue_.get(),
      [this](const v1::ImportRequest& request, v1::ImportReply* reply) {
        return importer_->Import(request, reply);
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ExpertServiceImpl::ImportWithProgress(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  active_calls_.fetch_add(1);
  auto* writer = new ImportProgressWriter([this] { active_calls_.fetch_sub(1); });
  auto request = std::make_shared<v1::ImportRequest>();
  const absl::Status admitted = AuthorizeAndParse(*context, *raw, kMaxControlRequestBytes,
                                                  "ImportWithProgress", request.get());
  if (!admitted.ok()) {
    writer->Finish(admitted, {});
    return writer;
  }
  if (!import_queue_->Post([this, writer, request] {
        v1::ImportReply reply;
        const absl::Status status = importer_->Import(
            *request, &reply,
            [writer](const v1::ImportReply& so_far) { writer->Progress(so_far); });
        writer->Finish(status, reply);
      })) {
    writer->Finish(absl::UnavailableError("node is shutting down"), {});
  }
  return writer;
}

grpc::ServerUnaryReactor* ExpertServiceImpl::Inventory(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* response) {
  return ServeUnary<v1::InventoryRequest, v1::InventoryReply>(
      *context, *raw, response, kMaxQueryRequestBytes, "Inventory", io_queue_.get(),
      [this](const v1::InventoryRequest& request, v1::InventoryReply* reply) {
        return report_->Inventory(request, reply);
      });
}

grpc::ServerUnaryReactor* ExpertServiceImpl::NodeStats(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw,
                                                       grpc::ByteBuffer* response) {
  return ServeUnary<v1::NodeStatsRequest, v1::NodeStatsReply>(
      *context, *raw, response, kMaxQueryRequestBytes, "NodeStats", /*executor=*/nullptr,
      [this](const v1::NodeStatsRequest&, v1::NodeStatsReply* reply) {
        report_->Stats(reply);
        return absl::OkStatus();
      });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ExpertServiceImpl::Ingest(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  active_calls_.fetch_add(1);  // given back by the stream's on_done
  return ingest_streams_->Open(context, response, Authorized(*context));
}

bool ExpertServiceImpl::Authorized(const grpc::ServerContextBase& context) const {
  return rpc::BearerTokenMatches(context, options_.auth_token);
}

template <typename Request>
absl::Status ExpertServiceImpl::AuthorizeAndParse(const grpc::ServerContextBase& context,
                                                  const grpc::ByteBuffer& raw, uint64_t max_bytes,
                                                  absl::string_view method,
                                                  Request* request) const {
  if (!Authorized(context)) {
    return absl::UnauthenticatedError(rpc::UnauthenticatedStatus().error_message());
  }
  return rpc::ParseRequest(raw, max_bytes, method, request);
}

template <typename Request, typename Reply, typename Work>
grpc::ServerUnaryReactor* ExpertServiceImpl::ServeUnary(
    const grpc::ServerContextBase& context, const grpc::ByteBuffer& raw, grpc::ByteBuffer* response,
    uint64_t max_bytes, absl::string_view method, TaskQueue* executor, Work work) {
  active_calls_.fetch_add(1);
  auto* call = new rpc::ParsedUnaryCall<Request, Reply>(response);
  const absl::Status admitted =
      AuthorizeAndParse(context, raw, max_bytes, method, call->mutable_request());
  if (!admitted.ok()) return Finish(call, admitted);
  if (executor == nullptr) return Finish(call, work(call->request(), call->reply()));
  if (!executor->Post([this, call, work] { Finish(call, work(call->request(), call->reply())); })) {
    return Finish(call, absl::UnavailableError("node is shutting down"));
  }
  return call;
}

grpc::ServerUnaryReactor* ExpertServiceImpl::Finish(rpc::RawUnaryReactor* call,
                                                    const absl::Status& status) {
  call->FinishCall(rpc::ToGrpcStatus(status));
  active_calls_.fetch_sub(1);
  return call;
}

// ComputeLayer on the asynchronous API.

// One ComputeLayer call: its tag on the queue.
struct ExpertServiceImpl::ComputeCall {
  grpc::ServerContext context;
  grpc::ByteBuffer request;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder{&context};
  // False while the call is awaited, true once it was finished (its next
  // event is the last).
  bool finishing = false;
};

void ExpertServiceImpl::ServeComputeCall(ComputeCall* call) {
  active_calls_.fetch_add(1);
  call->finishing = true;
  v1::ComputeLayerRequest request;
  absl::Status s = AuthorizeAndParse(call->context, call->request,
                                     registry_->ComputeRequestLimit(options_.max_batch_tokens),
                                     "ComputeLayer", &request);
  call->request.Clear();
  v1::ComputeLayerReply reply;
  if (s.ok()) {
    prefetch_->LayerRequested(request);
    prefetch_->HintAll(request.prefetch());
    s = compute_->Compute(request, &reply);
  }
  grpc::ByteBuffer out;
  bool own = false;
  grpc::Status status = rpc::ToGrpcStatus(s);
  if (status.ok()) {
    status = grpc::SerializationTraits<v1::ComputeLayerReply>::Serialize(reply, &out, &own);
  }
  if (!status.ok()) {
    call->responder.FinishWithError(status, call);
    return;
  }
  call->responder.Finish(out, grpc::Status::OK, call);
}

void ExpertServiceImpl::ServeComputeLayer(std::unique_ptr<grpc::ServerCompletionQueue> queue) {
  compute_cq_ = std::move(queue);
  const int workers = std::max(options_.compute_workers, 1);
  // One call awaited per worker: a call that arrives while every worker is
  // busy waits in gRPC until one registers its next.
  for (int i = 0; i < workers; ++i) AwaitComputeCall();
  for (int i = 0; i < workers; ++i) {
    compute_workers_.emplace_back([this] { ComputeWorkerLoop(); });
  }
}

namespace {
// The tag of the alarms that stop the ComputeLayer workers (no ComputeCall).
char kStopWorkerTag;
}  // namespace

void ExpertServiceImpl::StopComputeLayer() {
  {
    absl::MutexLock lock(&compute_mu_);
    if (compute_stopping_) return;
    compute_stopping_ = true;  // AwaitComputeCall registers no more calls
  }
  if (compute_cq_ == nullptr) return;
  // Shutting the queue down while a worker computes would fail that worker's
  // Finish (an operation started on a shut-down queue aborts the process).
  // So each worker is told to return by an event of its own, taken after the
  // call it serves has been finished, and the queue is shut down once no
  // thread can start an operation on it.
  for (size_t i = 0; i < compute_workers_.size(); ++i) {
    stop_alarms_.push_back(std::make_unique<grpc::Alarm>());
    stop_alarms_.back()->Set(compute_cq_.get(), gpr_now(GPR_CLOCK_MONOTONIC), &kStopWorkerTag);
  }
  for (std::thread& worker : compute_workers_) worker.join();
  compute_workers_.clear();
  compute_cq_->Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (compute_cq_->Next(&tag, &ok)) {
    if (tag == &kStopWorkerTag) continue;
    auto* call = static_cast<ComputeCall*>(tag);
    if (call->finishing) active_calls_.fetch_sub(1);
    // A call received now (ok, not finishing) cannot be answered any more;
    // the server's Shutdown, which comes first, cancels those.
    delete call;
  }
}

void ExpertServiceImpl::AwaitComputeCall() {
  absl::MutexLock lock(&compute_mu_);
  if (compute_stopping_) return;
  auto* call = new ComputeCall;
  RequestComputeLayer(&call->context, &call->request, &call->responder, compute_cq_.get(),
                      compute_cq_.get(), call);
}

void ExpertServiceImpl::ComputeWorkerLoop() {
  void* tag = nullptr;
  bool ok = false;
  while (compute_cq_->Next(&tag, &ok)) {
    if (tag == &kStopWorkerTag) return;  // StopComputeLayer: the queue stays open
    auto* call = static_cast<ComputeCall*>(tag);
    if (call->finishing) {  // the reply went out (or the call was cancelled)
      delete call;
      active_calls_.fetch_sub(1);
      continue;
    }
    if (!ok) {  // the server is shutting down: no call came
      delete call;
      continue;
    }
    AwaitComputeCall();  // the next call can arrive while this one runs
    ServeComputeCall(call);
  }
}

}  // namespace colibri::expert_node
