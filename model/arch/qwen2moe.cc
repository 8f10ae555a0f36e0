// Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): NEOX RoPE, biases on q/k/v, a
// softmax router whose top-k weights are NOT renormalised, and a shared expert
// whose output is scaled by sigmoid(x · ffn_gate_inp_shexp).
#include "common/status_macros.h"
#include "model/arch/arch_util.h"
#include "model/arch/model_config.h"

namespace colibri::arch {
namespace {

absl::Status FinishQwen2Moe(const gguf::GgufFile& file, ModelConfig* c) {
  c->rope_type = RopeType::kNeox;
  c->qkv_bias = true;
  c->norm_topk = false;
  c->shared_expert = true;
  c->shared_expert_gate = true;
  COLIBRI_ASSIGN_OR_RETURN(c->n_ff_exp, ReadExpertWidth(file, c->arch, "expert_feed_forward_length"));
  COLIBRI_ASSIGN_OR_RETURN(c->n_ff_shexp,
                           ReadOptionalInt(file, c->arch, "expert_shared_feed_forward_length", -1));
  if (c->n_ff_shexp <= 0) {
    const gguf::TensorInfo* t = file.FindTensor("blk.0.ffn_gate_shexp.weight");
    if (t == nullptr || t->dims.size() != 2) {
      return absl::InvalidArgumentError(
          file.path() + ": qwen2moe needs expert_shared_feed_forward_length or "
                        "blk.0.ffn_gate_shexp.weight");
    }
    c->n_ff_shexp = static_cast<int>(t->dims[1]);
  }
  return absl::OkStatus();
}

}  // namespace

const ArchSpec& Qwen2MoeArch() {
  static const ArchSpec spec{"qwen2moe", &FinishQwen2Moe};
  return spec;
}

}  // namespace colibri::arch
