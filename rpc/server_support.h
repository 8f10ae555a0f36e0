// What the project's gRPC servers (colibri-expert-node, colibri-coordinator
// serve) share: the listen-address rule, PEM files, server
// credentials, transport settings and the bearer-token check (the token
// rule and token files: rpc/auth_token.h).
//
// Thread-safety: every function is thread-safe (no shared state).
#ifndef COLIBRI_RPC_SERVER_SUPPORT_H_
#define COLIBRI_RPC_SERVER_SUPPORT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace grpc {
class ServerContextBase;
class ServerBuilder;
class ServerCredentials;
class Status;
}  // namespace grpc

namespace colibri::rpc {

// True when a gRPC listen address ("host:port", "[v6]:port", "unix:...")
// can only be reached from this machine: 127.0.0.0/8, ::1, localhost, or a
// unix socket. Wildcards (0.0.0.0, [::]) and every other host are not.
bool IsLoopbackListenAddress(absl::string_view address);

// The host part of "host:port" / "[v6]:port" (brackets kept), or the whole
// address when it has no port.
std::string ListenHost(absl::string_view address);

// FailedPrecondition when `listen` is beyond loopback, no token is configured
// and `insecure` is not set: a server never accepts unauthenticated calls from
// the network unless asked to. `token_flag` names the flag in the message.
absl::Status CheckListenAllowed(absl::string_view listen, bool has_token, bool insecure,
                                absl::string_view token_flag = "--auth-token-file");

// The address a server bound: "host:port" for TCP listen addresses (with the
// port the OS chose for port 0), the listen address itself for "unix:" and
// "unix-abstract:" sockets (which have no port).
std::string BoundAddress(absl::string_view listen, int port);

// Splits an HTTP listen address "host:port" / "[v6]:port" into the host
// (brackets removed) and the port (0-65535). InvalidArgument naming `flag`
// otherwise (an empty host, no port).
absl::Status SplitHttpListen(absl::string_view listen, absl::string_view flag, std::string* host,
                             int* port);

// Reads a whole file (PEM certificates); NotFound when unreadable.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// PEM files of a server's TLS.
struct ServerTlsFiles {
  // Certificate chain and private key; TLS when both are set. Default: ""
  // (plaintext).
  std::string cert_file;
  std::string key_file;
  // CA whose client certificates are required and verified (needs cert and
  // key). Default: "" (no client certificates).
  std::string ca_file;
};

// Plaintext or TLS credentials from the files. InvalidArgument for half a
// key pair or a CA without one; NotFound for unreadable files.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& tls);

struct ServerTransportOptions {
  // Largest gRPC message received or sent. Default: 256 MiB.
  int max_message_bytes = 256 << 20;
  // Server keepalive ping interval / ack timeout. Default: 30 s / 10 s.
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
};

// Sets message size limits and keepalive on `builder`, and accepts client
// keepalive pings as often as every 10 s, also between calls.
void ConfigureServerBuilder(const ServerTransportOptions& options, grpc::ServerBuilder* builder);

// True when `token` is empty or the call carries "authorization: Bearer
// <token>" (compared in constant time). The token is never logged.
bool BearerTokenMatches(const grpc::ServerContextBase& context, absl::string_view token);

// True when `token` is empty or `authorization` (an HTTP Authorization
// header's value) is "Bearer <token>" (compared in constant time).
bool AuthorizationMatches(absl::string_view authorization, absl::string_view token);

// The status servers answer a call whose token is missing or wrong.
grpc::Status UnauthenticatedStatus();

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_SERVER_SUPPORT_H_
