// What the gRPC clients (the coordinator's node client, the Inference client
// library) share: the channel, per-call context, status conversion and the
// grpc.health.v1 check without generated health stubs.
#ifndef COLIBRI_RPC_CLIENT_SUPPORT_H_
#define COLIBRI_RPC_CLIENT_SUPPORT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace colibri::rpc {

struct ChannelOptions {
  // host:port. Required.
  std::string address;
  // TLS with these PEM contents (ca empty: the system roots; cert and key
  // empty: no client certificate). Default: false (plaintext).
  bool use_tls = false;
  std::string tls_ca_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // Largest message sent or received. Default: 64 MiB.
  int max_message_bytes = 64 << 20;
  // Keepalive pings, also on an idle channel. Defaults: 30 s and 10 s.
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Reconnect backoff bounds; zero leaves gRPC's defaults. Default: zero.
  absl::Duration min_reconnect_backoff = absl::ZeroDuration();
  absl::Duration max_reconnect_backoff = absl::ZeroDuration();
};

// A channel (not yet connected). InvalidArgument for bad options.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const ChannelOptions& options);

// Sets the call's deadline and, when `token` is not empty, the metadata
// "authorization: Bearer <token>".
void PrepareContext(grpc::ClientContext* context, absl::Duration deadline,
                    const std::string& token);

// The gRPC status as an absl::Status whose message starts "<peer> <method>: ".
absl::Status FromGrpc(const grpc::Status& status, absl::string_view peer,
                      absl::string_view method);

// grpc.health.v1.Health/Check of `service` ("" for the whole server) through
// the generic stub: true when SERVING. The call's error as FromGrpc gives it;
// DataLoss for an unreadable reply; InvalidArgument for a service name longer
// than 127 bytes.
absl::StatusOr<bool> CheckHealth(grpc::GenericStub* stub, grpc::ClientContext* context,
                                 const std::string& service, absl::string_view peer);

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_CLIENT_SUPPORT_H_
