// DeepSeek-V2/V3/R1 and Kimi-K2 (deepseek2): Multi-head Latent Attention with
// the compressed q path (attn_q_a, attn_q_a_norm, attn_q_b) or plain attn_q
// (q_lora_rank 0), the KV latent attn_kv_a_mqa + attn_kv_a_norm and the split
// attn_k_b / attn_v_b applied in the absorbed form; NORM RoPE on the rope part
// of each head only, YaRN whose attention factor goes into the softmax scale;
// leading dense layers, softmax or sigmoid routing, the exp_probs_b selection
// bias, group-limited top-k, renormalisation, expert_weights_scale and
// ungated shared experts.
//
// Only the split MLA layout (key_length_mla present) is supported; legacy
// files with one attn_kv_b are refused by the missing key.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/arch/arch_util.h"
#include "model/arch/model_config.h"

namespace colibri::arch {
namespace {

absl::Status FinishDeepseek2(const gguf::GgufFile& file, ModelConfig* c) {
  const std::string& a = c->arch;
  c->rope_type = RopeType::kNorm;
  c->attention = AttentionKind::kMla;
  COLIBRI_RETURN_IF_ERROR(DropNextnLayers(file, c));
  COLIBRI_RETURN_IF_ERROR(ReadDeepseekRouting(file, /*default_sigmoid=*/false, c));
  COLIBRI_RETURN_IF_ERROR(ReadRopeScaling(file, c));
  COLIBRI_ASSIGN_OR_RETURN(c->q_lora_rank, ReadOptionalInt(file, a, "attention.q_lora_rank", 0));
  COLIBRI_ASSIGN_OR_RETURN(c->kv_lora_rank, ReadRequiredInt(file, a, "attention.kv_lora_rank"));
  // The cache view (key_length = kv_lora + rope, one KV head) is what the file
  // states as key_length / value_length; the per-head shapes are the _mla keys.
  COLIBRI_ASSIGN_OR_RETURN(c->head_dim, ReadRequiredInt(file, a, "attention.key_length_mla"));
  COLIBRI_ASSIGN_OR_RETURN(c->head_dim_v, ReadRequiredInt(file, a, "attention.value_length_mla"));
  if (c->n_head_kv != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": ", a, ".attention.head_count_kv is ", c->n_head_kv, ", MLA needs 1"));
  }
  // The attention factor of YaRN moves from the rotation into the softmax
  // scale: cos/sin keep magnitude 1 and q·k is scaled by mscale^2.
  float mscale = 1.0f;
  if (c->yarn) mscale = 1.0f + c->yarn_log_mul * std::log(c->yarn_factor);
  c->rope_magnitude = 1.0f;
  c->kq_scale = mscale * mscale / std::sqrt(static_cast<float>(c->head_dim));
  return absl::OkStatus();
}

}  // namespace

const ArchSpec& Deepseek2Arch() {
  static const ArchSpec spec{"deepseek2", &FinishDeepseek2};
  return spec;
}

}  // namespace colibri::arch
