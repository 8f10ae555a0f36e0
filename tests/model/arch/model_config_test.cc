// Model loading from metadata and tensor tables built with the GGUF writer:
// supported families, the errors for what is missing or wrong, tied embeddings.
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "model/moe/local_expert_backend.h"

namespace colibri::arch {
namespace {

using ::testing::HasSubstr;

constexpr int kEmbd = 8, kHeads = 2, kKv = 1, kHeadDim = 4, kExperts = 4, kFf = 8, kVocab = 16;

// A one-layer qwen3moe model with F32 weights.
class TinyModelBuilder {
 public:
  TinyModelBuilder() {
    w_.SetValue("general.architecture", gguf::Value::String("qwen3moe"));
    w_.SetValue("qwen3moe.block_count", gguf::Value::Uint32(1));
    w_.SetValue("qwen3moe.context_length", gguf::Value::Uint32(32));
    w_.SetValue("qwen3moe.embedding_length", gguf::Value::Uint32(kEmbd));
    w_.SetValue("qwen3moe.attention.head_count", gguf::Value::Uint32(kHeads));
    w_.SetValue("qwen3moe.attention.head_count_kv", gguf::Value::Uint32(kKv));
    w_.SetValue("qwen3moe.attention.key_length", gguf::Value::Uint32(kHeadDim));
    w_.SetValue("qwen3moe.attention.value_length", gguf::Value::Uint32(kHeadDim));
    w_.SetValue("qwen3moe.expert_count", gguf::Value::Uint32(kExperts));
    w_.SetValue("qwen3moe.expert_used_count", gguf::Value::Uint32(2));
    w_.SetValue("qwen3moe.expert_feed_forward_length", gguf::Value::Uint32(kFf));
    w_.SetValue("qwen3moe.rope.freq_base", gguf::Value::Float32(10000.0f));
    w_.SetValue("qwen3moe.attention.layer_norm_rms_epsilon", gguf::Value::Float32(1e-6f));
  }

  gguf::GgufWriter& writer() { return w_; }

  void AddTensors(bool with_output = true, const std::string& skip = "") {
    Add("token_embd.weight", {kEmbd, kVocab}, skip);
    Add("output_norm.weight", {kEmbd}, skip);
    if (with_output) Add("output.weight", {kEmbd, kVocab}, skip);
    Add("blk.0.attn_norm.weight", {kEmbd}, skip);
    Add("blk.0.attn_q.weight", {kEmbd, kHeads * kHeadDim}, skip);
    Add("blk.0.attn_k.weight", {kEmbd, kKv * kHeadDim}, skip);
    Add("blk.0.attn_v.weight", {kEmbd, kKv * kHeadDim}, skip);
    Add("blk.0.attn_output.weight", {kHeads * kHeadDim, kEmbd}, skip);
    Add("blk.0.attn_q_norm.weight", {kHeadDim}, skip);
    Add("blk.0.attn_k_norm.weight", {kHeadDim}, skip);
    Add("blk.0.ffn_norm.weight", {kEmbd}, skip);
    Add("blk.0.ffn_gate_inp.weight", {kEmbd, kExperts}, skip);
    Add("blk.0.ffn_gate_exps.weight", {kEmbd, kFf, kExperts}, skip);
    Add("blk.0.ffn_up_exps.weight", {kEmbd, kFf, kExperts}, skip);
    Add("blk.0.ffn_down_exps.weight", {kFf, kEmbd, kExperts}, skip);
  }

  void Add(const std::string& name, std::vector<int64_t> dims, const std::string& skip = "") {
    if (name == skip) return;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> v(n);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (float& x : v) x = normal(rng_);
    ASSERT_TRUE(w_.AddF32Tensor(name, dims, v).ok()) << name;
  }

  absl::StatusOr<std::unique_ptr<Model>> Load() {
    bytes_ = w_.Serialize();
    auto file = gguf::GgufFile::FromBytes(bytes_, "tiny.gguf");
    if (!file.ok()) return file.status();
    return Model::Load(std::move(*file));
  }

 private:
  gguf::GgufWriter w_;
  std::mt19937 rng_{42};
  std::vector<uint8_t> bytes_;
};

TEST(ModelConfigTest, LoadsQwen3MoeConventions) {
  TinyModelBuilder b;
  b.AddTensors();
  auto model = b.Load();
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.arch, "qwen3moe");
  EXPECT_EQ(c.n_vocab, kVocab);
  EXPECT_EQ(c.q_dim(), kHeads * kHeadDim);
  EXPECT_EQ(c.rope_type, RopeType::kNeox);
  EXPECT_EQ(c.qk_norm, QkNorm::kPerHead);
  EXPECT_TRUE(c.norm_topk);
  EXPECT_FALSE(c.shared_expert);
  EXPECT_EQ(c.n_ff_exp, kFf);
  EXPECT_FALSE((*model)->tied_embeddings());
}

TEST(ModelConfigTest, UnsupportedArchitectureListsTheSupportedOnes) {
  TinyModelBuilder b;
  b.writer().SetValue("general.architecture", gguf::Value::String("gptj"));
  b.AddTensors();
  auto model = b.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("unsupported architecture 'gptj'"));
  for (const char* arch : {"qwen3moe", "qwen2moe", "llama", "olmoe"}) {
    EXPECT_THAT(model.status().message(), HasSubstr(arch));
  }
}

TEST(ModelConfigTest, MissingRequiredKeyIsNamed) {
  TinyModelBuilder b;
  b.writer().SetValue("general.architecture", gguf::Value::String("olmoe"));
  b.AddTensors();
  auto model = b.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("olmoe.block_count"));
}

TEST(ModelConfigTest, MissingTensorIsNamed) {
  TinyModelBuilder b;
  b.AddTensors(true, "blk.0.attn_k_norm.weight");
  auto model = b.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("blk.0.attn_k_norm.weight is missing"));
}

// A tokenizer with fewer (or more) tokens than embedding rows would produce
// ids without a row, or sample ids without a token.
TEST(ModelConfigTest, TokenizerSizeMustMatchTheEmbeddingRows) {
  for (int n_tokens : {kVocab - 4, kVocab + 4}) {
    TinyModelBuilder b;
    b.AddTensors();
    b.writer().SetValue("tokenizer.ggml.tokens",
                        gguf::Value::StringArray(std::vector<std::string>(n_tokens, "t")));
    auto model = b.Load();
    ASSERT_FALSE(model.ok()) << n_tokens;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(model.status().message(),
                HasSubstr(absl::StrCat("tokenizer.ggml.tokens has ", n_tokens,
                                       " tokens but token_embd.weight has 16 rows")));
  }
  TinyModelBuilder same;
  same.AddTensors();
  same.writer().SetValue("tokenizer.ggml.tokens",
                         gguf::Value::StringArray(std::vector<std::string>(kVocab, "t")));
  EXPECT_TRUE(same.Load().ok());
}

TEST(ModelConfigTest, WrongShapeIsNamed) {
  TinyModelBuilder b;
  b.AddTensors(true, "blk.0.attn_v.weight");
  b.Add("blk.0.attn_v.weight", {kEmbd, 2 * kHeadDim});
  auto model = b.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("tensor blk.0.attn_v.weight has shape (8, 8)"));
}

TEST(ModelConfigTest, UnsupportedTensorTypeIsNamed) {
  TinyModelBuilder b;
  b.AddTensors(true, "blk.0.attn_q.weight");
  ASSERT_TRUE(b.writer()
                  .AddTensor("blk.0.attn_q.weight", ops::TensorType::kI32,
                             {kEmbd, kHeads * kHeadDim},
                             std::vector<uint8_t>(kEmbd * kHeads * kHeadDim * 4))
                  .ok());
  auto model = b.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              HasSubstr("unsupported tensor type I32 in tensor blk.0.attn_q.weight"));
}

TEST(ModelConfigTest, HeadCountMustBeAMultipleOfKvHeads) {
  TinyModelBuilder b;
  b.writer().SetValue("qwen3moe.attention.head_count_kv", gguf::Value::Uint32(3));
  b.AddTensors();
  auto model = b.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("head_count_kv"));
}

// Without output.weight the head reuses the embedding table: logits are
// embd · normed hidden, so they must change with the embedding table.
TEST(ModelConfigTest, TiedEmbeddingsEvaluate) {
  TinyModelBuilder b;
  b.AddTensors(/*with_output=*/false);
  auto model = b.Load();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->tied_embeddings());
  EXPECT_EQ((*model)->output().data, (*model)->token_embd().data);
  moe::LocalExpertBackend backend(&(*model)->experts(), kExperts, ops::NumericPath::kExact,
                                  nullptr);
  auto session = Session::Create(**model, &backend, nullptr, SessionOptions{});
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> logits;
  const std::vector<int32_t> tokens = {1, 5, 7};
  ASSERT_TRUE((*session)->Evaluate(tokens, true, &logits).ok());
  ASSERT_EQ(logits.size(), 3u * kVocab);
  for (float v : logits) EXPECT_TRUE(std::isfinite(v));
}

// A two-layer deepseek2 model (layer 0 dense, layer 1 MoE) with F32 weights:
// MLA with kv_lora_rank 4, qk_nope 4 + rope 2, v head 3; 4 experts in 2 groups.
class TinyDeepseekBuilder {
 public:
  static constexpr int kRank = 4, kNope = 4, kRope = 2, kV = 3, kE = 4, kQLora = 6;

  explicit TinyDeepseekBuilder(bool q_lora = true) : q_lora_(q_lora) {
    const std::string a = "deepseek2.";
    Set("general.architecture", gguf::Value::String("deepseek2"));
    Set(a + "block_count", gguf::Value::Uint32(2));
    Set(a + "context_length", gguf::Value::Uint32(64));
    Set(a + "embedding_length", gguf::Value::Uint32(kEmbd));
    Set(a + "attention.head_count", gguf::Value::Uint32(kHeads));
    Set(a + "attention.head_count_kv", gguf::Value::Uint32(1));
    Set(a + "attention.q_lora_rank", gguf::Value::Uint32(q_lora ? kQLora : 0));
    Set(a + "attention.kv_lora_rank", gguf::Value::Uint32(kRank));
    Set(a + "attention.key_length", gguf::Value::Uint32(kRank + kRope));
    Set(a + "attention.value_length", gguf::Value::Uint32(kRank));
    Set(a + "attention.key_length_mla", gguf::Value::Uint32(kNope + kRope));
    Set(a + "attention.value_length_mla", gguf::Value::Uint32(kV));
    Set(a + "rope.dimension_count", gguf::Value::Uint32(kRope));
    Set(a + "rope.scaling.type", gguf::Value::String("yarn"));
    Set(a + "rope.scaling.factor", gguf::Value::Float32(40.0f));
    Set(a + "rope.scaling.original_context_length", gguf::Value::Uint32(4096));
    Set(a + "rope.scaling.yarn_log_multiplier", gguf::Value::Float32(0.1f));
    Set(a + "expert_count", gguf::Value::Uint32(kE));
    Set(a + "expert_used_count", gguf::Value::Uint32(2));
    Set(a + "expert_feed_forward_length", gguf::Value::Uint32(kFf));
    Set(a + "feed_forward_length", gguf::Value::Uint32(2 * kFf));
    Set(a + "leading_dense_block_count", gguf::Value::Uint32(1));
    Set(a + "expert_shared_count", gguf::Value::Uint32(1));
    Set(a + "expert_group_count", gguf::Value::Uint32(2));
    Set(a + "expert_group_used_count", gguf::Value::Uint32(1));
    Set(a + "expert_weights_scale", gguf::Value::Float32(2.5f));
    Set(a + "expert_weights_norm", gguf::Value::Bool(true));
    Set(a + "expert_gating_func", gguf::Value::Uint32(2));
  }

  void Set(const std::string& key, gguf::Value v) { values_[key] = std::move(v); }
  void Erase(const std::string& key) { values_.erase(key); }
  void Skip(const std::string& tensor) { skip_.push_back(tensor); }
  void Reshape(const std::string& tensor, std::vector<int64_t> dims) { reshape_[tensor] = dims; }

  absl::StatusOr<std::unique_ptr<Model>> Load() {
    gguf::GgufWriter w;
    for (const auto& [k, v] : values_) w.SetValue(k, v);
    auto add = [&](const std::string& name, std::vector<int64_t> dims) {
      for (const std::string& s : skip_) {
        if (s == name) return;
      }
      if (reshape_.count(name)) dims = reshape_[name];
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      std::vector<float> v(n);
      std::normal_distribution<float> normal(0.0f, 0.5f);
      for (float& x : v) x = normal(rng_);
      EXPECT_TRUE(w.AddF32Tensor(name, dims, v).ok()) << name;
    };
    const int q_dim = kHeads * (kNope + kRope);
    add("token_embd.weight", {kEmbd, kVocab});
    add("output_norm.weight", {kEmbd});
    add("output.weight", {kEmbd, kVocab});
    for (int il = 0; il < 2; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      add(p + "attn_norm.weight", {kEmbd});
      if (q_lora_) {
        add(p + "attn_q_a.weight", {kEmbd, kQLora});
        add(p + "attn_q_a_norm.weight", {kQLora});
        add(p + "attn_q_b.weight", {kQLora, q_dim});
      } else {
        add(p + "attn_q.weight", {kEmbd, q_dim});
      }
      add(p + "attn_kv_a_mqa.weight", {kEmbd, kRank + kRope});
      add(p + "attn_kv_a_norm.weight", {kRank});
      add(p + "attn_k_b.weight", {kNope, kRank, kHeads});
      add(p + "attn_v_b.weight", {kRank, kV, kHeads});
      add(p + "attn_output.weight", {kHeads * kV, kEmbd});
      add(p + "ffn_norm.weight", {kEmbd});
      if (il == 0) {
        add(p + "ffn_gate.weight", {kEmbd, 2 * kFf});
        add(p + "ffn_up.weight", {kEmbd, 2 * kFf});
        add(p + "ffn_down.weight", {2 * kFf, kEmbd});
        continue;
      }
      add(p + "ffn_gate_inp.weight", {kEmbd, kE});
      add(p + "exp_probs_b.bias", {kE});
      add(p + "ffn_gate_exps.weight", {kEmbd, kFf, kE});
      add(p + "ffn_up_exps.weight", {kEmbd, kFf, kE});
      add(p + "ffn_down_exps.weight", {kFf, kEmbd, kE});
      add(p + "ffn_gate_shexp.weight", {kEmbd, kFf});
      add(p + "ffn_up_shexp.weight", {kEmbd, kFf});
      add(p + "ffn_down_shexp.weight", {kFf, kEmbd});
    }
    bytes_ = w.Serialize();
    auto file = gguf::GgufFile::FromBytes(bytes_, "tiny.gguf");
    if (!file.ok()) return file.status();
    return Model::Load(std::move(*file));
  }

 private:
  bool q_lora_;
  std::map<std::string, gguf::Value> values_;
  std::vector<std::string> skip_;
  std::map<std::string, std::vector<int64_t>> reshape_;
  std::mt19937 rng_{7};
  std::vector<uint8_t> bytes_;
};

void ExpectLoadError(TinyDeepseekBuilder& b, const std::string& needle) {
  auto model = b.Load();
  ASSERT_FALSE(model.ok()) << "expected an error naming " << needle;
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
  EXPECT_THAT(model.status().message(), HasSubstr(needle));
}

TEST(Deepseek2ConfigTest, LoadsAndEvaluatesBothQPaths) {
  for (bool q_lora : {true, false}) {
    TinyDeepseekBuilder b(q_lora);
    auto model = b.Load();
    ASSERT_TRUE(model.ok()) << model.status();
    const ModelConfig& c = (*model)->config();
    EXPECT_EQ(c.attention, AttentionKind::kMla);
    EXPECT_EQ(c.q_lora_rank, q_lora ? TinyDeepseekBuilder::kQLora : 0);
    EXPECT_EQ(c.head_dim, 6);
    EXPECT_EQ(c.qk_nope(), 4);
    EXPECT_EQ(c.kv_cache_floats_per_token(), 6);             // latent 4 + rope 2
    EXPECT_EQ(c.kv_expanded_floats_per_token(), 2 * (6 + 3));  // per head k and v
    EXPECT_TRUE(c.is_dense_layer(0));
    EXPECT_FALSE(c.is_dense_layer(1));
    EXPECT_TRUE((*model)->experts()[0].empty());
    EXPECT_EQ((*model)->experts()[1].size(), 4u);
    // mscale = 1 + 0.1 ln 40 = 1.368888; kq_scale = mscale^2 / sqrt(6).
    EXPECT_NEAR(c.attention_scale(), 1.368888 * 1.368888 / std::sqrt(6.0), 1e-5);
    moe::LocalExpertBackend backend(&(*model)->experts(), c.n_expert, ops::NumericPath::kExact,
                                    nullptr);
    auto session = Session::Create(**model, &backend, nullptr, SessionOptions{});
    ASSERT_TRUE(session.ok()) << session.status();
    std::vector<float> logits;
    ASSERT_TRUE((*session)->Evaluate({1, 5, 7}, true, &logits).ok());
    ASSERT_EQ(logits.size(), 3u * kVocab);
    for (float v : logits) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(Deepseek2ConfigTest, GroupCountThatDoesNotDivideTheExperts) {
  TinyDeepseekBuilder b;
  b.Set("deepseek2.expert_group_count", gguf::Value::Uint32(3));
  ExpectLoadError(b, "expert_group_count 3 does not divide expert_count 4");
}

TEST(Deepseek2ConfigTest, ZeroOrHugeGroupCounts) {
  for (uint32_t groups : {0u, 8u, ~0u}) {
    TinyDeepseekBuilder b;  // 4 experts
    b.Set("deepseek2.expert_group_count", gguf::Value::Uint32(groups));
    auto model = b.Load();
    ASSERT_FALSE(model.ok()) << groups;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
    EXPECT_THAT(model.status().message(), HasSubstr("expert_group_count")) << groups;
  }
}

// Tensors of the right size but the wrong rank: the latent projections and
// the split k_b / v_b.
TEST(Deepseek2ConfigTest, WrongTensorRanksAreRefused) {
  using B = TinyDeepseekBuilder;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> cases = {
      {"blk.0.attn_kv_a_mqa.weight", {kEmbd * (B::kRank + B::kRope)}},
      {"blk.1.attn_k_b.weight", {B::kNope, B::kRank * kHeads}},
      {"blk.1.attn_v_b.weight", {B::kRank, B::kV, kHeads, 1}},
      {"blk.0.attn_q_a.weight", {kEmbd, B::kQLora, 1}},
      {"blk.1.exp_probs_b.bias", {B::kE, 1}},
  };
  for (const auto& [name, dims] : cases) {
    TinyDeepseekBuilder b;
    b.Reshape(name, dims);
    ExpectLoadError(b, name);
  }
}

TEST(Deepseek2ConfigTest, GroupsUsedBeyondTheGroups) {
  TinyDeepseekBuilder b;
  b.Set("deepseek2.expert_group_used_count", gguf::Value::Uint32(3));
  ExpectLoadError(b, "expert_group_used_count 3");
  TinyDeepseekBuilder zero;
  zero.Set("deepseek2.expert_group_used_count", gguf::Value::Uint32(0));
  ExpectLoadError(zero, "expert_group_used_count 0");
}

TEST(Deepseek2ConfigTest, TopKLargerThanTheUsableGroups) {
  TinyDeepseekBuilder b;  // 1 group of 2 experts usable
  b.Set("deepseek2.expert_used_count", gguf::Value::Uint32(3));
  ExpectLoadError(b, "expert_used_count 3 exceeds the experts of 1 groups");
}

TEST(Deepseek2ConfigTest, WrongLatentRank) {
  TinyDeepseekBuilder b;
  b.Set("deepseek2.attention.kv_lora_rank", gguf::Value::Uint32(5));
  ExpectLoadError(b, "tensor blk.0.attn_kv_a_mqa.weight has shape (8, 6), expected (8, 7)");
  TinyDeepseekBuilder zero;
  zero.Set("deepseek2.attention.kv_lora_rank", gguf::Value::Uint32(0));
  ExpectLoadError(zero, "MLA needs kv_lora_rank > 0");
  TinyDeepseekBuilder q;
  q.Set("deepseek2.attention.q_lora_rank", gguf::Value::Uint32(7));
  ExpectLoadError(q, "tensor blk.0.attn_q_a.weight has shape (8, 6), expected (8, 7)");
}

TEST(Deepseek2ConfigTest, WrongSplitKvTensorShape) {
  TinyDeepseekBuilder b;
  b.Reshape("blk.1.attn_k_b.weight", {4, 4, 3});
  ExpectLoadError(b, "tensor blk.1.attn_k_b.weight has shape (4, 4, 3), expected (4, 4, 2)");
}

TEST(Deepseek2ConfigTest, MissingTensorsAreNamed) {
  for (const char* name : {"blk.0.attn_k_b.weight", "blk.1.attn_v_b.weight",
                           "blk.0.attn_kv_a_norm.weight", "blk.0.ffn_gate.weight",
                           "blk.1.ffn_down_shexp.weight", "blk.0.attn_q_a_norm.weight"}) {
    TinyDeepseekBuilder b;
    b.Skip(name);
    ExpectLoadError(b, std::string(name) + " is missing");
  }
}

TEST(Deepseek2ConfigTest, MissingMlaKeysAreNamed) {
  for (const char* key : {"attention.kv_lora_rank", "attention.key_length_mla",
                          "attention.value_length_mla"}) {
    TinyDeepseekBuilder b;
    b.Erase(std::string("deepseek2.") + key);
    ExpectLoadError(b, std::string("deepseek2.") + key + " is missing");
  }
}

TEST(Deepseek2ConfigTest, BadValuesOfTheNewKeys) {
  TinyDeepseekBuilder kv;
  kv.Set("deepseek2.attention.head_count_kv", gguf::Value::Uint32(2));
  ExpectLoadError(kv, "MLA needs 1");
  TinyDeepseekBuilder gating;
  gating.Set("deepseek2.expert_gating_func", gguf::Value::Uint32(3));
  ExpectLoadError(gating, "expert_gating_func 3");
  TinyDeepseekBuilder dense;
  dense.Set("deepseek2.leading_dense_block_count", gguf::Value::Uint32(5));
  ExpectLoadError(dense, "leading_dense_block_count 5");
  TinyDeepseekBuilder nextn;
  nextn.Set("deepseek2.nextn_predict_layers", gguf::Value::Uint32(2));
  ExpectLoadError(nextn, "nextn_predict_layers 2");
  TinyDeepseekBuilder rope;
  rope.Set("deepseek2.rope.scaling.type", gguf::Value::String("longrope"));
  ExpectLoadError(rope, "rope.scaling.type 'longrope'");
  TinyDeepseekBuilder yarn;
  yarn.Set("deepseek2.rope.scaling.factor", gguf::Value::Float32(0.5f));
  ExpectLoadError(yarn, "yarn needs rope.scaling.factor >= 1");
  TinyDeepseekBuilder mla_rope;  // no non-rotated part left
  mla_rope.Set("deepseek2.attention.key_length_mla", gguf::Value::Uint32(2));
  ExpectLoadError(mla_rope, "key_length_mla > rope.dimension_count");
}

// A NextN block counted in block_count is not run: the model has one layer
// fewer and needs no tensors for it.
TEST(Deepseek2ConfigTest, NextnLayersAreNotRun) {
  TinyDeepseekBuilder b;
  b.Set("deepseek2.block_count", gguf::Value::Uint32(3));
  b.Set("deepseek2.nextn_predict_layers", gguf::Value::Uint32(1));
  auto model = b.Load();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_layer, 2);
  EXPECT_EQ((*model)->config().n_nextn_layer, 1);
}

// A gpt-oss model with F32 weights, `layers` layers (even ones sliding-window
// of `window` positions), 4 experts top-2.
class TinyGptOssBuilder {
 public:
  TinyGptOssBuilder(int layers, int window) : layers_(layers) {
    const std::string a = "gpt-oss.";
    Set("general.architecture", gguf::Value::String("gpt-oss"));
    Set(a + "block_count", gguf::Value::Uint32(layers));
    Set(a + "context_length", gguf::Value::Uint32(64));
    Set(a + "embedding_length", gguf::Value::Uint32(kEmbd));
    Set(a + "attention.head_count", gguf::Value::Uint32(kHeads));
    Set(a + "attention.head_count_kv", gguf::Value::Uint32(kKv));
    Set(a + "attention.key_length", gguf::Value::Uint32(kHeadDim));
    Set(a + "attention.value_length", gguf::Value::Uint32(kHeadDim));
    Set(a + "attention.sliding_window", gguf::Value::Uint32(window));
    Set(a + "rope.scaling.type", gguf::Value::String("yarn"));
    Set(a + "rope.scaling.factor", gguf::Value::Float32(32.0f));
    Set(a + "rope.scaling.original_context_length", gguf::Value::Uint32(4096));
    Set(a + "expert_count", gguf::Value::Uint32(kExperts));
    Set(a + "expert_used_count", gguf::Value::Uint32(2));
    Set(a + "expert_feed_forward_length", gguf::Value::Uint32(kFf));
  }

  void Set(const std::string& key, gguf::Value v) { values_[key] = std::move(v); }
  void Erase(const std::string& key) { values_.erase(key); }
  void Skip(const std::string& tensor) { skip_.push_back(tensor); }
  void Reshape(const std::string& tensor, std::vector<int64_t> dims) { reshape_[tensor] = dims; }

  absl::StatusOr<std::unique_ptr<Model>> Load() {
    gguf::GgufWriter w;
    for (const auto& [k, v] : values_) w.SetValue(k, v);
    auto add = [&](const std::string& name, std::vector<int64_t> dims) {
      for (const std::string& s : skip_) {
        if (s == name) return;
      }
      if (reshape_.count(name)) dims = reshape_[name];
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      std::vector<float> v(n);
      std::normal_distribution<float> normal(0.0f, 0.5f);
      for (float& x : v) x = normal(rng_);
      EXPECT_TRUE(w.AddF32Tensor(name, dims, v).ok()) << name;
    };
    add("token_embd.weight", {kEmbd, kVocab});
    add("output_norm.weight", {kEmbd});
    add("output.weight", {kEmbd, kVocab});
    for (int il = 0; il < layers_; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      add(p + "attn_norm.weight", {kEmbd});
      add(p + "attn_q.weight", {kEmbd, kHeads * kHeadDim});
      add(p + "attn_k.weight", {kEmbd, kKv * kHeadDim});
      add(p + "attn_v.weight", {kEmbd, kKv * kHeadDim});
      add(p + "attn_q.bias", {kHeads * kHeadDim});
      add(p + "attn_k.bias", {kKv * kHeadDim});
      add(p + "attn_v.bias", {kKv * kHeadDim});
      add(p + "attn_output.weight", {kHeads * kHeadDim, kEmbd});
      add(p + "attn_output.bias", {kEmbd});
      add(p + "attn_sinks.weight", {kHeads});
      add(p + "post_attention_norm.weight", {kEmbd});
      add(p + "ffn_gate_inp.weight", {kEmbd, kExperts});
      add(p + "ffn_gate_inp.bias", {kExperts});
      add(p + "ffn_gate_exps.weight", {kEmbd, kFf, kExperts});
      add(p + "ffn_up_exps.weight", {kEmbd, kFf, kExperts});
      add(p + "ffn_down_exps.weight", {kFf, kEmbd, kExperts});
      add(p + "ffn_gate_exps.bias", {kFf, kExperts});
      add(p + "ffn_up_exps.bias", {kFf, kExperts});
      add(p + "ffn_down_exps.bias", {kEmbd, kExperts});
    }
    bytes_ = w.Serialize();
    auto file = gguf::GgufFile::FromBytes(bytes_, "tiny.gguf");
    if (!file.ok()) return file.status();
    return Model::Load(std::move(*file));
  }

 private:
  int layers_;
  std::map<std::string, gguf::Value> values_;
  std::vector<std::string> skip_;
  std::map<std::string, std::vector<int64_t>> reshape_;
  std::mt19937 rng_{11};
  std::vector<uint8_t> bytes_;
};

// Last-position logits of `tokens` evaluated in chunks of n_batch.
std::vector<float> LastLogits(const Model& model, const std::vector<int32_t>& tokens,
                              int n_batch) {
  moe::LocalExpertBackend backend(&model.experts(), model.config().n_expert,
                                  ops::NumericPath::kExact, nullptr);
  SessionOptions options;
  options.n_ctx = 32;
  options.n_batch = n_batch;
  auto session = Session::Create(model, &backend, nullptr, options);
  EXPECT_TRUE(session.ok()) << session.status();
  std::vector<float> logits;
  for (size_t i = 0; i < tokens.size(); i += n_batch) {
    const size_t n = std::min<size_t>(n_batch, tokens.size() - i);
    EXPECT_TRUE((*session)->Evaluate({tokens.data() + i, n}, false, &logits).ok());
  }
  return logits;
}

TEST(GptOssConfigTest, LoadsWithWindowLayersSinksAndExpertBiases) {
  TinyGptOssBuilder b(3, 4);
  auto model = b.Load();
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  EXPECT_TRUE(c.is_window_layer(0));
  EXPECT_FALSE(c.is_window_layer(1));
  EXPECT_TRUE(c.is_window_layer(2));
  EXPECT_NEAR(c.rope_magnitude, 1.0 + 0.1 * std::log(32.0), 1e-6);
  EXPECT_NE((*model)->layer(1).sinks, nullptr);
  EXPECT_NE((*model)->layer(1).bo, nullptr);
  const moe::ExpertWeights& w = (*model)->experts()[2][3];
  EXPECT_TRUE(w.has_bias());
  EXPECT_EQ(w.activation, moe::Activation::kSwigluOai);
  // Expert 3's gate bias is column 3 of the [n_ff, n_expert] tensor.
  EXPECT_EQ(w.gate_bias, (*model)->experts()[2][0].gate_bias + 3 * kFf);
}

// One sliding-window layer of 3: the last position reads positions 7..9 only,
// so replacing tokens 0..6 leaves its logits bitwise the same; changing token
// 7 does not. Decoding one token at a time (the ring of window + n_batch - 1
// = 3 rows wraps several times) gives the same bits as one batch.
TEST(GptOssConfigTest, SlidingWindowSeesOnlyTheWindowAndTheRingWraps) {
  TinyGptOssBuilder b(1, 3);
  auto model = b.Load();
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int32_t> early = tokens;
  for (int i = 0; i < 7; ++i) early[i] = 15 - i;
  std::vector<int32_t> in_window = tokens;
  in_window[7] = 0;
  const std::vector<float> base = LastLogits(**model, tokens, 16);
  EXPECT_EQ(LastLogits(**model, early, 16), base);
  EXPECT_NE(LastLogits(**model, in_window, 16), base);
  EXPECT_EQ(LastLogits(**model, tokens, 1), base);
  EXPECT_EQ(LastLogits(**model, tokens, 4), base);
}

TEST(GptOssConfigTest, BadWindowSizes) {
  TinyGptOssBuilder zero(2, 0);
  auto model = zero.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("gpt-oss.attention.sliding_window 0 must be > 0"));
  TinyGptOssBuilder missing(2, 4);
  missing.Erase("gpt-oss.attention.sliding_window");
  model = missing.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("gpt-oss.attention.sliding_window is missing"));
}

// A window wider than any context (or than int) is clamped to the context by
// the cache, never overflows it; a window that is not an integer is refused.
TEST(GptOssConfigTest, HugeOrMistypedWindowSizes) {
  for (uint32_t window : {uint32_t{1} << 31, ~uint32_t{0}}) {
    TinyGptOssBuilder huge(2, 4);
    huge.Set("gpt-oss.attention.sliding_window", gguf::Value::Uint32(window));
    auto model = huge.Load();
    if (model.ok()) {
      // Loaded: the window then covers the whole context, like a full layer.
      TinyGptOssBuilder full(2, 64);
      auto reference = full.Load();
      ASSERT_TRUE(reference.ok()) << reference.status();
      EXPECT_EQ(LastLogits(**model, {1, 2, 3, 4, 5, 6, 7}, 3),
                LastLogits(**reference, {1, 2, 3, 4, 5, 6, 7}, 3))
          << window;
    } else {
      EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
      EXPECT_THAT(model.status().message(), HasSubstr("sliding_window")) << window;
    }
  }
  TinyGptOssBuilder text(2, 4);
  text.Set("gpt-oss.attention.sliding_window", gguf::Value::String("4"));
  auto model = text.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("sliding_window"));
}

// Tensors of the right size but the wrong rank (number of dimensions).
TEST(GptOssConfigTest, WrongTensorRanksAreRefused) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> cases = {
      {"blk.0.attn_sinks.weight", {kHeads / 2, 2}},
      {"blk.1.ffn_gate_exps.bias", {kFf * kExperts}},
      {"blk.0.ffn_down_exps.bias", {kEmbd, kExperts, 1, 1}},
      {"blk.1.ffn_gate_inp.bias", {kExperts, 1, 1}},
      {"blk.0.ffn_up_exps.weight", {kEmbd, kFf * kExperts}},
  };
  for (const auto& [name, dims] : cases) {
    TinyGptOssBuilder b(2, 4);
    b.Reshape(name, dims);
    auto model = b.Load();
    ASSERT_FALSE(model.ok()) << name;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
    EXPECT_THAT(model.status().message(), HasSubstr(name));
  }
}

TEST(GptOssConfigTest, MissingOrMisshapenTensorsAreNamed) {
  for (const char* name : {"blk.1.attn_sinks.weight", "blk.0.attn_output.bias",
                           "blk.1.ffn_gate_inp.bias", "blk.0.ffn_down_exps.bias", "output.weight"}) {
    TinyGptOssBuilder b(2, 4);
    b.Skip(name);
    auto model = b.Load();
    ASSERT_FALSE(model.ok()) << name;
    EXPECT_THAT(model.status().message(), HasSubstr(std::string(name) + " is missing"));
  }
  TinyGptOssBuilder b(2, 4);
  b.Reshape("blk.0.ffn_up_exps.bias", {kExperts, kFf});
  auto model = b.Load();
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(),
              HasSubstr("tensor blk.0.ffn_up_exps.bias has shape (4, 8), expected (8, 4)"));
}

}  // namespace
}  // namespace colibri::arch
