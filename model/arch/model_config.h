// Hyper-parameters and layer conventions of a MoE transformer, read from GGUF
// metadata.
//
// Every supported family (general.architecture) has one file under model/arch/
// that reads its keys and states its conventions (RoPE layout, q/k norms, biases,
// top-k weight normalisation, shared expert) as fields of ModelConfig; the
// forward pass (model/arch/session.h) is written once over these fields.
#ifndef COLIBRI_MODEL_ARCH_MODEL_CONFIG_H_
#define COLIBRI_MODEL_ARCH_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf/gguf_file.h"

namespace colibri::arch {

// How RoPE pairs the dimensions of a head.
enum class RopeType {
  kNorm,  // adjacent pairs (2i, 2i+1): llama / Mixtral
  kNeox,  // halves (i, i + n_rot/2): Qwen2, Qwen3, OLMoE
};

// How router logits become expert probabilities.
enum class Gating {
  kSoftmax,  // softmax over all experts (expert_gating_func 1, or absent)
  kSigmoid,  // independent sigmoid per expert (expert_gating_func 2)
};

// Attention layout.
enum class AttentionKind {
  kStandard,  // q/k/v projections, GQA
  kMla,       // deepseek2 Multi-head Latent Attention (compressed KV latent)
};

// RMSNorm applied to q and k after projection, before RoPE.
enum class QkNorm {
  kNone,
  kPerHead,  // weight [head_dim], applied to each head (Qwen3)
  kWhole,    // weight [n_head * head_dim], over the whole projection (OLMoE)
};

struct ModelConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name, may be empty

  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // per-head width of q and k
  int head_dim_v = 0;
  int n_ctx_train = 0;
  int n_vocab = 0;  // rows of token_embd

  float rms_eps = 1e-6f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  int n_rot = 0;  // rotated dimensions per head (<= head_dim)
  // YaRN context extension (rope.scaling.type = yarn): frequencies are blended
  // between base/s and base by a ramp over [yarn_corr_low, yarn_corr_high]
  // pairs, and cos/sin are multiplied by rope_magnitude.
  bool yarn = false;
  float yarn_factor = 1.0f;     // s = rope.scaling.factor
  int yarn_orig_ctx = 0;        // rope.scaling.original_context_length
  float yarn_log_mul = 0.0f;    // rope.scaling.yarn_log_multiplier (0: absent)
  float rope_magnitude = 1.0f;  // multiplies cos and sin
  // Softmax scale of q·k. 0 means 1 / sqrt(head_dim).
  float kq_scale = 0.0f;
  RopeType rope_type = RopeType::kNorm;
  QkNorm qk_norm = QkNorm::kNone;
  bool qkv_bias = false;

  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;        // routed expert width
  bool norm_topk = false;  // renormalise the top-k weights to sum to 1
  bool shared_expert = false;
  int n_ff_shexp = 0;               // shared expert width
  bool shared_expert_gate = false;  // sigmoid(x · ffn_gate_inp_shexp) scales it

  // Routing beyond softmax top-k (deepseek2, glm4moe).
  Gating gating = Gating::kSoftmax;
  bool selection_bias = false;        // blk.N.exp_probs_b.bias: added to choose, not to weight
  int n_expert_groups = 1;            // expert_group_count: consecutive groups of experts
  int n_group_used = 1;               // expert_group_used_count: groups a token may use
  float expert_weights_scale = 1.0f;  // multiplies the final weights (0 or 1: none)

  // Layers 0 .. n_layer_dense_lead - 1 have a dense FFN of width n_ff instead
  // of experts (leading_dense_block_count).
  int n_layer_dense_lead = 0;
  int n_ff = 0;
  // NextN/MTP blocks appended by the file (nextn_predict_layers): counted in
  // block_count, not in n_layer, never run.
  int n_nextn_layer = 0;

  // Multi-head Latent Attention (attention == kMla). head_dim is then
  // key_length_mla (qk_nope + n_rot), head_dim_v value_length_mla; the KV cache
  // holds one row of kv_lora_rank + n_rot floats per token.
  AttentionKind attention = AttentionKind::kStandard;
  int q_lora_rank = 0;  // 0: plain attn_q
  int kv_lora_rank = 0;

  // gpt-oss. Layers with il % swa_pattern == 0 attend to the last
  // sliding_window positions only (query t sees key j iff 0 <= t - j < window).
  int sliding_window = 0;  // 0: every layer attends to the whole context
  int swa_pattern = 0;
  bool attn_output_bias = false;  // blk.N.attn_output.bias
  bool attn_sinks = false;        // blk.N.attn_sinks.weight: one logit per head, no value
  bool router_bias = false;       // blk.N.ffn_gate_inp.bias added to the router logits
  bool softmax_topk = false;      // weights = softmax over the chosen k logits
  bool expert_bias = false;       // blk.N.ffn_{gate,up,down}_exps.bias, per expert
  bool swiglu_oai = false;        // clamped SwiGLU of gpt-oss (moe::Activation::kSwigluOai)

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  int v_dim() const { return n_head_kv * head_dim_v; }
  int qk_nope() const { return head_dim - n_rot; }  // MLA: non-rotated part of a head
  bool is_dense_layer(int il) const { return il < n_layer_dense_lead; }
  bool is_window_layer(int il) const {
    return sliding_window > 0 && swa_pattern > 0 && il % swa_pattern == 0;
  }
  float attention_scale() const;  // kq_scale, or 1 / sqrt(head_dim)
  // Floats the KV cache keeps per token and layer (K and V together): for MLA
  // the latent row, else kv_dim + v_dim.
  int64_t kv_cache_floats_per_token() const;
  // What the same model would keep with K and V expanded per head
  // (n_head * (head_dim + head_dim_v) for MLA; equal to the above otherwise).
  int64_t kv_expanded_floats_per_token() const;
};

// The per-family part of reading a config: conventions and family-only keys.
// Called after the common keys are read into *config.
struct ArchSpec {
  const char* name;  // general.architecture value
  absl::Status (*finish_config)(const gguf::GgufFile& file, ModelConfig* config);
};

const ArchSpec& Qwen3MoeArch();
const ArchSpec& Qwen2MoeArch();
const ArchSpec& LlamaMoeArch();
const ArchSpec& OlmoeArch();
const ArchSpec& Glm4MoeArch();
const ArchSpec& Deepseek2Arch();
const ArchSpec& GptOssArch();

// Names of the supported architectures, for error messages and --help.
std::vector<std::string> SupportedArchitectures();

// Reads and checks the config. InvalidArgument for an unsupported architecture
// (listing the supported ones), a missing required key (naming it) or
// inconsistent values.
absl::StatusOr<ModelConfig> ReadModelConfig(const gguf::GgufFile& file);

// Helpers for family files: "<arch>.<suffix>".
absl::StatusOr<int> ReadRequiredInt(const gguf::GgufFile& file, const std::string& arch,
                                    const char* suffix);
absl::StatusOr<int> ReadOptionalInt(const gguf::GgufFile& file, const std::string& arch,
                                    const char* suffix, int fallback);
absl::StatusOr<float> ReadOptionalFloat(const gguf::GgufFile& file, const std::string& arch,
                                        const char* suffix, float fallback);

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_MODEL_CONFIG_H_
