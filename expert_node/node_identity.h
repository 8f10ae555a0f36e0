// The expert node's default identity: a name that is unique per data folder
// and stable across restarts, so that two nodes on one host (or behind one
// hostname) never clash in placement, and a restarted node keeps its experts.
#ifndef COLIBRI_EXPERT_NODE_NODE_IDENTITY_H_
#define COLIBRI_EXPERT_NODE_NODE_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::expert_node {

// Longest node id; ids are 1..kMaxNodeIdBytes characters of [A-Za-z0-9._-].
inline constexpr size_t kMaxNodeIdBytes = 64;
// InvalidArgument (the id escaped) unless `id` follows the rule above.
absl::Status ValidateNodeId(absl::string_view id);

// The id recorded in DATA_DIR/NODE_ID, or on first use a new one,
// "<hostname>-<8 random hex digits>" (the hostname shortened and cleaned to
// fit the rule), written there durably (temporary file, fsync, rename).
// Creates data_dir when missing. InvalidArgument naming the file and the way
// out when the recorded id is damaged (empty, too long, not one word of
// [A-Za-z0-9._-]); Internal (with the path) for I/O errors.
absl::StatusOr<std::string> LoadOrCreateNodeId(const std::string& data_dir);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_NODE_IDENTITY_H_
