#include "model/arch/model_config.h"

#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace colibri::arch {
namespace {

const ArchSpec* const kArchSpecs[] = {&Qwen3MoeArch(), &Qwen2MoeArch(), &LlamaMoeArch(),
                                      &OlmoeArch(),    &Glm4MoeArch(),  &Deepseek2Arch(),
                                      &GptOssArch()};

absl::Status Invalid(const gguf::GgufFile& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file.path(), ": ", what));
}

absl::StatusOr<int> ToInt(const gguf::GgufFile& file, const std::string& key, int64_t v) {
  if (v < 0 || v > std::numeric_limits<int>::max()) {
    return Invalid(file, absl::StrCat(key, " = ", v, " is out of range"));
  }
  return static_cast<int>(v);
}

// How many distinct N the tensor names "blk.N.<anything>" hold: the layers the
// file has weights for (NextN/MTP blocks included).
int64_t BlocksWithTensors(const gguf::GgufFile& file) {
  absl::flat_hash_set<int64_t> blocks;
  for (const gguf::TensorInfo& t : file.tensors()) {
    absl::string_view name = t.name;
    if (!absl::ConsumePrefix(&name, "blk.")) continue;
    const size_t dot = name.find('.');
    int64_t n = 0;
    if (dot != absl::string_view::npos && absl::SimpleAtoi(name.substr(0, dot), &n) && n >= 0) {
      blocks.insert(n);
    }
  }
  return static_cast<int64_t>(blocks.size());
}

// Dimension `axis` of tensor `name`, or -1 when the tensor is absent or has
// fewer dimensions (loading the weights then names what is missing).
int64_t TensorDim(const gguf::GgufFile& file, const std::string& name, size_t axis) {
  const gguf::TensorInfo* t = file.FindTensor(name);
  if (t == nullptr || t->dims.size() <= axis) return -1;
  return t->dims[axis];
}

// Header counts that size allocations (layers, heads, experts, embedding
// width) against the tensors that hold their weights, so that nothing is
// allocated for a count the file cannot back. `block_count` is the header's
// value, of which the c.n_layer blocks that are run must have tensors (NextN
// blocks are loaded, and checked, only when asked for).
absl::Status CheckCountsAgainstTensors(const gguf::GgufFile& file, const ModelConfig& c,
                                       int block_count) {
  const int64_t blocks = BlocksWithTensors(file);
  if (c.n_layer > blocks) {
    return Invalid(file, absl::StrCat(c.arch, ".block_count ", block_count,
                                      " but the file has tensors for ", blocks, " layers"));
  }
  // Products of counts stay within int: the forward pass indexes with them.
  const int64_t widths[] = {int64_t{c.n_head} * c.head_dim, int64_t{c.n_head} * c.head_dim_v,
                            int64_t{c.n_head_kv} * c.head_dim, int64_t{c.n_head_kv} * c.head_dim_v,
                            int64_t{c.kv_lora_rank} + c.n_rot};
  for (int64_t w : widths) {
    if (w > std::numeric_limits<int>::max()) {
      return Invalid(file, absl::StrCat("attention.head_count ", c.n_head, " x key/value length ",
                                        c.head_dim, "/", c.head_dim_v, " is out of range"));
    }
  }
  const int64_t embd_cols = TensorDim(file, "token_embd.weight", 0);
  if (embd_cols >= 0 && embd_cols != c.n_embd) {
    return Invalid(file, absl::StrCat(c.arch, ".embedding_length ", c.n_embd,
                                      " but token_embd.weight has rows of ", embd_cols));
  }
  const int64_t attn_out = TensorDim(file, "blk.0.attn_output.weight", 0);
  if (attn_out >= 0 && attn_out != int64_t{c.n_head} * c.head_dim_v) {
    return Invalid(file, absl::StrCat(c.arch, ".attention.head_count ", c.n_head, " x ",
                                      c.head_dim_v, " but blk.0.attn_output.weight has rows of ",
                                      attn_out));
  }
  const std::string router = absl::StrCat("blk.", c.n_layer_dense_lead, ".ffn_gate_inp.weight");
  const int64_t router_rows = TensorDim(file, router, 1);
  if (router_rows >= 0 && router_rows != c.n_expert) {
    return Invalid(file, absl::StrCat(c.arch, ".expert_count ", c.n_expert, " but ", router,
                                      " routes to ", router_rows, " experts"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> SupportedArchitectures() {
  std::vector<std::string> names;
  for (const ArchSpec* spec : kArchSpecs) names.emplace_back(spec->name);
  return names;
}

absl::StatusOr<int> ReadRequiredInt(const gguf::GgufFile& file, const std::string& arch,
                                    const char* suffix) {
  const std::string key = absl::StrCat(arch, ".", suffix);
  absl::StatusOr<int64_t> v = file.GetInt(key);
  if (absl::IsNotFound(v.status())) {
    return Invalid(file, absl::StrCat("required metadata key ", key, " is missing"));
  }
  if (!v.ok()) return v.status();
  return ToInt(file, key, *v);
}

absl::StatusOr<int> ReadOptionalInt(const gguf::GgufFile& file, const std::string& arch,
                                    const char* suffix, int fallback) {
  const std::string key = absl::StrCat(arch, ".", suffix);
  COLIBRI_ASSIGN_OR_RETURN(int64_t v, file.GetIntOr(key, fallback));
  return ToInt(file, key, v);
}

absl::StatusOr<float> ReadOptionalFloat(const gguf::GgufFile& file, const std::string& arch,
                                        const char* suffix, float fallback) {
  const std::string key = absl::StrCat(arch, ".", suffix);
  COLIBRI_ASSIGN_OR_RETURN(double v, file.GetFloatOr(key, fallback));
  if (!std::isfinite(v)) return Invalid(file, absl::StrCat(key, " = ", v, " is not finite"));
  return static_cast<float>(v);
}

float ModelConfig::attention_scale() const {
  return kq_scale > 0 ? kq_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

int64_t ModelConfig::kv_cache_floats_per_token() const {
  if (attention == AttentionKind::kMla) return kv_lora_rank + n_rot;
  return kv_dim() + v_dim();
}

int64_t ModelConfig::kv_expanded_floats_per_token() const {
  if (attention == AttentionKind::kMla) {
    return static_cast<int64_t>(n_head) * (head_dim + head_dim_v);
  }
  return kv_cache_floats_per_token();
}

absl::StatusOr<ModelConfig> ReadModelConfig(const gguf::GgufFile& file) {
  ModelConfig c;
  absl::StatusOr<std::string> arch = file.GetString("general.architecture");
  if (!arch.ok()) {
    return Invalid(file, absl::StrCat("general.architecture: ", arch.status().message()));
  }
  c.arch = *arch;
  const ArchSpec* spec = nullptr;
  for (const ArchSpec* s : kArchSpecs) {
    if (c.arch == s->name) spec = s;
  }
  if (spec == nullptr) {
    return Invalid(file, absl::StrCat("unsupported architecture '", gguf::EscapeForMessage(c.arch),
                                      "' (supported: ",
                                      absl::StrJoin(SupportedArchitectures(), ", "), ")"));
  }
  COLIBRI_ASSIGN_OR_RETURN(c.name, file.GetStringOr("general.name", ""));
  const std::string& a = c.arch;
  COLIBRI_ASSIGN_OR_RETURN(c.n_layer, ReadRequiredInt(file, a, "block_count"));
  COLIBRI_ASSIGN_OR_RETURN(c.n_embd, ReadRequiredInt(file, a, "embedding_length"));
  COLIBRI_ASSIGN_OR_RETURN(c.n_head, ReadRequiredInt(file, a, "attention.head_count"));
  COLIBRI_ASSIGN_OR_RETURN(c.n_head_kv,
                           ReadOptionalInt(file, a, "attention.head_count_kv", c.n_head));
  COLIBRI_ASSIGN_OR_RETURN(c.n_ctx_train, ReadRequiredInt(file, a, "context_length"));
  COLIBRI_ASSIGN_OR_RETURN(c.n_expert, ReadRequiredInt(file, a, "expert_count"));
  COLIBRI_ASSIGN_OR_RETURN(c.n_expert_used, ReadRequiredInt(file, a, "expert_used_count"));
  if (c.n_head <= 0 || c.n_embd <= 0 || c.n_layer <= 0) {
    return Invalid(file, "block_count, embedding_length and attention.head_count must be > 0");
  }
  const int default_head_dim = c.n_embd / c.n_head;
  COLIBRI_ASSIGN_OR_RETURN(c.head_dim,
                           ReadOptionalInt(file, a, "attention.key_length", default_head_dim));
  COLIBRI_ASSIGN_OR_RETURN(c.head_dim_v,
                           ReadOptionalInt(file, a, "attention.value_length", c.head_dim));
  COLIBRI_ASSIGN_OR_RETURN(c.n_rot, ReadOptionalInt(file, a, "rope.dimension_count", c.head_dim));

  COLIBRI_ASSIGN_OR_RETURN(
      double eps, file.GetFloatOr(absl::StrCat(a, ".attention.layer_norm_rms_epsilon"), 1e-6));
  c.rms_eps = static_cast<float>(eps);
  COLIBRI_ASSIGN_OR_RETURN(double base,
                           file.GetFloatOr(absl::StrCat(a, ".rope.freq_base"), 10000.0));
  c.rope_freq_base = static_cast<float>(base);
  COLIBRI_ASSIGN_OR_RETURN(double scale,
                           file.GetFloatOr(absl::StrCat(a, ".rope.scale_linear"), 1.0));
  c.rope_freq_scale = static_cast<float>(1.0 / scale);

  const int block_count = c.n_layer;
  COLIBRI_RETURN_IF_ERROR(spec->finish_config(file, &c));

  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
    return Invalid(file, absl::StrCat("attention.head_count ", c.n_head,
                                      " is not a multiple of head_count_kv ", c.n_head_kv));
  }
  if (c.head_dim <= 0 || c.head_dim_v <= 0) {
    return Invalid(file, "attention.key_length and value_length must be > 0");
  }
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    return Invalid(file, absl::StrCat("rope.dimension_count ", c.n_rot,
                                      " must be even and at most the head size ", c.head_dim));
  }
  if (c.n_expert <= 0 || c.n_expert_used <= 0 || c.n_expert_used > c.n_expert) {
    return Invalid(file, absl::StrCat("expert_used_count ", c.n_expert_used,
                                      " must be in [1, expert_count ", c.n_expert, "]"));
  }
  if (c.n_ctx_train <= 0) return Invalid(file, "context_length must be > 0");
  if (c.n_expert_groups <= 0 || c.n_expert % c.n_expert_groups != 0) {
    return Invalid(file, absl::StrCat("expert_group_count ", c.n_expert_groups,
                                      " does not divide expert_count ", c.n_expert));
  }
  if (c.n_group_used <= 0 || c.n_group_used > c.n_expert_groups) {
    return Invalid(file,
                   absl::StrCat("expert_group_used_count ", c.n_group_used,
                                " must be in [1, expert_group_count ", c.n_expert_groups, "]"));
  }
  if (c.n_expert_groups > 1 &&
      c.n_expert_used > c.n_group_used * (c.n_expert / c.n_expert_groups)) {
    return Invalid(file, absl::StrCat("expert_used_count ", c.n_expert_used,
                                      " exceeds the experts of ", c.n_group_used, " groups"));
  }
  if (!std::isfinite(c.expert_weights_scale) || c.expert_weights_scale < 0) {
    return Invalid(file, "expert_weights_scale must be finite and >= 0");
  }
  if (c.n_layer_dense_lead < 0 || c.n_layer_dense_lead > c.n_layer) {
    return Invalid(file, absl::StrCat("leading_dense_block_count ", c.n_layer_dense_lead,
                                      " is outside [0, ", c.n_layer, "]"));
  }
  if (c.n_layer_dense_lead > 0 && c.n_ff <= 0) {
    return Invalid(file, "leading dense layers need feed_forward_length > 0");
  }
  if (c.yarn && (!(c.yarn_factor >= 1.0f) || c.yarn_orig_ctx <= 0)) {
    return Invalid(file, "yarn needs rope.scaling.factor >= 1 and original_context_length > 0");
  }
  if (c.sliding_window < 0 || (c.sliding_window > 0 && c.swa_pattern <= 0)) {
    return Invalid(file, absl::StrCat("attention.sliding_window ", c.sliding_window,
                                      " must be >= 0 (with a layer pattern)"));
  }
  if (c.attention == AttentionKind::kMla &&
      (c.kv_lora_rank <= 0 || c.q_lora_rank < 0 || c.head_dim <= c.n_rot)) {
    return Invalid(
        file, absl::StrCat("MLA needs kv_lora_rank > 0 (", c.kv_lora_rank, "), q_lora_rank >= 0 (",
                           c.q_lora_rank, ") and key_length_mla > rope.dimension_count"));
  }
  if (!(c.rms_eps > 0) || !(c.rope_freq_base > 0)) {
    return Invalid(file, "layer_norm_rms_epsilon and rope.freq_base must be > 0");
  }
  COLIBRI_RETURN_IF_ERROR(CheckCountsAgainstTensors(file, c, block_count));
  const gguf::TensorInfo* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2) {
    return Invalid(file, "tensor token_embd.weight is missing or not 2-D");
  }
  COLIBRI_ASSIGN_OR_RETURN(c.n_vocab, ToInt(file, "token_embd.weight rows", embd->dims[1]));
  // Every token id the tokenizer can produce, and every id sampled from the
  // logits, must have an embedding row and a tokenizer entry: the two sizes
  // must agree (GGUF converters pad the token list to the embedding rows).
  const gguf::Value* tokens = file.FindValue("tokenizer.ggml.tokens");
  if (tokens != nullptr && tokens->type == gguf::ValueType::kArray &&
      tokens->array_size() != static_cast<uint64_t>(c.n_vocab)) {
    return Invalid(file, absl::StrCat("tokenizer.ggml.tokens has ", tokens->array_size(),
                                      " tokens but token_embd.weight has ", c.n_vocab, " rows"));
  }
  return c;
}

}  // namespace colibri::arch
