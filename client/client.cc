#include "client/client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "colibri/v1/inference.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace colibri::client {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& address, const char* method) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("coordinator ", address, " ", method, ": ", s.error_message()));
}

}  // namespace

class Client::Impl {
 public:
  Impl(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
      : options(std::move(options)),
        channel(std::move(channel)),
        stub(v1::Inference::NewStub(this->channel)),
        generic(this->channel) {}

  void Prepare(grpc::ClientContext* ctx, absl::Duration deadline) const {
    ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
    if (!options.auth_token.empty()) {
      ctx->AddMetadata("authorization", "Bearer " + options.auth_token);
    }
  }

  const ClientOptions options;
  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<v1::Inference::Stub> stub;
  grpc::GenericStub generic;
};

Client::Client(ClientOptions options, std::unique_ptr<Impl> impl)
    : options_(std::move(options)), impl_(std::move(impl)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("coordinator address is empty");
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError("max_message_bytes must be positive");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options.address, creds, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create a channel to ", options.address));
  }
  return std::unique_ptr<Client>(
      new Client(options, std::make_unique<Impl>(options, std::move(channel))));
}

absl::StatusOr<GenerateResult> Client::Generate(const v1::GenerateRequest& request,
                                                const ReplyCallback& on_reply) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, options_.generate_deadline);
  std::unique_ptr<grpc::ClientReader<v1::GenerateReply>> reader =
      impl_->stub->Generate(&ctx, request);
  GenerateResult result;
  v1::GenerateReply reply;
  while (reader->Read(&reply)) {
    if (reply.done()) {
      result.finish_reason = reply.finish_reason();
      result.stats = reply.stats();
    } else {
      result.tokens.push_back(reply.token());
    }
    result.text += reply.text();
    if (on_reply && !on_reply(reply)) {
      result.cancelled = true;
      ctx.TryCancel();
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  if (result.cancelled) {
    result.finish_reason = v1::FINISH_REASON_UNSPECIFIED;
    result.stats.Clear();
    return result;
  }
  absl::Status s = FromGrpc(status, options_.address, "Generate");
  if (!s.ok()) return s;
  if (result.finish_reason == v1::FINISH_REASON_UNSPECIFIED) {
    return absl::DataLossError(
        absl::StrCat("coordinator ", options_.address, " Generate: the stream ended without a "
                     "last reply"));
  }
  return result;
}

absl::StatusOr<v1::TokenizeReply> Client::Tokenize(const v1::TokenizeRequest& request) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, options_.call_deadline);
  v1::TokenizeReply reply;
  absl::Status s = FromGrpc(impl_->stub->Tokenize(&ctx, request, &reply), address(), "Tokenize");
  if (!s.ok()) return s;
  return reply;
}

absl::StatusOr<v1::ModelInfoReply> Client::ModelInfo() {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, options_.call_deadline);
  v1::ModelInfoRequest request;
  v1::ModelInfoReply reply;
  absl::Status s = FromGrpc(impl_->stub->ModelInfo(&ctx, request, &reply), address(), "ModelInfo");
  if (!s.ok()) return s;
  return reply;
}

absl::StatusOr<v1::ClusterStatusReply> Client::ClusterStatus() {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, options_.call_deadline);
  v1::ClusterStatusRequest request;
  v1::ClusterStatusReply reply;
  absl::Status s =
      FromGrpc(impl_->stub->ClusterStatus(&ctx, request, &reply), address(), "ClusterStatus");
  if (!s.ok()) return s;
  return reply;
}

// grpc.health.v1.Health/Check through the generic stub, so that no health
// proto needs generating: HealthCheckRequest{service} is field 1 (bytes), and
// a SERVING reply is field 1 = 1, i.e. bytes 08 01.
absl::StatusOr<bool> Client::Health(const std::string& service) {
  if (service.size() > 127) return absl::InvalidArgumentError("health service name too long");
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, options_.call_deadline);
  std::string encoded;
  if (!service.empty()) {
    encoded.push_back('\x0a');
    encoded.push_back(static_cast<char>(service.size()));
    encoded += service;
  }
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  impl_->generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                           &response, [&](grpc::Status s) {
                             status = std::move(s);
                             done.Notify();
                           });
  done.WaitForNotification();
  absl::Status s = FromGrpc(status, address(), "Health/Check");
  if (!s.ok()) return s;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return absl::DataLossError(absl::StrCat("coordinator ", address(), " Health/Check: unreadable reply"));
  }
  std::string bytes;
  for (const grpc::Slice& piece : slices) {
    bytes.append(reinterpret_cast<const char*>(piece.begin()), piece.size());
  }
  return bytes == std::string("\x08\x01", 2);
}

}  // namespace colibri::client
