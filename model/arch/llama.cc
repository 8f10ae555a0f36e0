// `llama` with routed experts: Mixtral 8x7B / 8x22B. Adjacent-pair (NORM) RoPE
// over rope.dimension_count dims, no biases, softmax router with renormalised
// top-k weights (the same as a softmax over the top-k logits). Expert width is
// feed_forward_length. Both expert layouts are accepted: merged
// blk.N.ffn_{gate,up,down}_exps and the older per-expert blk.N.ffn_gate.E.
#include "common/status_macros.h"
#include "model/arch/arch_util.h"
#include "model/arch/model_config.h"

namespace colibri::arch {
namespace {

absl::Status FinishLlamaMoe(const gguf::GgufFile& file, ModelConfig* c) {
  c->rope_type = RopeType::kNorm;
  c->norm_topk = true;
  COLIBRI_ASSIGN_OR_RETURN(c->n_ff_exp, ReadExpertWidth(file, c->arch, "feed_forward_length"));
  return absl::OkStatus();
}

}  // namespace

const ArchSpec& LlamaMoeArch() {
  static const ArchSpec spec{"llama", &FinishLlamaMoe};
  return spec;
}

}  // namespace colibri::arch
