#include "tests/support/tiny_nextn_model.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/gguf/gguf_writer.h"

namespace colibri::testing {

TinyNextnModel::TinyNextnModel(const TinyNextnOptions& options)
    : options_(options), rng_state_(options.seed) {
  const std::string a = "deepseek2.";
  auto u32 = [&](const std::string& key, int v) {
    metadata_[a + key] = gguf::Value::Uint32(static_cast<uint32_t>(v));
  };
  metadata_["general.architecture"] = gguf::Value::String("deepseek2");
  u32("block_count", kMainLayers + options.n_nextn);
  if (options.n_nextn > 0) u32("nextn_predict_layers", options.n_nextn);
  u32("context_length", kCtx);
  u32("embedding_length", kEmbd);
  u32("attention.head_count", kHeads);
  u32("attention.head_count_kv", 1);
  u32("attention.q_lora_rank", 0);
  u32("attention.kv_lora_rank", kRank);
  u32("attention.key_length", kRank + kRope);
  u32("attention.value_length", kRank);
  u32("attention.key_length_mla", kNope + kRope);
  u32("attention.value_length_mla", kV);
  u32("rope.dimension_count", kRope);
  metadata_[a + "rope.freq_base"] = gguf::Value::Float32(kRopeBase);
  metadata_[a + "attention.layer_norm_rms_epsilon"] = gguf::Value::Float32(kEps);
  u32("expert_count", kExperts);
  u32("expert_used_count", kUsed);
  u32("expert_feed_forward_length", kFf);
  u32("feed_forward_length", kFfDense);
  u32("leading_dense_block_count", 1);
  u32("expert_shared_count", 1);
  u32("expert_group_count", 1);
  u32("expert_group_used_count", 1);
  metadata_[a + "expert_weights_scale"] = gguf::Value::Float32(kScale);
  metadata_[a + "expert_weights_norm"] = gguf::Value::Bool(true);
  u32("expert_gating_func", 2);

  Add("token_embd.weight", {kEmbd, kVocab}, 0.0f, 1.0f);
  Add("output_norm.weight", {kEmbd}, 1.0f, 0.1f);
  Add("output.weight", {kEmbd, kVocab}, 0.0f, 0.5f);
  for (int il = 0; il < kMainLayers; ++il) AddBlock(il, il == 0, false);
  for (int j = 0; j < options.n_nextn; ++j) AddBlock(kMainLayers + j, false, true);

  if (!options.echo) return;
  auto scale = [&](const std::string& name, float s) {
    for (float& v : tensors_[name].values) v *= s;
  };
  for (int il = 0; il < kMainLayers; ++il) {
    const std::string p = absl::StrCat("blk.", il, ".");
    scale(p + "attn_output.weight", options.main_scale);
    for (const char* down : {"ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight"}) {
      if (tensors_.count(p + down)) scale(p + down, options.main_scale);
    }
  }
  for (int j = 0; j < options.n_nextn; ++j) {
    const std::string p = absl::StrCat("blk.", kMainLayers + j, ".");
    scale(p + "attn_output.weight", 0.0f);
    scale(p + "ffn_down_exps.weight", 0.0f);
    scale(p + "ffn_down_shexp.weight", 0.0f);
    std::vector<float>& eh = tensors_[p + "nextn.eh_proj.weight"].values;  // [kEmbd][2 kEmbd]
    for (int r = 0; r < kEmbd; ++r) {
      for (int col = 0; col < 2 * kEmbd; ++col) eh[r * 2 * kEmbd + col] = col == r ? 1.0f : 0.0f;
    }
    for (float& v : tensors_[p + "nextn.enorm.weight"].values) v = 1.0f;
    tensors_[p + "nextn.shared_head_norm.weight"].values = tensors_["output_norm.weight"].values;
  }
}

void TinyNextnModel::Add(const std::string& name, std::vector<int64_t> dims, float mean,
                         float stddev) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::mt19937 rng(rng_state_++);
  std::normal_distribution<float> normal(mean, stddev);
  Tensor t;
  t.dims = std::move(dims);
  t.values.resize(static_cast<size_t>(n));
  for (float& v : t.values) v = normal(rng);
  order_.push_back(name);
  tensors_[name] = std::move(t);
}

void TinyNextnModel::AddBlock(int block, bool dense, bool nextn) {
  const std::string p = absl::StrCat("blk.", block, ".");
  const int64_t q_dim = kHeads * (kNope + kRope);
  Add(p + "attn_norm.weight", {kEmbd}, 1.0f, 0.1f);
  Add(p + "attn_q.weight", {kEmbd, q_dim}, 0.0f, 0.5f);
  Add(p + "attn_kv_a_mqa.weight", {kEmbd, kRank + kRope}, 0.0f, 0.5f);
  Add(p + "attn_kv_a_norm.weight", {kRank}, 1.0f, 0.1f);
  Add(p + "attn_k_b.weight", {kNope, kRank, kHeads}, 0.0f, 0.5f);
  Add(p + "attn_v_b.weight", {kRank, kV, kHeads}, 0.0f, 0.5f);
  Add(p + "attn_output.weight", {kHeads * kV, kEmbd}, 0.0f, 0.5f);
  Add(p + "ffn_norm.weight", {kEmbd}, 1.0f, 0.1f);
  if (dense) {
    Add(p + "ffn_gate.weight", {kEmbd, kFfDense}, 0.0f, 0.5f);
    Add(p + "ffn_up.weight", {kEmbd, kFfDense}, 0.0f, 0.5f);
    Add(p + "ffn_down.weight", {kFfDense, kEmbd}, 0.0f, 0.5f);
  } else {
    Add(p + "ffn_gate_inp.weight", {kEmbd, kExperts}, 0.0f, 0.5f);
    Add(p + "exp_probs_b.bias", {kExperts}, 0.0f, 0.5f);
    Add(p + "ffn_gate_exps.weight", {kEmbd, kFf, kExperts}, 0.0f, 0.5f);
    Add(p + "ffn_up_exps.weight", {kEmbd, kFf, kExperts}, 0.0f, 0.5f);
    Add(p + "ffn_down_exps.weight", {kFf, kEmbd, kExperts}, 0.0f, 0.5f);
    Add(p + "ffn_gate_shexp.weight", {kEmbd, kFf}, 0.0f, 0.5f);
    Add(p + "ffn_up_shexp.weight", {kEmbd, kFf}, 0.0f, 0.5f);
    Add(p + "ffn_down_shexp.weight", {kFf, kEmbd}, 0.0f, 0.5f);
  }
  if (!nextn) return;
  Add(p + "nextn.eh_proj.weight", {2 * kEmbd, kEmbd}, 0.0f, 0.3f);
  Add(p + "nextn.enorm.weight", {kEmbd}, 1.0f, 0.1f);
  Add(p + "nextn.hnorm.weight", {kEmbd}, 1.0f, 0.1f);
  Add(p + "nextn.shared_head_norm.weight", {kEmbd}, 1.0f, 0.1f);
}

const std::vector<float>& TinyNextnModel::values(const std::string& name) const {
  static const std::vector<float> kNone;
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? kNone : it->second.values;
}

std::vector<uint8_t> TinyNextnModel::Serialize() const {
  gguf::GgufWriter w;
  for (const auto& [k, v] : metadata_) w.SetValue(k, v);
  for (const std::string& name : order_) {
    const Tensor& t = tensors_.at(name);
    (void)w.AddF32Tensor(name, t.dims, t.values);
  }
  return w.Serialize();
}

absl::Status TinyNextnModel::WriteFile(const std::string& path) const {
  gguf::GgufWriter w;
  for (const auto& [k, v] : metadata_) w.SetValue(k, v);
  for (const std::string& name : order_) {
    const Tensor& t = tensors_.at(name);
    absl::Status s = w.AddF32Tensor(name, t.dims, t.values);
    if (!s.ok()) return s;
  }
  return w.WriteFile(path);
}

std::vector<std::string> TinyGlm4MoeMakeModelCommand(const std::string& make_model,
                                                     const std::string& out) {
  return {make_model, "--preset",    "glm-4.5-air", "--layers",   "2",     "--hidden",
          "64",       "--heads",     "4",           "--kv-heads", "2",     "--head-dim",
          "16",       "--experts",   "8",           "--top-k",    "2",     "--expert-ffn",
          "32",       "--dense-ffn", "96",          "--context",  "256",   "--vocab-size",
          "320",      "--type",      "q8_0",        "--quiet",    "--out", out};
}

}  // namespace colibri::testing
