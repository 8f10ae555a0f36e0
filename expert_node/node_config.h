// Parsing and checking of the expert node's start-up settings (flag values
// arrive here as strings from main.cc).
#ifndef COLIBRI_EXPERT_NODE_NODE_CONFIG_H_
#define COLIBRI_EXPERT_NODE_NODE_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::expert_node {

// "4096", "512K", "512M", "4G", "1T" (binary multiples, optional "B"/"iB",
// case-insensitive; "1.5G" allowed). InvalidArgument otherwise or on overflow.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// True when a gRPC listen address ("host:port", "[v6]:port", "unix:...")
// can only be reached from this machine: 127.0.0.0/8, ::1, localhost, or a
// unix socket. Wildcards (0.0.0.0, [::]) and every other host are not.
bool IsLoopbackListenAddress(absl::string_view address);

// The host part of "host:port" / "[v6]:port" (brackets kept), or the whole
// address when it has no port.
std::string ListenHost(absl::string_view address);

// Reads a token file: its contents without surrounding whitespace.
// InvalidArgument when empty, NotFound / PermissionDenied when unreadable.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Reads a whole file (PEM certificates); NotFound when unreadable.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_NODE_CONFIG_H_
