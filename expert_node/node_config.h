// Parsing of the expert node's start-up settings (flag values arrive here as
// strings from main.cc). The listen-address rule and token files are in
// rpc/server_support.h, shared with the coordinator's server.
#ifndef COLIBRI_EXPERT_NODE_NODE_CONFIG_H_
#define COLIBRI_EXPERT_NODE_NODE_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::expert_node {

// "4096", "512K", "512M", "4G", "1T" (binary multiples, optional "B"/"iB",
// case-insensitive; "1.5G" allowed). InvalidArgument otherwise or on overflow.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// Checks an `--advertise` address: "host:port" or "[v6]:port" with a
// non-empty host (a name or an address others can dial, so not a wildcard)
// and a port in 1..65535. InvalidArgument naming the problem otherwise.
absl::Status ValidateAdvertiseAddress(absl::string_view address);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_NODE_CONFIG_H_
