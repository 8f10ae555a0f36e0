#include "expert_node/expert_key.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::expert_node {

absl::StatusOr<ExpertId> ParseExpertKey(const v1::ExpertKey& key) {
  COLIBRI_RETURN_IF_ERROR(ValidateFingerprint(key.model_fingerprint()));
  if (key.layer() < 0 || key.layer() > 99999 || key.expert() < 0 || key.expert() > 99999) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert key: layer ", key.layer(), " expert ", key.expert(), " out of range"));
  }
  return ExpertId{key.model_fingerprint(), key.layer(), key.expert()};
}

v1::ExpertKey ToExpertKey(const ExpertId& id) {
  v1::ExpertKey key;
  key.set_model_fingerprint(id.fingerprint);
  key.set_layer(id.layer);
  key.set_expert(id.expert);
  return key;
}

}  // namespace colibri::expert_node
