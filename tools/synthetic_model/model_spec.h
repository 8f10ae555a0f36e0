// The shape of a synthetic MoE model, its named presets, and the GGUF layout
// (metadata keys and tensor list) that llama.cpp uses for each architecture.
#ifndef COLIBRI_SCRIPTS_SYNTHETIC_MODEL_MODEL_SPEC_H_
#define COLIBRI_SCRIPTS_SYNTHETIC_MODEL_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/gguf/gguf_writer.h"
#include "model/ops/tensor_type.h"
#include "tools/synthetic_model/byte_level_bpe.h"

namespace colibri::synthetic {

// general.architecture values.
enum class Architecture {
  kQwen3Moe,   // per-head q/k RMSNorm [head_dim]; no biases
  kQwen2Moe,   // q/k/v biases; a shared expert with a sigmoid gate
  kLlama,      // Mixtral layout: experts in feed_forward_length, rope.dimension_count
  kOlmoe,      // q/k RMSNorm over the whole projection
  kDeepseek2,  // MLA (compressed q and kv), leading dense layers, grouped sigmoid routing,
               // shared experts (DeepSeek-V3/R1, Kimi-K2)
  kGlm4Moe,    // GLM-4.5/4.6: q/k/v biases, partial RoPE (half the head), leading dense
               // layers, sigmoid routing with exp_probs_b, shared experts, FFN norm named
               // post_attention_norm
};

const char* ArchitectureName(Architecture arch);  // "qwen3moe", ...
// InvalidArgument listing the known names if `name` is none of them.
absl::StatusOr<Architecture> ParseArchitecture(absl::string_view name);

// Defaults are the `demo` preset.
struct ModelSpec {
  // Default: kQwen3Moe.
  Architecture arch = Architecture::kQwen3Moe;
  // Transformer blocks. Default: 4.
  int n_layer = 4;
  // Residual width. Default: 256.
  int n_embd = 256;
  // Query heads. Default: 8.
  int n_head = 8;
  // Key/value heads; must divide n_head. Default: 2.
  int n_head_kv = 2;
  // Width of one head (q, k and v); even. May differ from n_embd / n_head.
  // Default: 64.
  int head_dim = 64;
  // Routed experts per layer. Default: 16.
  int n_expert = 16;
  // Experts each token uses; <= n_expert. Default: 4.
  int n_expert_used = 4;
  // Hidden width of one routed expert. Default: 256.
  int n_ff_exp = 256;
  // Hidden width of the shared expert; qwen2moe only (and required there), 0
  // for the other architectures. Default: 0.
  int n_ff_shexp = 0;
  // Training context written as <arch>.context_length. Default: 4096.
  int n_ctx = 4096;
  // Tokenizer size to train to (256 bytes + merges + <|endoftext|>); the
  // built-in text supports about 4200. Default: 4096.
  int vocab_size = 4096;
  // Default: 1e6 (Qwen's value).
  float rope_freq_base = 1e6f;
  // Default: 1e-6.
  float rms_eps = 1e-6f;
  // Omit output.weight (the output projection reuses token_embd). Default: false.
  bool tied_embeddings = false;

  // deepseek2 only (0 for the other architectures). head_dim is the query/key
  // head (qk_nope + qk_rope) and n_head_kv must be 1 (MLA). Default: 0.
  int q_lora_rank = 0;   // 0: plain attn_q
  int kv_lora_rank = 0;  // the latent the KV cache holds (plus qk_rope_dim)
  int qk_rope_dim = 0;   // rotated part of a query/key head
  int v_head_dim = 0;    // value head width
  int n_group = 0;       // expert groups (1: no group limit)
  int n_group_used = 0;  // groups a token may choose from
  // deepseek2 and glm4moe (0 for the other architectures). Default: 0.
  int n_shared_exp = 0;  // shared experts, each n_ff_exp wide
  int n_dense_lead = 0;  // leading dense layers (ffn_gate/up/down)
  int n_ff_dense = 0;    // their FFN width
  // NextN/MTP blocks after the n_layer main layers (deepseek2 and glm4moe), as
  // the GLM-4.5 and DeepSeek-V3 conversions carry them (model/arch/nextn.h):
  // counted in block_count, <arch>.nextn_predict_layers, each a MoE block
  // plus nextn.{eh_proj,enorm,hnorm,shared_head_norm}. Default: 0.
  int n_nextn = 0;

  bool is_moe_layer(int layer) const { return layer >= n_dense_lead; }

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }

  // InvalidArgument naming the first inconsistent field.
  absl::Status Validate() const;
};

struct Preset {
  const char* name;
  const char* description;
  ModelSpec spec;
};

// demo, qwen3-30b-a3b, qwen1.5-moe-a2.7b, mixtral-8x7b, olmoe-1b-7b, deepseek-v3,
// glm-4.5-air.
absl::Span<const Preset> Presets();
// InvalidArgument listing the presets if there is none called `name`.
absl::StatusOr<ModelSpec> FindPreset(absl::string_view name);

// One tensor to generate: N(mean, stddev) values, stored as `type`.
struct TensorPlan {
  std::string name;
  std::vector<int64_t> dims;  // GGML order: dims[0] is the row length
  ops::TensorType type;
  float mean = 0.0f;
  float stddev = 0.0f;

  int64_t rows() const;
  int64_t n_elements() const { return rows() * dims[0]; }
  uint64_t n_bytes() const;
};

// `requested` if a row of row_length fits its blocks, else Q8_0 if that fits,
// else F32 (what llama-quantize does in spirit for odd shapes).
ops::TensorType StorageType(ops::TensorType requested, int64_t row_length);

// Every tensor of the model in file order: token_embd, output_norm, output, then
// per block attention, norms, router and experts; n_vocab is the trained
// vocabulary's size (at most spec.vocab_size). Weight matrices use
// `matrix_type` (or the StorageType fallback; one line per fallback is appended
// to *notes, which may be null); norms, biases and routers are F32. Weights are
// N(0, 1/sqrt(row length)) (token_embd N(0, 1): its input is one-hot), norms
// 1 + 0.1 N(0, 1), biases 0.02 N(0, 1).
std::vector<TensorPlan> PlanTensors(const ModelSpec& spec, int n_vocab, ops::TensorType matrix_type,
                                    std::vector<std::string>* notes);

// llama_ftype (general.file_type) of a model whose big matrices are `type`:
// F32 0, F16 1, Q4_0 2, Q8_0 7, ...; a K type maps to its _S variant (Q4_K to
// Q4_K_S = 14), the name llama.cpp gives a file of mostly that type.
uint32_t LlamaFileType(ops::TensorType type);

// Writes general.*, <arch>.* and tokenizer.* keys.
void AddMetadata(const ModelSpec& spec, ops::TensorType matrix_type, const std::string& name,
                 const BpeVocabulary& vocab, gguf::GgufWriter* writer);

}  // namespace colibri::synthetic

#endif  // COLIBRI_SCRIPTS_SYNTHETIC_MODEL_MODEL_SPEC_H_
