// An expert's key on the wire (v1::ExpertKey) and in the node (ExpertId).
//
// Thread-safety: pure functions.
#ifndef COLIBRI_EXPERT_NODE_EXPERT_KEY_H_
#define COLIBRI_EXPERT_NODE_EXPERT_KEY_H_

#include "absl/status/statusor.h"
#include "colibri/v1/expert.pb.h"
#include "expert_node/expert_record.h"

namespace colibri::expert_node {

// The key as an id. InvalidArgument for a malformed fingerprint
// (ValidateFingerprint) or a layer or expert outside [0, 99999].
absl::StatusOr<ExpertId> ParseExpertKey(const v1::ExpertKey& key);

// The id as a key.
v1::ExpertKey ToExpertKey(const ExpertId& id);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_EXPERT_KEY_H_
