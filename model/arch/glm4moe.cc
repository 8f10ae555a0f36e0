// GLM-4.5 / GLM-4.6 (glm4moe): biases on q/k/v, optional per-head q/k RMSNorm
// (by tensor presence), partial NEOX RoPE over rope.dimension_count of the head,
// leading dense layers, sigmoid routing with the exp_probs_b selection bias,
// renormalised and scaled top-k weights and an ungated shared expert. The
// FFN norm is named post_attention_norm. NextN/MTP blocks appended to real
// files (nextn_predict_layers) stay in the file and are not run.
#include "common/status_macros.h"
#include "model/arch/arch_util.h"
#include "model/arch/model_config.h"

namespace colibri::arch {
namespace {

absl::Status FinishGlm4Moe(const gguf::GgufFile& file, ModelConfig* c) {
  c->rope_type = RopeType::kNeox;
  c->qkv_bias = true;
  c->qk_norm =
      file.FindTensor("blk.0.attn_q_norm.weight") != nullptr ? QkNorm::kPerHead : QkNorm::kNone;
  COLIBRI_RETURN_IF_ERROR(DropNextnLayers(file, c));
  COLIBRI_RETURN_IF_ERROR(ReadDeepseekRouting(file, /*default_sigmoid=*/true, c));
  COLIBRI_RETURN_IF_ERROR(ReadRopeScaling(file, c));
  return absl::OkStatus();
}

}  // namespace

const ArchSpec& Glm4MoeArch() {
  static const ArchSpec spec{"glm4moe", &FinishGlm4Moe};
  return spec;
}

}  // namespace colibri::arch
