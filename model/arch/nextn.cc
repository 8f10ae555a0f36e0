#include "model/arch/nextn.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace colibri::arch {

absl::StatusOr<int> ToNextnConfig(const gguf::GgufFile& file, int index, ModelConfig* config) {
  if (index < 0 || index >= config->n_nextn_layer) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": has no NextN/MTP block ", index,
                                                   " (", config->arch, ".nextn_predict_layers is ",
                                                   config->n_nextn_layer, ")"));
  }
  const int block = config->n_layer + index;
  config->n_layer = 1;
  config->n_nextn_layer = 0;
  config->n_layer_dense_lead = 0;
  config->sliding_window = 0;
  config->swa_pattern = 0;
  return block;
}

}  // namespace colibri::arch
