// Finding expert nodes by DNS: one name whose A/AAAA records are the nodes,
// as a Kubernetes headless Service gives for the pods of a StatefulSet.
#ifndef COLIBRI_COORDINATOR_CLUSTER_NODE_DISCOVERY_H_
#define COLIBRI_COORDINATOR_CLUSTER_NODE_DISCOVERY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::coordinator {

// Resolves "NAME:PORT" ("[v6-literal]:PORT" works too) to one "ip:port" (or
// "[ip]:port") per distinct address, sorted so that every coordinator sees the
// same order. InvalidArgument for a malformed argument; NotFound when the name
// has no addresses; Unavailable when the resolver fails.
absl::StatusOr<std::vector<std::string>> ResolveNodeAddresses(absl::string_view name_port);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLUSTER_NODE_DISCOVERY_H_
