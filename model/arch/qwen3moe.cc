// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): NEOX RoPE, per-head RMSNorm on q
// and k, no attention biases, softmax router whose top-k weights are
// renormalised, no shared expert. Head size may differ from n_embd / n_head
// (attention.key_length).
#include "common/status_macros.h"
#include "model/arch/arch_util.h"
#include "model/arch/model_config.h"

namespace colibri::arch {
namespace {

absl::Status FinishQwen3Moe(const gguf::GgufFile& file, ModelConfig* c) {
  c->rope_type = RopeType::kNeox;
  c->qk_norm = QkNorm::kPerHead;
  c->norm_topk = true;
  COLIBRI_ASSIGN_OR_RETURN(c->n_ff_exp, ReadExpertWidth(file, c->arch, "expert_feed_forward_length"));
  return absl::OkStatus();
}

}  // namespace

const ArchSpec& Qwen3MoeArch() {
  static const ArchSpec spec{"qwen3moe", &FinishQwen3Moe};
  return spec;
}

}  // namespace colibri::arch
