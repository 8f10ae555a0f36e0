#include "model/arch/arch_util.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/arch/model_config.h"

namespace colibri::arch {

absl::StatusOr<int> ExpertWidthFromTensors(const gguf::GgufFile& file) {
  for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_gate.0.weight"}) {
    const gguf::TensorInfo* t = file.FindTensor(name);
    if (t != nullptr && t->dims.size() >= 2) return static_cast<int>(t->dims[1]);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file.path(), ": no routed expert tensors (blk.0.ffn_gate_exps.weight)"));
}

absl::StatusOr<int> ReadExpertWidth(const gguf::GgufFile& file, const std::string& arch,
                                    const char* suffix) {
  absl::StatusOr<int> width = ReadOptionalInt(file, arch, suffix, -1);
  if (!width.ok()) return width.status();
  if (*width > 0) return *width;
  return ExpertWidthFromTensors(file);
}

absl::Status ReadDeepseekRouting(const gguf::GgufFile& file, bool default_sigmoid, ModelConfig* c) {
  const std::string& a = c->arch;
  COLIBRI_ASSIGN_OR_RETURN(c->n_ff_exp, ReadExpertWidth(file, a, "expert_feed_forward_length"));
  COLIBRI_ASSIGN_OR_RETURN(c->n_ff, ReadOptionalInt(file, a, "feed_forward_length", 0));
  COLIBRI_ASSIGN_OR_RETURN(c->n_layer_dense_lead,
                           ReadOptionalInt(file, a, "leading_dense_block_count", 0));
  COLIBRI_ASSIGN_OR_RETURN(const int gating,
                           ReadOptionalInt(file, a, "expert_gating_func", default_sigmoid ? 2 : 1));
  if (gating != 1 && gating != 2) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", a, ".expert_gating_func ",
                                                   gating, " is not 1 (softmax) or 2 (sigmoid)"));
  }
  c->gating = gating == 2 ? Gating::kSigmoid : Gating::kSoftmax;
  COLIBRI_ASSIGN_OR_RETURN(c->norm_topk,
                           file.GetBoolOr(absl::StrCat(a, ".expert_weights_norm"), false));
  COLIBRI_ASSIGN_OR_RETURN(c->expert_weights_scale,
                           ReadOptionalFloat(file, a, "expert_weights_scale", 1.0f));
  COLIBRI_ASSIGN_OR_RETURN(c->n_expert_groups, ReadOptionalInt(file, a, "expert_group_count", 1));
  COLIBRI_ASSIGN_OR_RETURN(c->n_group_used, ReadOptionalInt(file, a, "expert_group_used_count", 1));
  COLIBRI_ASSIGN_OR_RETURN(const int n_shared, ReadOptionalInt(file, a, "expert_shared_count", 0));
  c->shared_expert = n_shared > 0;
  c->n_ff_shexp = n_shared * c->n_ff_exp;
  c->selection_bias =
      file.FindTensor(absl::StrCat("blk.", c->n_layer_dense_lead, ".exp_probs_b.bias")) != nullptr;
  return absl::OkStatus();
}

absl::Status ReadRopeScaling(const gguf::GgufFile& file, ModelConfig* c) {
  const std::string& a = c->arch;
  COLIBRI_ASSIGN_OR_RETURN(const std::string type,
                           file.GetStringOr(absl::StrCat(a, ".rope.scaling.type"), "none"));
  COLIBRI_ASSIGN_OR_RETURN(const float factor,
                           ReadOptionalFloat(file, a, "rope.scaling.factor", 1.0f));
  if (type == "none") return absl::OkStatus();
  if (type == "linear") {
    if (!(factor > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": rope.scaling.factor ", factor, " must be > 0"));
    }
    c->rope_freq_scale = 1.0f / factor;
    return absl::OkStatus();
  }
  if (type != "yarn") {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", a, ".rope.scaling.type '",
                                                   gguf::EscapeForMessage(type), "' is not none, linear or yarn"));
  }
  c->yarn = true;
  c->yarn_factor = factor;
  COLIBRI_ASSIGN_OR_RETURN(c->yarn_orig_ctx,
                           ReadOptionalInt(file, a, "rope.scaling.original_context_length", 0));
  COLIBRI_ASSIGN_OR_RETURN(c->yarn_log_mul,
                           ReadOptionalFloat(file, a, "rope.scaling.yarn_log_multiplier", 0.0f));
  if (factor > 0) {
    c->rope_freq_scale = 1.0f / factor;
    c->rope_magnitude = 1.0f + 0.1f * std::log(factor);  // families may move it elsewhere
  }
  return absl::OkStatus();
}

absl::Status DropNextnLayers(const gguf::GgufFile& file, ModelConfig* c) {
  COLIBRI_ASSIGN_OR_RETURN(c->n_nextn_layer,
                           ReadOptionalInt(file, c->arch, "nextn_predict_layers", 0));
  if (c->n_nextn_layer >= c->n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": nextn_predict_layers ",
                                                   c->n_nextn_layer,
                                                   " leaves no layer of block_count ", c->n_layer));
  }
  c->n_layer -= c->n_nextn_layer;
  return absl::OkStatus();
}

}  // namespace colibri::arch
