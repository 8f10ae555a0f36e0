// gpt-oss (openai gpt-oss-20b / -120b): biases on q/k/v and the attention
// output, one attention-sink logit per head, sliding-window attention on even
// layers (attention.sliding_window), NEOX RoPE with YaRN including its
// magnitude 1 + 0.1 ln s, a router with a bias whose chosen top-k logits are
// softmaxed, experts with per-expert biases and the clamped SwiGLU
// (alpha 1.702, limit 7). No shared expert; output.weight is required.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/arch/arch_util.h"
#include "model/arch/model_config.h"

namespace colibri::arch {
namespace {

constexpr int kSwaPattern = 2;  // llama.cpp's fixed pattern for gpt-oss

absl::Status FinishGptOss(const gguf::GgufFile& file, ModelConfig* c) {
  c->rope_type = RopeType::kNeox;
  c->qkv_bias = true;
  c->attn_output_bias = true;
  c->attn_sinks = true;
  c->router_bias = true;
  c->softmax_topk = true;
  c->expert_bias = true;
  c->swiglu_oai = true;
  c->swa_pattern = kSwaPattern;
  COLIBRI_ASSIGN_OR_RETURN(c->n_ff_exp,
                           ReadExpertWidth(file, c->arch, "expert_feed_forward_length"));
  COLIBRI_ASSIGN_OR_RETURN(c->sliding_window,
                           ReadRequiredInt(file, c->arch, "attention.sliding_window"));
  if (c->sliding_window <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", c->arch,
                                                   ".attention.sliding_window ", c->sliding_window,
                                                   " must be > 0"));
  }
  if (file.FindTensor("output.weight") == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": required tensor output.weight is missing (gpt-oss does not tie it)"));
  }
  COLIBRI_RETURN_IF_ERROR(ReadRopeScaling(file, c));
  return absl::OkStatus();
}

}  // namespace

const ArchSpec& GptOssArch() {
  static const ArchSpec spec{"gpt-oss", &FinishGptOss};
  return spec;
}

}  // namespace colibri::arch
