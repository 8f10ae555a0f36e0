// The shared auth token of a Colibri cluster: the one rule every binary
// applies to a token it is given (colibri-coordinator's --auth-token-file and
// --node-auth-token-file, colibri-expert-node's and colibri-client's
// --auth-token-file), and the reading of token files.
//
// Thread-safety: every function is thread-safe (no shared state).
#ifndef COLIBRI_RPC_AUTH_TOKEN_H_
#define COLIBRI_RPC_AUTH_TOKEN_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::rpc {

// Shortest token accepted, in bytes: `openssl rand -hex 32` gives 64, and
// `head -c 32 /dev/urandom | base64` 44.
inline constexpr size_t kMinAuthTokenBytes = 32;

// The placeholder shipped in the repository (k8s/base/token.example), public
// and so no protection.
inline constexpr absl::string_view kPlaceholderToken = "replace-me-with-openssl-rand-hex-32";

// OK for a token a cluster may use. InvalidArgument when it is empty, a
// placeholder (kPlaceholderToken, or any token containing "replace-me",
// "change-me" or "changeme" in any case) or shorter than kMinAuthTokenBytes.
// The message says why and how to make a token; it never contains the token.
absl::Status CheckAuthToken(absl::string_view token);

// Reads a token file: its contents without surrounding whitespace, checked
// by CheckAuthToken. NotFound when the file is unreadable; InvalidArgument
// from CheckAuthToken, with the message naming the file (never the token).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Reads a file of API keys, one per line (blank lines and lines starting with
// '#' are skipped), each checked by CheckAuthToken. NotFound when unreadable;
// InvalidArgument naming the file and line (never a key) for a bad key, a
// key given twice, or a file with no key.
absl::StatusOr<std::vector<std::string>> ReadKeyFile(const std::string& path);

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_AUTH_TOKEN_H_
