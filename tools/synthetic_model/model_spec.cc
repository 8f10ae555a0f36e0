#include "tools/synthetic_model/model_spec.h"

#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/gguf/gguf_value.h"

namespace colibri::synthetic {
namespace {

using ::colibri::gguf::Value;
using ::colibri::ops::TensorType;

constexpr Architecture kArchitectures[] = {Architecture::kQwen3Moe,  Architecture::kQwen2Moe,
                                           Architecture::kLlama,     Architecture::kOlmoe,
                                           Architecture::kDeepseek2, Architecture::kGlm4Moe};

// A ModelSpec written field by field, for the preset table.
ModelSpec Shape(Architecture arch, int n_layer, int n_embd, int n_head, int n_head_kv, int head_dim,
                int n_expert, int n_expert_used, int n_ff_exp, int n_ff_shexp, float rope_freq_base,
                float rms_eps) {
  ModelSpec s;
  s.arch = arch;
  s.n_layer = n_layer;
  s.n_embd = n_embd;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.head_dim = head_dim;
  s.n_expert = n_expert;
  s.n_expert_used = n_expert_used;
  s.n_ff_exp = n_ff_exp;
  s.n_ff_shexp = n_ff_shexp;
  s.rope_freq_base = rope_freq_base;
  s.rms_eps = rms_eps;
  return s;
}

// DeepSeek-V3's layer shapes (61 layers in the real model, the first 3 dense).
ModelSpec DeepseekV3() {
  ModelSpec s =
      Shape(Architecture::kDeepseek2, 61, 7168, 128, 1, 192, 256, 8, 2048, 0, 1e4f, 1e-6f);
  s.q_lora_rank = 1536;
  s.kv_lora_rank = 512;
  s.qk_rope_dim = 64;
  s.v_head_dim = 128;
  s.n_group = 8;
  s.n_group_used = 4;
  s.n_shared_exp = 1;
  s.n_dense_lead = 3;
  s.n_ff_dense = 18432;
  return s;
}

// GLM-4.5-Air's shapes (46 layers, the first dense, and one NextN block).
ModelSpec Glm45Air() {
  ModelSpec s = Shape(Architecture::kGlm4Moe, 46, 4096, 96, 8, 128, 128, 8, 1408, 0, 1e6f, 1e-5f);
  s.n_shared_exp = 1;
  s.n_dense_lead = 1;
  s.n_ff_dense = 10944;
  s.n_nextn = 1;
  s.n_ctx = 131072;
  return s;
}

const Preset kPresets[] = {
    {"demo", "small qwen3moe that runs in seconds: d=256, 4 layers, 16 experts top-4", ModelSpec()},
    {"qwen3-30b-a3b",
     "Qwen3-30B-A3B shapes: d=2048, 48 layers, 32/4 heads of 128, 128 experts top-8",
     Shape(Architecture::kQwen3Moe, 48, 2048, 32, 4, 128, 128, 8, 768, 0, 1e6f, 1e-6f)},
    {"qwen1.5-moe-a2.7b",
     "Qwen1.5-MoE-A2.7B shapes: d=2048, 24 layers, 60 experts top-4, shared expert 5632",
     Shape(Architecture::kQwen2Moe, 24, 2048, 16, 16, 128, 60, 4, 1408, 5632, 1e6f, 1e-6f)},
    {"mixtral-8x7b", "Mixtral-8x7B shapes (llama): d=4096, 32 layers, 32/8 heads, 8 experts top-2",
     Shape(Architecture::kLlama, 32, 4096, 32, 8, 128, 8, 2, 14336, 0, 1e6f, 1e-5f)},
    {"olmoe-1b-7b", "OLMoE-1B-7B shapes: d=2048, 16 layers, 16 heads, 64 experts top-8",
     Shape(Architecture::kOlmoe, 16, 2048, 16, 16, 128, 64, 8, 1024, 0, 1e4f, 1e-5f)},
    {"deepseek-v3",
     "DeepSeek-V3 shapes (deepseek2, MLA): d=7168, 61 layers (3 dense), 128 heads, kv_lora 512, "
     "q_lora 1536, 256 experts top-8 in 8 groups (4 used), expert ffn 2048, 1 shared expert",
     DeepseekV3()},
    {"glm-4.5-air",
     "GLM-4.5-Air shapes (glm4moe): d=4096, 46 layers (1 dense) + 1 NextN block, 96/8 heads of "
     "128, 128 experts top-8, expert ffn 1408, 1 shared expert",
     Glm45Air()},
};

absl::Status Bad(absl::string_view field, int value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("model spec: ", field, " = ", value, " ", why));
}

// Largest accepted width or count: keeps every element count within int64.
constexpr int kMaxDim = 1 << 18;

absl::Status CheckRange(absl::string_view field, int value, int lo, int hi) {
  if (value < lo || value > hi)
    return Bad(field, value, absl::StrCat("is outside [", lo, ", ", hi, "]"));
  return absl::OkStatus();
}

// "blk.3.attn_q.weight" -> "blk.*.attn_q.weight", so that a fallback is noted once.
std::string NotePattern(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return name;
  const size_t dot = name.find('.', 4);
  return dot == std::string::npos ? name : absl::StrCat("blk.*", name.substr(dot));
}

// The FFN of block `layer` (prefix p) shared by deepseek2 and glm4moe: a
// dense FFN, or a router with selection bias, routed experts and shared
// experts; after the main layers, the NextN block's extra tensors.
template <typename Matrix, typename Norm, typename F32>
void PlanFfnAndNextn(const ModelSpec& spec, int layer, const std::string& p, Matrix& matrix,
                     Norm& norm, F32& f32) {
  const int64_t d = spec.n_embd, ne = spec.n_expert, ff = spec.n_ff_exp;
  const float router_std = 1.0f / std::sqrt(static_cast<float>(d));
  if (!spec.is_moe_layer(layer)) {
    matrix(p + "ffn_gate.weight", {d, spec.n_ff_dense});
    matrix(p + "ffn_up.weight", {d, spec.n_ff_dense});
    matrix(p + "ffn_down.weight", {spec.n_ff_dense, d});
    return;
  }
  f32(p + "ffn_gate_inp.weight", {d, ne}, 0.0f, router_std);
  f32(p + "exp_probs_b.bias", {ne}, 0.0f, 0.02f);
  matrix(p + "ffn_gate_exps.weight", {d, ff, ne});
  matrix(p + "ffn_up_exps.weight", {d, ff, ne});
  matrix(p + "ffn_down_exps.weight", {ff, d, ne});
  if (spec.n_shared_exp > 0) {
    const int64_t sh = ff * spec.n_shared_exp;
    matrix(p + "ffn_gate_shexp.weight", {d, sh});
    matrix(p + "ffn_up_shexp.weight", {d, sh});
    matrix(p + "ffn_down_shexp.weight", {sh, d});
  }
  if (layer >= spec.n_layer) {
    matrix(p + "nextn.eh_proj.weight", {2 * d, d});
    norm(p + "nextn.enorm.weight", d);
    norm(p + "nextn.hnorm.weight", d);
    norm(p + "nextn.shared_head_norm.weight", d);
  }
}

// The blocks of a deepseek2 model, in llama.cpp's tensor names and shapes
// (GGML order): MLA, then a dense FFN or routed + shared experts.
template <typename Matrix, typename Norm, typename F32>
void PlanDeepseek2Blocks(const ModelSpec& spec, Matrix& matrix, Norm& norm, F32& f32) {
  const int64_t d = spec.n_embd, h = spec.n_head;
  const int64_t nope = spec.head_dim - spec.qk_rope_dim, rope = spec.qk_rope_dim;
  const int64_t rank = spec.kv_lora_rank, v = spec.v_head_dim;
  for (int layer = 0; layer < spec.n_layer + spec.n_nextn; ++layer) {
    const std::string p = absl::StrCat("blk.", layer, ".");
    norm(p + "attn_norm.weight", d);
    if (spec.q_lora_rank > 0) {
      matrix(p + "attn_q_a.weight", {d, spec.q_lora_rank});
      norm(p + "attn_q_a_norm.weight", spec.q_lora_rank);
      matrix(p + "attn_q_b.weight", {spec.q_lora_rank, h * spec.head_dim});
    } else {
      matrix(p + "attn_q.weight", {d, h * spec.head_dim});
    }
    matrix(p + "attn_kv_a_mqa.weight", {d, rank + rope});
    norm(p + "attn_kv_a_norm.weight", rank);
    matrix(p + "attn_k_b.weight", {nope, rank, h});
    matrix(p + "attn_v_b.weight", {rank, v, h});
    matrix(p + "attn_output.weight", {h * v, d});
    norm(p + "ffn_norm.weight", d);
    PlanFfnAndNextn(spec, layer, p, matrix, norm, f32);
  }
}

// Rotated part of a glm4moe head: GLM-4.5's partial_rotary_factor of 0.5,
// or the whole head when half of it is odd.
int Glm4MoeRopeDim(const ModelSpec& spec) {
  return spec.head_dim % 4 == 0 ? spec.head_dim / 2 : spec.head_dim;
}

// The blocks of a glm4moe model, in the tensor names and shapes (GGML order)
// of the GGUF conversion of GLM-4.5: attention with q/k/v biases, the FFN norm
// named post_attention_norm, a dense FFN or router + selection bias + routed
// and shared experts, and after the main layers the NextN blocks' extra
// tensors (their embed_tokens and shared_head_head, optional in the format,
// are left out: the loader then uses token_embd and output, as for GLM-4.6).
template <typename Matrix, typename Norm, typename F32>
void PlanGlm4MoeBlocks(const ModelSpec& spec, Matrix& matrix, Norm& norm, F32& f32) {
  const int64_t d = spec.n_embd, q = spec.q_dim(), kv = spec.kv_dim();
  for (int layer = 0; layer < spec.n_layer + spec.n_nextn; ++layer) {
    const std::string p = absl::StrCat("blk.", layer, ".");
    norm(p + "attn_norm.weight", d);
    matrix(p + "attn_q.weight", {d, q});
    f32(p + "attn_q.bias", {q}, 0.0f, 0.02f);
    matrix(p + "attn_k.weight", {d, kv});
    f32(p + "attn_k.bias", {kv}, 0.0f, 0.02f);
    matrix(p + "attn_v.weight", {d, kv});
    f32(p + "attn_v.bias", {kv}, 0.0f, 0.02f);
    matrix(p + "attn_output.weight", {q, d});
    norm(p + "post_attention_norm.weight", d);
    PlanFfnAndNextn(spec, layer, p, matrix, norm, f32);
  }
}

// glm4moe.* keys beyond the common ones (the GGUF conversion's names).
void AddGlm4MoeMetadata(const ModelSpec& spec, gguf::GgufWriter* writer) {
  auto u32 = [&](absl::string_view key, int value) {
    writer->SetValue(absl::StrCat("glm4moe.", key), Value::Uint32(static_cast<uint32_t>(value)));
  };
  u32("attention.key_length", spec.head_dim);
  u32("attention.value_length", spec.head_dim);
  u32("rope.dimension_count", Glm4MoeRopeDim(spec));
  u32("feed_forward_length", spec.n_dense_lead > 0 ? spec.n_ff_dense : spec.n_ff_exp);
  u32("expert_feed_forward_length", spec.n_ff_exp);
  u32("leading_dense_block_count", spec.n_dense_lead);
  u32("expert_shared_count", spec.n_shared_exp);
  u32("expert_group_count", 1);
  u32("expert_group_used_count", 1);
  writer->SetValue("glm4moe.expert_weights_scale", Value::Float32(2.5f));
  writer->SetValue("glm4moe.expert_weights_norm", Value::Bool(true));
  u32("expert_gating_func", 2);  // sigmoid
  if (spec.n_nextn > 0) u32("nextn_predict_layers", spec.n_nextn);
}

// deepseek2.* keys beyond the common ones (llama.cpp's names).
void AddDeepseek2Metadata(const ModelSpec& spec, gguf::GgufWriter* writer) {
  auto u32 = [&](absl::string_view key, int value) {
    writer->SetValue(absl::StrCat("deepseek2.", key), Value::Uint32(static_cast<uint32_t>(value)));
  };
  auto f32 = [&](absl::string_view key, float value) {
    writer->SetValue(absl::StrCat("deepseek2.", key), Value::Float32(value));
  };
  u32("attention.q_lora_rank", spec.q_lora_rank);
  u32("attention.kv_lora_rank", spec.kv_lora_rank);
  // The absorbed (MQA) view llama.cpp's converter writes: one KV head holding
  // the latent and the rope part.
  u32("attention.key_length", spec.kv_lora_rank + spec.qk_rope_dim);
  u32("attention.value_length", spec.kv_lora_rank);
  u32("attention.key_length_mla", spec.head_dim);
  u32("attention.value_length_mla", spec.v_head_dim);
  u32("rope.dimension_count", spec.qk_rope_dim);
  writer->SetValue("deepseek2.rope.scaling.type", Value::String("yarn"));
  f32("rope.scaling.factor", 40.0f);
  u32("rope.scaling.original_context_length", 4096);
  f32("rope.scaling.yarn_log_multiplier", 0.1f);
  u32("feed_forward_length", spec.n_dense_lead > 0 ? spec.n_ff_dense : spec.n_ff_exp);
  u32("expert_feed_forward_length", spec.n_ff_exp);
  u32("leading_dense_block_count", spec.n_dense_lead);
  u32("expert_shared_count", spec.n_shared_exp);
  u32("expert_group_count", spec.n_group);
  u32("expert_group_used_count", spec.n_group_used);
  f32("expert_weights_scale", 2.5f);
  writer->SetValue("deepseek2.expert_weights_norm", Value::Bool(true));
  u32("expert_gating_func", 2);  // sigmoid
  if (spec.n_nextn > 0) u32("nextn_predict_layers", spec.n_nextn);
}

}  // namespace

const char* ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kQwen3Moe:
      return "qwen3moe";
    case Architecture::kQwen2Moe:
      return "qwen2moe";
    case Architecture::kLlama:
      return "llama";
    case Architecture::kOlmoe:
      return "olmoe";
    case Architecture::kDeepseek2:
      return "deepseek2";
    case Architecture::kGlm4Moe:
      return "glm4moe";
  }
  return "unknown";
}

absl::StatusOr<Architecture> ParseArchitecture(absl::string_view name) {
  std::vector<std::string> names;
  for (Architecture arch : kArchitectures) {
    if (name == ArchitectureName(arch)) return arch;
    names.push_back(ArchitectureName(arch));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown architecture '", name, "' (known: ", absl::StrJoin(names, ", "), ")"));
}

absl::Status ModelSpec::Validate() const {
  COLIBRI_RETURN_IF_ERROR(CheckRange("layers", n_layer, 1, 4096));
  COLIBRI_RETURN_IF_ERROR(CheckRange("hidden", n_embd, 1, kMaxDim));
  COLIBRI_RETURN_IF_ERROR(CheckRange("heads", n_head, 1, 4096));
  COLIBRI_RETURN_IF_ERROR(CheckRange("kv-heads", n_head_kv, 1, n_head));
  if (n_head % n_head_kv != 0) return Bad("kv-heads", n_head_kv, "does not divide heads");
  COLIBRI_RETURN_IF_ERROR(CheckRange("head-dim", head_dim, 2, 4096));
  if (head_dim % 2 != 0) return Bad("head-dim", head_dim, "is odd (RoPE rotates pairs)");
  COLIBRI_RETURN_IF_ERROR(CheckRange("experts", n_expert, 1, 4096));
  COLIBRI_RETURN_IF_ERROR(CheckRange("top-k", n_expert_used, 1, n_expert));
  COLIBRI_RETURN_IF_ERROR(CheckRange("expert-ffn", n_ff_exp, 1, kMaxDim));
  if (arch == Architecture::kQwen2Moe) {
    COLIBRI_RETURN_IF_ERROR(CheckRange("shared-ffn", n_ff_shexp, 1, kMaxDim));
  } else if (n_ff_shexp != 0) {
    return Bad("shared-ffn", n_ff_shexp,
               absl::StrCat("is set but ", ArchitectureName(arch), " has no shared expert"));
  }
  if (arch == Architecture::kDeepseek2) {
    if (n_head_kv != 1) return Bad("kv-heads", n_head_kv, "must be 1 for MLA");
    COLIBRI_RETURN_IF_ERROR(CheckRange("q-lora", q_lora_rank, 0, kMaxDim));
    COLIBRI_RETURN_IF_ERROR(CheckRange("kv-lora", kv_lora_rank, 1, kMaxDim));
    COLIBRI_RETURN_IF_ERROR(CheckRange("rope-dim", qk_rope_dim, 2, head_dim - 1));
    if (qk_rope_dim % 2 != 0) return Bad("rope-dim", qk_rope_dim, "is odd");
    COLIBRI_RETURN_IF_ERROR(CheckRange("v-head-dim", v_head_dim, 1, kMaxDim));
    COLIBRI_RETURN_IF_ERROR(CheckRange("groups", n_group, 1, n_expert));
    if (n_expert % n_group != 0) return Bad("groups", n_group, "does not divide experts");
    COLIBRI_RETURN_IF_ERROR(CheckRange("groups-used", n_group_used, 1, n_group));
    COLIBRI_RETURN_IF_ERROR(CheckRange("shared-experts", n_shared_exp, 0, 64));
    COLIBRI_RETURN_IF_ERROR(CheckRange("dense-layers", n_dense_lead, 0, n_layer - 1));
    if (n_dense_lead > 0) COLIBRI_RETURN_IF_ERROR(CheckRange("dense-ffn", n_ff_dense, 1, kMaxDim));
    COLIBRI_RETURN_IF_ERROR(CheckRange("nextn-layers", n_nextn, 0, 16));
  } else if (arch == Architecture::kGlm4Moe) {
    COLIBRI_RETURN_IF_ERROR(CheckRange("shared-experts", n_shared_exp, 0, 64));
    COLIBRI_RETURN_IF_ERROR(CheckRange("dense-layers", n_dense_lead, 0, n_layer - 1));
    if (n_dense_lead > 0) COLIBRI_RETURN_IF_ERROR(CheckRange("dense-ffn", n_ff_dense, 1, kMaxDim));
    COLIBRI_RETURN_IF_ERROR(CheckRange("nextn-layers", n_nextn, 0, 16));
  } else if (n_nextn != 0) {
    return Bad("nextn-layers", n_nextn,
               absl::StrCat("is set but only deepseek2 and glm4moe models are made with NextN "
                            "blocks, not ",
                            ArchitectureName(arch)));
  }
  COLIBRI_RETURN_IF_ERROR(CheckRange("context", n_ctx, 1, 1 << 24));
  COLIBRI_RETURN_IF_ERROR(CheckRange("vocab-size", vocab_size, 257, 1 << 20));
  if (!(rope_freq_base > 0) || !std::isfinite(rope_freq_base)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model spec: rope base ", rope_freq_base, " must be finite and > 0"));
  }
  if (!(rms_eps > 0) || !std::isfinite(rms_eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model spec: rms eps ", rms_eps, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

absl::Span<const Preset> Presets() { return kPresets; }

absl::StatusOr<ModelSpec> FindPreset(absl::string_view name) {
  std::vector<std::string> names;
  for (const Preset& preset : kPresets) {
    if (name == preset.name) return preset.spec;
    names.push_back(preset.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", name, "' (known: ", absl::StrJoin(names, ", "), ")"));
}

int64_t TensorPlan::rows() const {
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  return rows;
}

uint64_t TensorPlan::n_bytes() const {
  return ops::RowBytesUnchecked(type, dims[0]) * static_cast<uint64_t>(rows());
}

TensorType StorageType(TensorType requested, int64_t row_length) {
  for (TensorType type : {requested, TensorType::kQ8_0}) {
    if (row_length % ops::GetTraits(type).block_size == 0) return type;
  }
  return TensorType::kF32;
}

std::vector<TensorPlan> PlanTensors(const ModelSpec& spec, int n_vocab, TensorType matrix_type,
                                    std::vector<std::string>* notes) {
  std::vector<TensorPlan> plans;
  absl::flat_hash_set<std::string> noted;
  auto weight = [&](std::string name, std::vector<int64_t> dims, float stddev) {
    const TensorType type = StorageType(matrix_type, dims[0]);
    if (type != matrix_type && notes != nullptr && noted.insert(NotePattern(name)).second) {
      notes->push_back(absl::StrCat(NotePattern(name), ": rows of ", dims[0],
                                    " are not a multiple of the ", ops::TypeName(matrix_type),
                                    " block (", ops::GetTraits(matrix_type).block_size,
                                    "); stored as ", ops::TypeName(type)));
    }
    plans.push_back({std::move(name), std::move(dims), type, 0.0f, stddev});
  };
  auto matrix = [&](std::string name, std::vector<int64_t> dims) {
    const float stddev = 1.0f / std::sqrt(static_cast<float>(dims[0]));
    weight(std::move(name), std::move(dims), stddev);
  };
  auto f32 = [&](std::string name, std::vector<int64_t> dims, float mean, float stddev) {
    plans.push_back({std::move(name), std::move(dims), TensorType::kF32, mean, stddev});
  };
  auto norm = [&](std::string name, int64_t n) { f32(std::move(name), {n}, 1.0f, 0.1f); };
  auto bias = [&](std::string name, int64_t n) { f32(std::move(name), {n}, 0.0f, 0.02f); };

  const int64_t d = spec.n_embd, q = spec.q_dim(), kv = spec.kv_dim();
  const int64_t ff = spec.n_ff_exp, ne = spec.n_expert, sh = spec.n_ff_shexp;
  const float router_std = 1.0f / std::sqrt(static_cast<float>(d));

  weight("token_embd.weight", {d, n_vocab}, 1.0f);
  norm("output_norm.weight", d);
  if (!spec.tied_embeddings) matrix("output.weight", {d, n_vocab});
  if (spec.arch == Architecture::kDeepseek2) {
    PlanDeepseek2Blocks(spec, matrix, norm, f32);
    return plans;
  }
  if (spec.arch == Architecture::kGlm4Moe) {
    PlanGlm4MoeBlocks(spec, matrix, norm, f32);
    return plans;
  }
  for (int layer = 0; layer < spec.n_layer; ++layer) {
    const std::string p = absl::StrCat("blk.", layer, ".");
    norm(p + "attn_norm.weight", d);
    const bool qkv_bias = spec.arch == Architecture::kQwen2Moe;
    matrix(p + "attn_q.weight", {d, q});
    if (qkv_bias) bias(p + "attn_q.bias", q);
    matrix(p + "attn_k.weight", {d, kv});
    if (qkv_bias) bias(p + "attn_k.bias", kv);
    matrix(p + "attn_v.weight", {d, kv});
    if (qkv_bias) bias(p + "attn_v.bias", kv);
    matrix(p + "attn_output.weight", {q, d});
    if (spec.arch == Architecture::kQwen3Moe) {
      norm(p + "attn_q_norm.weight", spec.head_dim);
      norm(p + "attn_k_norm.weight", spec.head_dim);
    } else if (spec.arch == Architecture::kOlmoe) {
      norm(p + "attn_q_norm.weight", q);
      norm(p + "attn_k_norm.weight", kv);
    }
    norm(p + "ffn_norm.weight", d);
    f32(p + "ffn_gate_inp.weight", {d, ne}, 0.0f, router_std);
    matrix(p + "ffn_gate_exps.weight", {d, ff, ne});
    matrix(p + "ffn_up_exps.weight", {d, ff, ne});
    matrix(p + "ffn_down_exps.weight", {ff, d, ne});
    if (spec.arch == Architecture::kQwen2Moe) {
      f32(p + "ffn_gate_inp_shexp.weight", {d}, 0.0f, router_std);
      matrix(p + "ffn_gate_shexp.weight", {d, sh});
      matrix(p + "ffn_up_shexp.weight", {d, sh});
      matrix(p + "ffn_down_shexp.weight", {sh, d});
    }
  }
  return plans;
}

uint32_t LlamaFileType(TensorType type) {
  switch (type) {
    case TensorType::kF32:
      return 0;
    case TensorType::kF16:
      return 1;
    case TensorType::kQ4_0:
      return 2;
    case TensorType::kQ4_1:
      return 3;
    case TensorType::kQ8_0:
      return 7;
    case TensorType::kQ5_0:
      return 8;
    case TensorType::kQ5_1:
      return 9;
    case TensorType::kQ2_K:
      return 10;
    case TensorType::kQ3_K:
      return 11;  // Q3_K_S
    case TensorType::kQ4_K:
      return 14;  // Q4_K_S
    case TensorType::kQ5_K:
      return 16;  // Q5_K_S
    case TensorType::kQ6_K:
      return 18;
    case TensorType::kBF16:
      return 32;
    default:
      return 0;
  }
}

void AddMetadata(const ModelSpec& spec, TensorType matrix_type, const std::string& name,
                 const BpeVocabulary& vocab, gguf::GgufWriter* writer) {
  const std::string arch = ArchitectureName(spec.arch);
  auto u32 = [&](absl::string_view key, int value) {
    writer->SetValue(absl::StrCat(arch, ".", key), Value::Uint32(static_cast<uint32_t>(value)));
  };
  writer->SetValue("general.architecture", Value::String(arch));
  writer->SetValue("general.name", Value::String(name));
  writer->SetValue("general.file_type", Value::Uint32(LlamaFileType(matrix_type)));
  writer->SetValue("general.quantization_version", Value::Uint32(2));

  u32("context_length", spec.n_ctx);
  u32("embedding_length", spec.n_embd);
  u32("block_count", spec.n_layer + spec.n_nextn);
  // The qwen MoE families write the dense width their configs carry (top-k times
  // the expert width for every released model); llama and olmoe keep the expert
  // width here.
  const bool qwen = spec.arch == Architecture::kQwen3Moe || spec.arch == Architecture::kQwen2Moe;
  if (spec.arch != Architecture::kDeepseek2 && spec.arch != Architecture::kGlm4Moe) {
    u32("feed_forward_length", qwen ? spec.n_expert_used * spec.n_ff_exp : spec.n_ff_exp);
  }
  u32("attention.head_count", spec.n_head);
  u32("attention.head_count_kv", spec.n_head_kv);
  writer->SetValue(arch + ".attention.layer_norm_rms_epsilon", Value::Float32(spec.rms_eps));
  writer->SetValue(arch + ".rope.freq_base", Value::Float32(spec.rope_freq_base));
  u32("expert_count", spec.n_expert);
  u32("expert_used_count", spec.n_expert_used);
  if (qwen) u32("expert_feed_forward_length", spec.n_ff_exp);
  if (spec.arch == Architecture::kQwen2Moe) {
    u32("expert_shared_feed_forward_length", spec.n_ff_shexp);
  }
  if (spec.arch == Architecture::kDeepseek2) {
    AddDeepseek2Metadata(spec, writer);
  } else if (spec.arch == Architecture::kGlm4Moe) {
    AddGlm4MoeMetadata(spec, writer);
  } else if (spec.head_dim * spec.n_head != spec.n_embd) {
    u32("attention.key_length", spec.head_dim);
    u32("attention.value_length", spec.head_dim);
  }
  if (spec.arch == Architecture::kLlama) u32("rope.dimension_count", spec.head_dim);

  writer->SetValue("tokenizer.ggml.model", Value::String("gpt2"));
  writer->SetValue("tokenizer.ggml.pre", Value::String("gpt-2"));
  writer->SetValue("tokenizer.ggml.tokens", Value::StringArray(vocab.tokens));
  writer->SetValue("tokenizer.ggml.token_type", Value::Int32Array(vocab.token_types));
  writer->SetValue("tokenizer.ggml.merges", Value::StringArray(vocab.merges));
  writer->SetValue("tokenizer.ggml.bos_token_id",
                   Value::Uint32(static_cast<uint32_t>(vocab.end_of_text_id)));
  writer->SetValue("tokenizer.ggml.eos_token_id",
                   Value::Uint32(static_cast<uint32_t>(vocab.end_of_text_id)));
  writer->SetValue("tokenizer.ggml.add_bos_token", Value::Bool(false));
}

}  // namespace colibri::synthetic
