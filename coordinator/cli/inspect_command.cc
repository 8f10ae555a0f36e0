#include "coordinator/cli/inspect_command.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/api/model_summary.h"
#include "model/arch/kv_cache.h"
#include "model/arch/model_config.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_fingerprint.h"

namespace colibri::coordinator {
namespace {

const char* RopeName(arch::RopeType t) { return t == arch::RopeType::kNorm ? "norm" : "neox"; }

const char* QkNormName(arch::QkNorm n) {
  switch (n) {
    case arch::QkNorm::kNone:
      return "none";
    case arch::QkNorm::kPerHead:
      return "per-head";
    case arch::QkNorm::kWhole:
      return "whole projection";
  }
  return "?";
}

// The hyper-parameters of the deepseek2 / glm4moe families, and the KV cache
// size per token (float32 and half cache).
void PrintFamilyConfig(const arch::ModelConfig& c, std::ostream& out) {
  const bool deepseek_routing = c.gating == arch::Gating::kSigmoid || c.selection_bias ||
                                c.n_expert_groups > 1 || c.expert_weights_scale != 1.0f ||
                                c.n_layer_dense_lead > 0;
  if (deepseek_routing) {
    out << absl::StrFormat("  routing %s%s, groups %d (use %d), weights scale %g\n",
                           c.gating == arch::Gating::kSigmoid ? "sigmoid" : "softmax",
                           c.selection_bias ? " + selection bias exp_probs_b" : "",
                           c.n_expert_groups, c.n_group_used, c.expert_weights_scale);
    out << absl::StrFormat("  leading dense layers %d (ffn %d)", c.n_layer_dense_lead, c.n_ff);
    if (c.n_nextn_layer > 0) out << absl::StrFormat(", NextN layers %d (not run)", c.n_nextn_layer);
    out << "\n";
  }
  if (c.yarn) {
    out << absl::StrFormat(
        "  yarn factor %g, original context %d, log multiplier %g, rope magnitude %g\n",
        c.yarn_factor, c.yarn_orig_ctx, c.yarn_log_mul, c.rope_magnitude);
  }
  if (c.attention == arch::AttentionKind::kMla) {
    out << absl::StrFormat(
        "  MLA: q_lora_rank %d%s, kv_lora_rank %d, qk nope %d + rope %d, v head %d, kq scale %g\n",
        c.q_lora_rank, c.q_lora_rank == 0 ? " (plain attn_q)" : "", c.kv_lora_rank,
        c.qk_nope(), c.n_rot, c.head_dim_v, c.attention_scale());
  }
  const int64_t per_token = c.kv_cache_floats_per_token() * 4 * c.n_layer;
  out << "  KV cache per token: " << FormatBytes(per_token) << " (f32), "
      << FormatBytes(per_token / 2) << " (--kv-type f16), ";
  if (arch::KvCache::CheckType(c, arch::KvType::kQ8_0).ok()) {
    // 34 bytes (32 int8 and a half scale) per 32 elements.
    out << FormatBytes(per_token / 4 / 32 * 34) << " (--kv-type q8_0)";
  } else {
    out << "no q8_0 (a row is not a multiple of 32 elements)";
  }
  if (c.kv_expanded_floats_per_token() != c.kv_cache_floats_per_token()) {
    const int64_t expanded = c.kv_expanded_floats_per_token() * 4 * c.n_layer;
    out << absl::StrFormat("; compressed latent (expanded K/V would be %s in f32, %.1fx)",
                           FormatBytes(expanded), static_cast<double>(expanded) / per_token);
  }
  out << "\n";
}

void PrintConfig(const arch::ModelConfig& c, std::ostream& out) {
  out << absl::StrFormat("  layers %d, hidden %d, heads %d (kv %d), head dim %d (v %d)\n",
                         c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.head_dim_v);
  out << absl::StrFormat("  context %d, vocab %d, rms eps %g\n", c.n_ctx_train, c.n_vocab,
                         c.rms_eps);
  out << absl::StrFormat("  rope %s over %d dims, base %g, q/k norm %s, qkv bias %s\n",
                         RopeName(c.rope_type), c.n_rot, c.rope_freq_base, QkNormName(c.qk_norm),
                         c.qkv_bias ? "yes" : "no");
  out << absl::StrFormat("  experts %d, top-%d%s, expert width %d", c.n_expert, c.n_expert_used,
                         c.norm_topk ? " (renormalised)" : "", c.n_ff_exp);
  if (c.shared_expert) {
    out << absl::StrFormat(", shared expert width %d%s", c.n_ff_shexp,
                           c.shared_expert_gate ? " (sigmoid gate)" : "");
  }
  out << "\n";
  PrintFamilyConfig(c, out);
}

}  // namespace

absl::Status RunInspect(const InspectOptions& options, std::ostream& out) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file,
                           gguf::GgufFile::Open(options.model_path));
  out << "file: " << file->path() << " (GGUF v" << file->version();
  if (file->split_count() > 1) out << ", " << file->split_count() << " split files";
  out << ")\n";
  COLIBRI_ASSIGN_OR_RETURN(std::string fingerprint, gguf::ModelFingerprint(*file));
  out << "fingerprint: " << fingerprint << "\n";
  const std::string arch_name = file->GetStringOr("general.architecture", "(none)").value_or("?");
  out << "architecture: " << arch_name;
  const std::string name = file->GetStringOr("general.name", "").value_or("");
  if (!name.empty()) out << " (" << name << ")";
  out << "\n";

  absl::StatusOr<arch::ModelConfig> config = arch::ReadModelConfig(*file);
  int top_k = 0;
  if (config.ok()) {
    PrintConfig(*config, out);
    top_k = config->n_expert_used;
  } else {
    out << "  not loadable: " << config.status().message() << "\n";
  }

  const std::string tok_model = file->GetStringOr("tokenizer.ggml.model", "").value_or("");
  if (tok_model.empty()) {
    out << "tokenizer: none\n";
  } else {
    absl::StatusOr<const std::vector<std::string>*> tokens =
        file->GetStringArray("tokenizer.ggml.tokens");
    const std::string pre = file->GetStringOr("tokenizer.ggml.pre", "default").value_or("?");
    out << "tokenizer: " << tok_model << ", pre-tokenizer " << pre << ", "
        << (tokens.ok() ? static_cast<int64_t>((*tokens)->size()) : -1) << " tokens\n";
  }

  const ModelSummary s = SummarizeModel(*file, top_k);
  out << "tensors: " << file->tensors().size() << " (";
  bool first = true;
  for (const auto& [type, count] : s.tensor_type_counts) {
    out << (first ? "" : ", ") << type << " " << count;
    first = false;
  }
  out << ")\n";
  out << "bytes: total " << FormatBytes(s.total_bytes) << ", dense part (coordinator) "
      << FormatBytes(s.dense_bytes) << ", routed experts " << FormatBytes(s.routed_expert_bytes)
      << "\n";
  out << "routed experts: " << s.n_routed_experts << ", " << FormatBytes(s.bytes_per_expert)
      << " each\n";
  out << "active weight bytes per token: " << FormatBytes(s.active_bytes_per_token) << "\n";

  if (options.verbose) {
    out << "\nmetadata:\n";
    for (const auto& [key, value] : file->metadata()) {
      out << "  " << key << " = " << gguf::ValueToString(value) << "\n";
    }
    out << "\ntensors:\n";
    for (const gguf::TensorInfo& t : file->tensors()) {
      out << "  " << t.name << " " << ops::TypeName(t.type) << " (";
      for (size_t i = 0; i < t.dims.size(); ++i) out << (i ? ", " : "") << t.dims[i];
      out << ") " << FormatBytes(t.n_bytes) << "\n";
    }
  }
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
