// Model loading from metadata and tensor tables built with the GGUF writer:
// supported families, the errors for what is missing or wrong, tied embeddings.
#include <cmath>
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

}  // namespace
}  // namespace colibri::arch
