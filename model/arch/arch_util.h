// Small helpers shared by the family files of model/arch/.
#ifndef COLIBRI_MODEL_ARCH_ARCH_UTIL_H_
#define COLIBRI_MODEL_ARCH_ARCH_UTIL_H_

#include "absl/status/statusor.h"
#include "model/gguf/gguf_file.h"

namespace colibri::arch {

// Width of layer 0's routed experts as stored: dims[1] of blk.0.ffn_gate_exps
// (merged layout) or of blk.0.ffn_gate.0 (one tensor per expert). InvalidArgument
// when neither exists.
absl::StatusOr<int> ExpertWidthFromTensors(const gguf::GgufFile& file);

// The "<arch>.<suffix>" key if present, else ExpertWidthFromTensors.
absl::StatusOr<int> ReadExpertWidth(const gguf::GgufFile& file, const std::string& arch,
                                    const char* suffix);

struct ModelConfig;

// The routing keys of the DeepSeek-V3 style MoE (deepseek2, glm4moe):
// expert_gating_func (1 softmax, 2 sigmoid; absent: `default_gating`),
// expert_weights_norm, expert_weights_scale, expert_group_count /
// expert_group_used_count, leading_dense_block_count with feed_forward_length,
// the shared experts (expert_shared_count x expert_feed_forward_length, no
// gate) and the selection bias (present when blk.<first MoE layer>.exp_probs_b.bias
// exists). InvalidArgument for an unknown gating function.
absl::Status ReadDeepseekRouting(const gguf::GgufFile& file, bool default_sigmoid, ModelConfig* c);

// rope.scaling.{type,factor,original_context_length,yarn_log_multiplier}.
// Sets c->yarn for type "yarn", c->rope_freq_scale for "linear".
absl::Status ReadRopeScaling(const gguf::GgufFile& file, ModelConfig* c);

// Drops the nextn_predict_layers NextN/MTP blocks from c->n_layer.
absl::Status DropNextnLayers(const gguf::GgufFile& file, ModelConfig* c);

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_ARCH_UTIL_H_
