// The deepseek2 (MLA) shape of the synthetic generator: the file it writes
// has llama.cpp's deepseek2 keys and tensors, and colibri's loader reads it
// back with the same hyper-parameters and runs it.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/gguf/gguf_file.h"
#include "model/moe/local_expert_backend.h"
#include "tools/synthetic_model/model_spec.h"
#include "tools/synthetic_model/synthetic_model.h"

namespace colibri::synthetic {
namespace {

// DeepSeek-V3's structure at a tiny width: compressed q, 2 of 4 groups,
// one shared expert, one leading dense layer.
ModelSpec TinyDeepseek() {
  ModelSpec s;
  s.arch = Architecture::kDeepseek2;
  s.n_layer = 3;
  s.n_embd = 64;
  s.n_head = 4;
  s.n_head_kv = 1;
  s.head_dim = 24;  // nope 16 + rope 8
  s.qk_rope_dim = 8;
  s.v_head_dim = 16;
  s.q_lora_rank = 48;
  s.kv_lora_rank = 32;
  s.n_expert = 8;
  s.n_expert_used = 3;
  s.n_group = 4;
  s.n_group_used = 2;
  s.n_ff_exp = 32;
  s.n_shared_exp = 1;
  s.n_dense_lead = 1;
  s.n_ff_dense = 96;
  s.n_ctx = 256;
  s.vocab_size = 320;
  return s;
}

TEST(SyntheticDeepseek2Test, WritesAModelTheLoaderReadsAndRuns) {
  const ModelSpec spec = TinyDeepseek();
  ASSERT_TRUE(spec.Validate().ok()) << spec.Validate();
  const std::string path = ::testing::TempDir() + "/synthetic-deepseek2.gguf";
  GenerateOptions options;
  options.type = ops::TensorType::kQ8_0;
  options.num_threads = 2;
  absl::StatusOr<GenerateReport> report = GenerateModel(spec, options, path);
  ASSERT_TRUE(report.ok()) << report.status();

  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  // The MLA tensors in llama.cpp's shapes (GGML order), and no expert in the
  // dense layer.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"blk.0.attn_q_a.weight", {64, 48}},          {"blk.0.attn_q_b.weight", {48, 4 * 24}},
      {"blk.1.attn_kv_a_mqa.weight", {64, 32 + 8}}, {"blk.1.attn_k_b.weight", {16, 32, 4}},
      {"blk.1.attn_v_b.weight", {32, 16, 4}},       {"blk.2.attn_output.weight", {4 * 16, 64}},
      {"blk.0.ffn_gate.weight", {64, 96}},          {"blk.1.exp_probs_b.bias", {8}},
      {"blk.2.ffn_down_exps.weight", {32, 64, 8}},  {"blk.2.ffn_up_shexp.weight", {64, 32}},
  };
  for (const auto& [name, dims] : expected) {
    const gguf::TensorInfo* t = (*file)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dims, dims) << name;
  }
  EXPECT_EQ((*file)->FindTensor("blk.0.ffn_gate_exps.weight"), nullptr);
  file->reset();

  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> again = gguf::GgufFile::Open(path);
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Load(std::move(*again));
  ASSERT_TRUE(model.ok()) << model.status();
  const arch::ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.arch, "deepseek2");
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.head_dim_v, 16);
  EXPECT_EQ(c.n_expert_groups, 4);
  EXPECT_EQ(c.n_group_used, 2);
  EXPECT_EQ(c.n_layer_dense_lead, 1);
  EXPECT_EQ(c.n_ff, 96);
  EXPECT_EQ(c.n_ff_shexp, 32);
  EXPECT_TRUE(c.selection_bias);

  moe::LocalExpertBackend backend(&(*model)->experts(), c.n_expert, ops::NumericPath::kFast,
                                  nullptr);
  auto session = arch::Session::Create(**model, &backend, nullptr, arch::SessionOptions{});
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> logits;
  ASSERT_TRUE((*session)->Evaluate({1, 5, 7, 9}, false, &logits).ok());
  ASSERT_FALSE(logits.empty());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

// --nextn-layers: the blocks follow the main layers in the GLM-4.5 /
// DeepSeek-V3 convention; the main model keeps its layers and the NextN
// block loads as a one-layer model of its own.
TEST(SyntheticDeepseek2Test, NextnBlocksFollowTheMainLayers) {
  ModelSpec spec = TinyDeepseek();
  spec.n_nextn = 1;
  ASSERT_TRUE(spec.Validate().ok()) << spec.Validate();
  const std::string path = ::testing::TempDir() + "/synthetic-deepseek2-nextn.gguf";
  GenerateOptions options;
  options.type = ops::TensorType::kQ8_0;
  options.num_threads = 2;
  ASSERT_TRUE(GenerateModel(spec, options, path).ok());

  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->GetIntOr("deepseek2.block_count", 0), 4);
  EXPECT_EQ(*(*file)->GetIntOr("deepseek2.nextn_predict_layers", 0), 1);
  const gguf::TensorInfo* eh = (*file)->FindTensor("blk.3.nextn.eh_proj.weight");
  ASSERT_NE(eh, nullptr);
  EXPECT_EQ(eh->dims, (std::vector<int64_t>{2 * spec.n_embd, spec.n_embd}));
  for (const char* name : {"blk.3.nextn.enorm.weight", "blk.3.nextn.hnorm.weight",
                           "blk.3.nextn.shared_head_norm.weight", "blk.3.ffn_gate_exps.weight",
                           "blk.3.attn_kv_a_mqa.weight"}) {
    EXPECT_NE((*file)->FindTensor(name), nullptr) << name;
  }
  EXPECT_EQ((*file)->FindTensor("blk.2.nextn.eh_proj.weight"), nullptr);

  absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_layer, 3);
  EXPECT_EQ((*model)->config().n_nextn_layer, 1);
  auto again = gguf::GgufFile::Open(path);
  ASSERT_TRUE(again.ok());
  absl::StatusOr<std::unique_ptr<arch::Model>> nextn = arch::Model::LoadNextn(std::move(*again), 0);
  ASSERT_TRUE(nextn.ok()) << nextn.status();
  EXPECT_EQ((*nextn)->config().n_layer, 1);
  EXPECT_FALSE((*nextn)->config().is_dense_layer(0));
  EXPECT_EQ((*nextn)->experts()[0].size(), static_cast<size_t>(spec.n_expert));

  ModelSpec qwen;
  qwen.n_nextn = 1;
  EXPECT_FALSE(qwen.Validate().ok());
}

}  // namespace
}  // namespace colibri::synthetic
