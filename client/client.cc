#include "client/client.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "colibri/v1/inference.grpc.pb.h"
#include "common/status_macros.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "rpc/client_support.h"

namespace colibri::client {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& address, const char* method) {
  return rpc::FromGrpc(s, absl::StrCat("coordinator ", address), method);
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
    rpc::PrepareContext(ctx, deadline, options.auth_token);
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
  rpc::ChannelOptions channel_options;
  channel_options.address = options.address;
  channel_options.use_tls = options.use_tls;
  channel_options.tls_ca_pem = options.tls_ca_pem;
  channel_options.max_message_bytes = options.max_message_bytes;
  COLIBRI_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                           rpc::CreateChannel(channel_options));
  return std::unique_ptr<Client>(
      new Client(options, std::make_unique<Impl>(options, std::move(channel))));
}

absl::StatusOr<GenerateResult> Client::Generate(const v1::GenerateRequest& request,
                                                const ReplyCallback& on_reply,
                                                const std::function<bool()>& cancel) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, options_.generate_deadline);
  GenerateResult result;
  // Polls `cancel` until the call ends; started first, as creating the reader
  // waits for a connection (TryCancel is thread-safe and, before the call
  // exists, cancels it once it does).
  absl::Notification call_done;
  std::atomic<bool> cancelled_by_poll{false};
  std::thread poller;
  if (cancel) {
    poller = std::thread([&] {
      while (!call_done.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
        if (cancel()) {
          cancelled_by_poll.store(true);
          ctx.TryCancel();
          return;
        }
      }
    });
  }
  std::unique_ptr<grpc::ClientReader<v1::GenerateReply>> reader =
      impl_->stub->Generate(&ctx, request);
  v1::GenerateReply reply;
  while (reader->Read(&reply)) {
    if (reply.done()) {
      result.finish_reason = reply.finish_reason();
      result.stats = reply.stats();
    } else {
      result.tokens.push_back(reply.token());
    }
    result.text += reply.text();
    if (reply.has_chat()) {
      v1::ChatDelta& chat = result.chat;
      chat.mutable_content()->append(reply.chat().content());
      chat.mutable_reasoning_content()->append(reply.chat().reasoning_content());
      for (const v1::ToolCall& call : reply.chat().tool_calls()) *chat.add_tool_calls() = call;
    }
    if (on_reply && !on_reply(reply)) {
      result.cancelled = true;
      ctx.TryCancel();
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  call_done.Notify();
  if (poller.joinable()) poller.join();
  if (cancelled_by_poll.load()) result.cancelled = true;
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

absl::StatusOr<bool> Client::Health(const std::string& service) {
  grpc::ClientContext ctx;
  impl_->Prepare(&ctx, options_.call_deadline);
  return rpc::CheckHealth(&impl_->generic, &ctx, service,
                          absl::StrCat("coordinator ", address()));
}

}  // namespace colibri::client
