#include "coordinator/cluster/node_client.h"

#include <chrono>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "colibri/v1/expert.grpc.pb.h"
#include "common/status_macros.h"
#include "grpcpp/alarm.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "rpc/client_support.h"

namespace colibri::coordinator {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& address, const char* method) {
  return rpc::FromGrpc(s, address, method);
}

class GrpcIngestStream : public IngestStream {
 public:
  GrpcIngestStream(std::string address, std::unique_ptr<grpc::ClientContext> context,
                   std::unique_ptr<v1::IngestReply> reply,
                   std::unique_ptr<grpc::ClientWriter<v1::IngestChunk>> writer)
      : address_(std::move(address)),
        context_(std::move(context)),
        reply_(std::move(reply)),
        writer_(std::move(writer)) {}

  ~GrpcIngestStream() override {
    if (!finished_) {
      context_->TryCancel();
      writer_->Finish().IgnoreError();
    }
  }

  absl::Status Write(const v1::IngestChunk& chunk) override {
    if (!writer_->Write(chunk)) {
      return absl::UnavailableError(absl::StrCat(address_, " Ingest: the stream broke"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::IngestReply> Finish() override {
    finished_ = true;
    writer_->WritesDone();
    absl::Status s = FromGrpc(writer_->Finish(), address_, "Ingest");
    if (!s.ok()) return s;
    return *reply_;
  }

 private:
  const std::string address_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<v1::IngestReply> reply_;  // written by the stream on Finish
  std::unique_ptr<grpc::ClientWriter<v1::IngestChunk>> writer_;
  bool finished_ = false;
};

// One ComputeLayer call in flight on a ComputeQueue: its tag on the gRPC queue.
struct AsyncComputeCall {
  std::string address;
  void* tag = nullptr;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ComputeLayerReply>> reader;
  v1::ComputeLayerReply reply;
  grpc::Status status;
};

}  // namespace

class ComputeQueue::Impl {
 public:
  ~Impl() {
    std::vector<void*> tags;
    {
      absl::MutexLock lock(&mu_);
      for (AsyncComputeCall* call : in_flight_) tags.push_back(call->tag);
      for (const auto& [tag, cancel] : elsewhere_) tags.push_back(tag);
    }
    for (void* tag : tags) Cancel(tag);
    // Every started call comes back once (cancelled or not).
    while (outstanding() > 0) NextUntil(gpr_inf_future(GPR_CLOCK_MONOTONIC));
    queue_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  grpc::CompletionQueue* grpc_queue() { return &queue_; }

  void Started(AsyncComputeCall* call) {
    absl::MutexLock lock(&mu_);
    in_flight_.insert(call);
  }

  void StartedElsewhere(void* tag, std::function<void()> cancel) {
    absl::MutexLock lock(&mu_);
    elsewhere_[tag] = std::move(cancel);
  }

  void Complete(void* tag, absl::StatusOr<v1::ComputeLayerReply> reply) {
    absl::MutexLock lock(&mu_);
    elsewhere_.erase(tag);
    done_.push_back(Completion{tag, std::move(reply)});
    // A Next blocked on the gRPC queue sees done_ only once woken.
    if (waiting_ && wake_ == nullptr) {
      wake_ = std::make_unique<grpc::Alarm>();
      wake_->Set(&queue_, gpr_now(GPR_CLOCK_MONOTONIC), wake_.get());
    }
  }

  void Cancel(void* tag) {
    std::function<void()> cancel;
    {
      absl::MutexLock lock(&mu_);
      bool grpc_call = false;
      for (AsyncComputeCall* call : in_flight_) {
        if (call->tag != tag) continue;
        call->context.TryCancel();
        grpc_call = true;
      }
      if (grpc_call) return;
      auto it = elsewhere_.find(tag);
      if (it == elsewhere_.end()) return;
      cancel = std::exchange(it->second, nullptr);
    }
    // Outside mu_: it may call Complete.
    if (cancel) cancel();
  }

  int outstanding() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(in_flight_.size() + elsewhere_.size() + done_.size());
  }

  std::optional<Completion> NextUntil(gpr_timespec deadline) {
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        if (!done_.empty()) return PopDone();
        waiting_ = true;
      }
      void* tag = nullptr;
      bool ok = false;
      // Never SHUTDOWN before Shutdown, which only the destructor calls after
      // every call came back.
      const grpc::CompletionQueue::NextStatus status = queue_.AsyncNext(&tag, &ok, deadline);
      AsyncComputeCall* call = nullptr;
      {
        absl::MutexLock lock(&mu_);
        waiting_ = false;
        if (status != grpc::CompletionQueue::GOT_EVENT) {
          if (!done_.empty()) return PopDone();
          return std::nullopt;
        }
        if (tag == wake_.get()) {
          wake_.reset();
          continue;
        }
        call = static_cast<AsyncComputeCall*>(tag);
        in_flight_.erase(call);
      }
      Completion c;
      c.tag = call->tag;
      if (call->status.ok()) {
        c.reply = std::move(call->reply);
      } else {
        c.reply = rpc::FromGrpc(call->status, call->address, "ComputeLayer");
      }
      delete call;
      return c;
    }
  }

 private:
  Completion PopDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Completion c = std::move(done_.front());
    done_.pop_front();
    return c;
  }

  grpc::CompletionQueue queue_;
  mutable absl::Mutex mu_;
  // Outstanding calls: gRPC ones (a handful; tags need not be unique), and
  // those a client completes itself, by tag.
  absl::flat_hash_set<AsyncComputeCall*> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<void*, std::function<void()>> elsewhere_ ABSL_GUARDED_BY(mu_);
  std::deque<Completion> done_ ABSL_GUARDED_BY(mu_);
  // True while NextUntil waits on queue_; wake_ is the alarm that ends the
  // wait when Complete adds to done_ meanwhile (its tag is itself).
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::Alarm> wake_ ABSL_GUARDED_BY(mu_);
};

ComputeQueue::ComputeQueue() : impl_(std::make_unique<Impl>()) {}
ComputeQueue::~ComputeQueue() = default;
int ComputeQueue::outstanding() const { return impl_->outstanding(); }
ComputeQueue::Completion ComputeQueue::Next() {
  return *impl_->NextUntil(gpr_inf_future(GPR_CLOCK_MONOTONIC));
}
std::optional<ComputeQueue::Completion> ComputeQueue::NextUntil(
    std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
      deadline - std::chrono::steady_clock::now());
  const gpr_timespec at =
      left.count() <= 0 ? gpr_now(GPR_CLOCK_MONOTONIC)
                        : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                       gpr_time_from_micros(left.count(), GPR_TIMESPAN));
  return impl_->NextUntil(at);
}
void ComputeQueue::Cancel(void* tag) { impl_->Cancel(tag); }
void ComputeQueue::Complete(void* tag, absl::StatusOr<v1::ComputeLayerReply> reply) {
  impl_->Complete(tag, std::move(reply));
}
void ComputeQueue::StartedElsewhere(void* tag, std::function<void()> cancel) {
  impl_->StartedElsewhere(tag, std::move(cancel));
}

void NodeClient::StartComputeLayer(const v1::ComputeLayerRequest& request,
                                   absl::Duration /*deadline*/, ComputeQueue* queue, void* tag) {
  queue->Complete(tag, ComputeLayer(request));
}

absl::StatusOr<v1::ImportReply> NodeClient::ImportWithProgress(
    const v1::ImportRequest& request, const std::function<void(const v1::ImportReply&)>&) {
  return Import(request);
}

namespace {

class GrpcNodeClient : public NodeClient {
 public:
  GrpcNodeClient(NodeClientOptions options, std::shared_ptr<grpc::Channel> channel)
      : options_(std::move(options)),
        channel_(std::move(channel)),
        stub_(v1::ExpertService::NewStub(channel_)),
        generic_(channel_) {}

  const std::string& address() const override { return options_.address; }

  absl::StatusOr<v1::ComputeLayerReply> ComputeLayer(
      const v1::ComputeLayerRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.compute_deadline);
    v1::ComputeLayerReply reply;
    absl::Status s =
        FromGrpc(stub_->ComputeLayer(&ctx, request, &reply), address(), "ComputeLayer");
    if (!s.ok()) return s;
    return reply;
  }

  void StartComputeLayer(const v1::ComputeLayerRequest& request, absl::Duration deadline,
                         ComputeQueue* queue, void* tag) override {
    auto* call = new AsyncComputeCall;
    call->address = address();
    call->tag = tag;
    Prepare(&call->context, deadline);
    ComputeQueue::Impl* impl = queue->impl();
    call->reader = stub_->PrepareAsyncComputeLayer(&call->context, request, impl->grpc_queue());
    impl->Started(call);
    call->reader->StartCall();
    call->reader->Finish(&call->reply, &call->status, call);
  }

  absl::StatusOr<v1::PrefetchReply> Prefetch(const v1::PrefetchRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.control_deadline);
    v1::PrefetchReply reply;
    absl::Status s = FromGrpc(stub_->Prefetch(&ctx, request, &reply), address(), "Prefetch");
    if (!s.ok()) return s;
    return reply;
  }

  absl::StatusOr<std::unique_ptr<IngestStream>> StartIngest() override {
    auto ctx = std::make_unique<grpc::ClientContext>();
    Prepare(ctx.get(), options_.transfer_deadline);
    auto reply = std::make_unique<v1::IngestReply>();
    std::unique_ptr<grpc::ClientWriter<v1::IngestChunk>> writer =
        stub_->Ingest(ctx.get(), reply.get());
    if (writer == nullptr) {
      return absl::UnavailableError(absl::StrCat(address(), " Ingest: cannot start the stream"));
    }
    return std::unique_ptr<IngestStream>(
        new GrpcIngestStream(address(), std::move(ctx), std::move(reply), std::move(writer)));
  }

  absl::StatusOr<v1::ImportReply> Import(const v1::ImportRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.transfer_deadline);
    v1::ImportReply reply;
    absl::Status s = FromGrpc(stub_->Import(&ctx, request, &reply), address(), "Import");
    if (!s.ok()) return s;
    return reply;
  }

  absl::StatusOr<v1::ImportReply> ImportWithProgress(
      const v1::ImportRequest& request,
      const std::function<void(const v1::ImportReply&)>& progress) override {
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.transfer_deadline);
    std::unique_ptr<grpc::ClientReader<v1::ImportReply>> reader =
        stub_->ImportWithProgress(&ctx, request);
    std::optional<v1::ImportReply> last;
    v1::ImportReply message;
    while (reader->Read(&message)) {
      // Hold each message back by one: the last is the final reply, not
      // progress.
      if (last.has_value() && progress) progress(*last);
      last = message;
    }
    const grpc::Status status = reader->Finish();
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) return Import(request);
    absl::Status s = FromGrpc(status, address(), "ImportWithProgress");
    if (!s.ok()) return s;
    if (!last.has_value()) {
      return absl::DataLossError(
          absl::StrCat(address(), " ImportWithProgress: the stream ended without a reply"));
    }
    return *last;
  }

  absl::StatusOr<v1::InventoryReply> Inventory(const v1::InventoryRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.control_deadline);
    v1::InventoryReply reply;
    absl::Status s = FromGrpc(stub_->Inventory(&ctx, request, &reply), address(), "Inventory");
    if (!s.ok()) return s;
    return reply;
  }

  absl::StatusOr<v1::NodeStatsReply> NodeStats() override {
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.control_deadline);
    v1::NodeStatsRequest request;
    v1::NodeStatsReply reply;
    absl::Status s = FromGrpc(stub_->NodeStats(&ctx, request, &reply), address(), "NodeStats");
    if (!s.ok()) return s;
    return reply;
  }

  absl::Status CheckHealth() override {
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.health_deadline);
    absl::StatusOr<bool> serving = rpc::CheckHealth(&generic_, &ctx, "", address());
    if (!serving.ok()) return absl::UnavailableError(serving.status().message());
    if (!*serving) return absl::UnavailableError(absl::StrCat(address(), " is not serving"));
    return absl::OkStatus();
  }

 private:
  void Prepare(grpc::ClientContext* ctx, absl::Duration deadline) const {
    rpc::PrepareContext(ctx, deadline, options_.auth_token);
  }

  const NodeClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::ExpertService::Stub> stub_;
  grpc::GenericStub generic_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NodeClient>> CreateGrpcNodeClient(const NodeClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("node address is empty");
  rpc::ChannelOptions channel_options;
  channel_options.address = options.address;
  channel_options.use_tls = options.use_tls;
  channel_options.tls_ca_pem = options.tls_ca_pem;
  channel_options.tls_cert_pem = options.tls_cert_pem;
  channel_options.tls_key_pem = options.tls_key_pem;
  channel_options.max_message_bytes = options.max_message_bytes;
  channel_options.keepalive_time = options.keepalive_time;
  channel_options.keepalive_timeout = options.keepalive_timeout;
  channel_options.min_reconnect_backoff = options.min_reconnect_backoff;
  channel_options.max_reconnect_backoff = options.max_reconnect_backoff;
  COLIBRI_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                           rpc::CreateChannel(channel_options));
  return std::unique_ptr<NodeClient>(new GrpcNodeClient(options, std::move(channel)));
}

}  // namespace colibri::coordinator
