#include "rpc/client_support.h"

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "rpc/untrusted_text.h"

namespace colibri::rpc {
namespace {

int Millis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const ChannelOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("the address is empty");
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
  if (options.min_reconnect_backoff > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, Millis(options.min_reconnect_backoff));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, Millis(options.min_reconnect_backoff));
  }
  if (options.max_reconnect_backoff > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Millis(options.max_reconnect_backoff));
  }
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
  return channel;
}

void PrepareContext(grpc::ClientContext* context, absl::Duration deadline,
                    const std::string& token) {
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view peer,
                      absl::string_view method) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      absl::StrCat(peer, " ", method, ": ", EscapeUntrusted(status.error_message(), 1024)));
}

// No health proto needs generating: HealthCheckRequest{service} is field 1
// (bytes), and a SERVING reply is field 1 = 1, i.e. the bytes 08 01.
absl::StatusOr<bool> CheckHealth(grpc::GenericStub* stub, grpc::ClientContext* context,
                                 const std::string& service, absl::string_view peer) {
  if (service.size() > 127) return absl::InvalidArgumentError("health service name too long");
  std::string encoded;
  if (!service.empty()) {
    encoded.push_back('\x0a');
    encoded.push_back(static_cast<char>(service.size()));
    encoded += service;
  }
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);  // a ByteBuffer without slices is invalid
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub->UnaryCall(context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                  &response, [&](grpc::Status s) {
                    status = std::move(s);
                    done.Notify();
                  });
  done.WaitForNotification();
  absl::Status s = FromGrpc(status, peer, "Health/Check");
  if (!s.ok()) return s;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return absl::DataLossError(absl::StrCat(peer, " Health/Check: unreadable reply"));
  }
  std::string bytes;
  for (const grpc::Slice& piece : slices) {
    bytes.append(reinterpret_cast<const char*>(piece.begin()), piece.size());
  }
  return bytes == std::string("\x08\x01", 2);
}

}  // namespace colibri::rpc
