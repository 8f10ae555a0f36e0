// The real GGUF files in the shared fixtures (written by llama.cpp's tools).
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_fingerprint.h"
#include "tests/model/gguf/gguf_test_util.h"

namespace colibri::gguf {
namespace {

using ::testing::ElementsAre;
using testing::FixturesDir;

// Opens fixtures/<relative>; skips the test when the fixtures are absent.
#define COLIBRI_OPEN_FIXTURE_OR_SKIP(var, relative)                                \
  if (FixturesDir().empty()) GTEST_SKIP() << "fixtures folder not found";    \
  const std::string var##_path = FixturesDir() + "/" + (relative);                 \
  if (std::FILE* probe = std::fopen(var##_path.c_str(), "rb")) {                   \
    std::fclose(probe);                                                            \
  } else {                                                                         \
    GTEST_SKIP() << "fixture " << var##_path << " is absent";                      \
  }                                                                                \
  absl::StatusOr<std::unique_ptr<GgufFile>> var##_or = GgufFile::Open(var##_path); \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status();                                 \
  const GgufFile& var = **var##_or

void ExpectTensorsInsideMapping(const GgufFile& f) {
  for (const TensorInfo& t : f.tensors()) {
    const MappedFile* m = f.mapping(t.split_index);
    ASSERT_NE(m, nullptr);
    EXPECT_GE(t.data, m->data());
    EXPECT_LE(t.offset_in_file + t.n_bytes, m->size()) << t.name;
    EXPECT_EQ(t.offset_in_file % f.alignment(), 0u) << t.name;
  }
}

TEST(GgufFixtureTest, Qwen3MoeF32) {
  COLIBRI_OPEN_FIXTURE_OR_SKIP(f, "models/qwen3moe-tiny-f32.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "qwen3moe");
  EXPECT_EQ(f.tensors().size(), 39u);
  EXPECT_EQ(f.metadata().size(), 23u);
  EXPECT_EQ(f.split_count(), 1);
  for (const TensorInfo& t : f.tensors()) EXPECT_EQ(t.type, ops::TensorType::kF32) << t.name;
  absl::StatusOr<const std::vector<std::string>*> tokens =
      f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)->size(), 50257u);
  ExpectTensorsInsideMapping(f);
}

TEST(GgufFixtureTest, MixtralQ4KM) {
  COLIBRI_OPEN_FIXTURE_OR_SKIP(f, "models/mixtral-tiny-q4_k_m.gguf");
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  const TensorInfo* gate = f.FindTensor("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->type, ops::TensorType::kQ4_K);
  EXPECT_THAT(gate->dims, ElementsAre(256, 256, 8));
  EXPECT_EQ(gate->n_bytes, 256u * 8u * 144u);
  const TensorInfo* output = f.FindTensor("output.weight");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(output->type, ops::TensorType::kQ6_K);
  EXPECT_THAT(output->dims, ElementsAre(256, 32000));
  EXPECT_EQ(output->rows(), 32000);
  EXPECT_EQ((*f.GetStringArray("tokenizer.ggml.tokens"))->size(), 32000u);
  EXPECT_EQ(f.GetFloatArray("tokenizer.ggml.scores")->size(), 32000u);
  EXPECT_EQ(f.GetIntArray("tokenizer.ggml.token_type")->size(), 32000u);
  EXPECT_EQ(*f.GetUint("llama.expert_count"), 8u);
  EXPECT_EQ(*f.GetInt("llama.expert_used_count"), 2);
  ExpectTensorsInsideMapping(f);
}

TEST(GgufFixtureTest, AllModelsOpenWithDistinctStableFingerprints) {
  if (FixturesDir().empty()) GTEST_SKIP() << "fixtures folder not found";
  std::set<std::string> seen;
  int opened = 0;
  for (const char* name :
       {"qwen3moe-tiny-f32", "qwen2moe-tiny-q8_0", "mixtral-tiny-q4_k_m", "olmoe-tiny-f16"}) {
    const std::string path = FixturesDir() + "/models/" + name + ".gguf";
    absl::StatusOr<std::unique_ptr<GgufFile>> a = GgufFile::Open(path);
    if (a.status().code() == absl::StatusCode::kNotFound) continue;
    ASSERT_TRUE(a.ok()) << a.status();
    ++opened;
    ExpectTensorsInsideMapping(**a);
    absl::StatusOr<std::unique_ptr<GgufFile>> b = GgufFile::Open(path);
    ASSERT_TRUE(b.ok()) << b.status();
    const std::string fp = *ModelFingerprint(**a);
    EXPECT_EQ(fp, *ModelFingerprint(**b)) << name;
    EXPECT_TRUE(seen.insert(fp).second) << name;
  }
  if (opened == 0) GTEST_SKIP() << "no fixture models in " << FixturesDir();
}

TEST(GgufFixtureTest, VocabFilesOpen) {
  if (FixturesDir().empty()) GTEST_SKIP() << "fixtures folder not found";
  int opened = 0;
  for (const char* name :
       {"qwen3", "gpt-2", "gpt-neox", "deepseek-llm", "deepseek-coder", "llama-spm", "phi-3"}) {
    const std::string path = FixturesDir() + "/vocab/ggml-vocab-" + name + ".gguf";
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
    if (f.status().code() == absl::StatusCode::kNotFound) continue;
    ASSERT_TRUE(f.ok()) << f.status();
    ++opened;
    absl::StatusOr<const std::vector<std::string>*> tokens =
        (*f)->GetStringArray("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    EXPECT_GT((*tokens)->size(), 30000u) << name;
  }
  if (opened == 0) GTEST_SKIP() << "no vocab fixtures in " << FixturesDir();
}

}  // namespace
}  // namespace colibri::gguf
