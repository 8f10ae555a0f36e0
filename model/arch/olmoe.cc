// OLMoE (OLMoE-1B-7B): NEOX RoPE, RMSNorm over the whole q and k projections
// (weights [n_head * head_dim] and [n_head_kv * head_dim]) before RoPE, no
// biases, softmax router whose top-k weights are NOT renormalised. Expert width
// is feed_forward_length.
#include "common/status_macros.h"
#include "model/arch/arch_util.h"
#include "model/arch/model_config.h"

namespace colibri::arch {
namespace {

absl::Status FinishOlmoe(const gguf::GgufFile& file, ModelConfig* c) {
  c->rope_type = RopeType::kNeox;
  c->qk_norm = QkNorm::kWhole;
  c->norm_topk = false;
  COLIBRI_ASSIGN_OR_RETURN(c->n_ff_exp, ReadExpertWidth(file, c->arch, "feed_forward_length"));
  return absl::OkStatus();
}

}  // namespace

const ArchSpec& OlmoeArch() {
  static const ArchSpec spec{"olmoe", &FinishOlmoe};
  return spec;
}

}  // namespace colibri::arch
