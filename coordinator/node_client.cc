#include "coordinator/node_client.h"

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "colibri/v1/expert.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace colibri::coordinator {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& address, const char* method) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(address, " ", method, ": ", s.error_message()));
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

  // grpc.health.v1.Health/Check through the generic stub, so that no health
  // proto needs generating: the request (service "") encodes to no bytes, and
  // a SERVING reply to field 1 = 1, i.e. bytes 08 01.
  absl::Status CheckHealth() override {
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.health_deadline);
    grpc::Slice empty;
    grpc::ByteBuffer request(&empty, 1);  // a ByteBuffer without slices is invalid
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Notification done;
    generic_.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                       &response, [&](grpc::Status s) {
                         status = std::move(s);
                         done.Notify();
                       });
    done.WaitForNotification();
    absl::Status s = FromGrpc(status, address(), "Health/Check");
    if (!s.ok()) return absl::UnavailableError(s.message());
    std::vector<grpc::Slice> slices;
    if (!response.Dump(&slices).ok()) {
      return absl::UnavailableError(absl::StrCat(address(), " Health/Check: unreadable reply"));
    }
    std::string bytes;
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    if (bytes != std::string("\x08\x01", 2)) {
      return absl::UnavailableError(absl::StrCat(address(), " is not serving"));
    }
    return absl::OkStatus();
  }

 private:
  void Prepare(grpc::ClientContext* ctx, absl::Duration deadline) const {
    ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    if (!options_.auth_token.empty()) {
      ctx->AddMetadata("authorization", "Bearer " + options_.auth_token);
    }
  }

  const NodeClientOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::ExpertService::Stub> stub_;
  grpc::GenericStub generic_;
};

int Millis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

}  // namespace

absl::StatusOr<std::unique_ptr<NodeClient>> CreateGrpcNodeClient(const NodeClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("node address is empty");
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("max_message_bytes must be positive");
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("a TLS client certificate needs its key and vice versa");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(options.keepalive_timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, Millis(options.min_reconnect_backoff));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, Millis(options.min_reconnect_backoff));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Millis(options.max_reconnect_backoff));
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    ssl.pem_cert_chain = options.tls_cert_pem;
    ssl.pem_private_key = options.tls_key_pem;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.address, creds, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create a channel to ", options.address));
  }
  return std::unique_ptr<NodeClient>(new GrpcNodeClient(options, std::move(channel)));
}

}  // namespace colibri::coordinator
