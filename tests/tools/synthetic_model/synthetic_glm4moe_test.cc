// The glm4moe (GLM-4.5/4.6) shape of the synthetic generator, with a NextN
// block: the file carries the GGUF conversion's glm4moe keys and tensor names
// (post_attention_norm, q/k/v biases, exp_probs_b, shared experts,
// blk.<n>.nextn.*), and colibri's loader reads the main model and the block
// back with the written hyper-parameters and runs them.
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

// GLM-4.5-Air's structure at a tiny width.
ModelSpec TinyGlm() {
  absl::StatusOr<ModelSpec> s = FindPreset("glm-4.5-air");
  EXPECT_TRUE(s.ok()) << s.status();
  ModelSpec spec = s.ok() ? *s : ModelSpec();
  spec.n_layer = 3;
  spec.n_embd = 64;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.head_dim = 16;
  spec.n_expert = 8;
  spec.n_expert_used = 2;
  spec.n_ff_exp = 32;
  spec.n_ff_dense = 96;
  spec.n_ctx = 256;
  spec.vocab_size = 320;
  return spec;
}

TEST(SyntheticGlm4MoeTest, WritesNextnBlocksTheLoaderReadsAndRuns) {
  const ModelSpec spec = TinyGlm();
  ASSERT_EQ(spec.arch, Architecture::kGlm4Moe);
  ASSERT_EQ(spec.n_nextn, 1);
  ASSERT_TRUE(spec.Validate().ok()) << spec.Validate();
  const std::string path = ::testing::TempDir() + "/synthetic-glm4moe-nextn.gguf";
  GenerateOptions options;
  options.type = ops::TensorType::kQ8_0;
  options.num_threads = 2;
  ASSERT_TRUE(GenerateModel(spec, options, path).ok());

  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->GetStringOr("general.architecture", ""), "glm4moe");
  EXPECT_EQ(*(*file)->GetIntOr("glm4moe.block_count", 0), 4);
  EXPECT_EQ(*(*file)->GetIntOr("glm4moe.nextn_predict_layers", 0), 1);
  EXPECT_EQ(*(*file)->GetIntOr("glm4moe.rope.dimension_count", 0), 8);
  const gguf::TensorInfo* eh = (*file)->FindTensor("blk.3.nextn.eh_proj.weight");
  ASSERT_NE(eh, nullptr);
  EXPECT_EQ(eh->dims, (std::vector<int64_t>{2 * spec.n_embd, spec.n_embd}));
  for (const char* name :
       {"blk.3.nextn.enorm.weight", "blk.3.nextn.hnorm.weight",
        "blk.3.nextn.shared_head_norm.weight", "blk.3.post_attention_norm.weight",
        "blk.3.attn_q.bias", "blk.3.exp_probs_b.bias", "blk.3.ffn_gate_exps.weight",
        "blk.3.ffn_down_shexp.weight", "blk.0.ffn_gate.weight", "blk.1.ffn_up_exps.weight"}) {
    EXPECT_NE((*file)->FindTensor(name), nullptr) << name;
  }
  EXPECT_EQ((*file)->FindTensor("blk.2.nextn.eh_proj.weight"), nullptr);
  EXPECT_EQ((*file)->FindTensor("blk.1.ffn_norm.weight"), nullptr);

  absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const arch::ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.arch, "glm4moe");
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_nextn_layer, 1);
  EXPECT_EQ(c.n_layer_dense_lead, 1);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_EQ(c.n_ff, 96);
  EXPECT_EQ(c.n_ff_shexp, 32);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.shared_expert);
  EXPECT_TRUE(c.selection_bias);
  moe::LocalExpertBackend backend(&(*model)->experts(), c.n_expert, ops::NumericPath::kFast,
                                  nullptr);
  auto session = arch::Session::Create(**model, &backend, nullptr, arch::SessionOptions{});
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> logits;
  ASSERT_TRUE((*session)->Evaluate({1, 5, 7, 9}, false, &logits).ok());
  ASSERT_FALSE(logits.empty());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));

  auto again = gguf::GgufFile::Open(path);
  ASSERT_TRUE(again.ok());
  absl::StatusOr<std::unique_ptr<arch::Model>> nextn = arch::Model::LoadNextn(std::move(*again), 0);
  ASSERT_TRUE(nextn.ok()) << nextn.status();
  EXPECT_EQ((*nextn)->config().n_layer, 1);
  EXPECT_FALSE((*nextn)->config().is_dense_layer(0));
  EXPECT_EQ((*nextn)->experts()[0].size(), static_cast<size_t>(spec.n_expert));
}

TEST(SyntheticGlm4MoeTest, RefusesInconsistentShapes) {
  ModelSpec spec = TinyGlm();
  spec.n_dense_lead = spec.n_layer;  // no MoE layer left
  EXPECT_FALSE(spec.Validate().ok());
  spec = TinyGlm();
  spec.n_nextn = 17;
  EXPECT_FALSE(spec.Validate().ok());
  spec = TinyGlm();
  spec.n_ff_dense = 0;
  EXPECT_FALSE(spec.Validate().ok());
}

}  // namespace
}  // namespace colibri::synthetic
