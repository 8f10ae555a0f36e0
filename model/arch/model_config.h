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
  RopeType rope_type = RopeType::kNorm;
  QkNorm qk_norm = QkNorm::kNone;
  bool qkv_bias = false;

  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;          // routed expert width
  bool norm_topk = false;    // renormalise the top-k weights to sum to 1
  bool shared_expert = false;
  int n_ff_shexp = 0;        // shared expert width
  bool shared_expert_gate = false;  // sigmoid(x · ffn_gate_inp_shexp) scales it

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  int v_dim() const { return n_head_kv * head_dim_v; }
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

}  // namespace colibri::arch

#endif  // COLIBRI_MODEL_ARCH_MODEL_CONFIG_H_
