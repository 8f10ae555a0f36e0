// The bearer-token check done by gRPC's server auth filter, on a call's
// initial metadata, before the server reads any message of the call: an
// unauthenticated caller cannot make a server receive, allocate or parse its
// request body (the handlers' own token checks then only back this up).
//
// Thread-safety: the functions are thread-safe; the credentials they return
// are used by one grpc::ServerBuilder.
#ifndef COLIBRI_RPC_CALL_AUTH_H_
#define COLIBRI_RPC_CALL_AUTH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rpc/server_support.h"

namespace colibri::rpc {

// Method path prefixes that need no token: gRPC health checking and server
// reflection, so that probes and tools need no secret.
std::vector<std::string> DefaultOpenMethodPrefixes();

// Whether a call to `method` ("/package.Service/Method") with the
// `authorization` metadata value (empty when absent) may proceed: `token` is
// empty, the method starts with one of `open_prefixes`, or authorization is
// "Bearer <token>" (compared in constant time).
bool CallAllowed(absl::string_view method, absl::string_view authorization, absl::string_view token,
                 const std::vector<std::string>& open_prefixes);

// Server credentials (plaintext or TLS as MakeServerCredentials) whose calls
// are refused with UNAUTHENTICATED by CallAllowed's rule before any message
// is read. With an empty token, exactly MakeServerCredentials(tls). Errors as
// MakeServerCredentials.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTokenCheckedServerCredentials(
    const ServerTlsFiles& tls, const std::string& token,
    std::vector<std::string> open_prefixes = DefaultOpenMethodPrefixes());

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_CALL_AUTH_H_
