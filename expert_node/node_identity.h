// The expert node's default identity: a name that is unique per data folder
// and stable across restarts, so that two nodes on one host (or behind one
// hostname) never clash in placement, and a restarted node keeps its experts.
#ifndef COLIBRI_EXPERT_NODE_NODE_IDENTITY_H_
#define COLIBRI_EXPERT_NODE_NODE_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"

namespace colibri::expert_node {

// The id recorded in DATA_DIR/NODE_ID, or on first use a new one,
// "<hostname>-<8 random hex digits>", written there durably (temporary file,
// fsync, rename). Creates data_dir when missing. InvalidArgument for an
// empty or unreadable recorded id; Internal (with the path) for I/O errors.
absl::StatusOr<std::string> LoadOrCreateNodeId(const std::string& data_dir);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_NODE_IDENTITY_H_
