// The decode path (one token at a time against the KV cache) of arch::Session
// against the fixtures' reference logits after each of the first greedy tokens.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>

#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "tests/support/golden.h"

namespace colibri {
namespace {

using testing::Comparison;
using testing::GoldenCase;
using testing::Row;

class DecodeGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  }
};

// Keeps the reference rows at the positions the decode run produced.
GoldenCase Restrict(GoldenCase c, const std::map<int, Row>& ours) {
  for (auto* m : {&c.llama, &c.exact}) {
    for (auto it = m->begin(); it != m->end();) {
      it = ours.count(it->first) ? std::next(it) : m->erase(it);
    }
  }
  return c;
}

TEST_P(DecodeGoldenTest, KvCacheDecodeMatchesReference) {
  const std::string& model_name = GetParam();
  ThreadPool pool(2);
  // The fast path also with a KV cache of half floats (arch::KvType::kF16)
  // and of q8_0 blocks (where the model's rows are multiples of 32), held to
  // bounds against llama.cpp's own run.
  struct Config {
    ops::NumericPath path;
    arch::KvType kv;
  };
  for (const Config& config : {Config{ops::NumericPath::kExact, arch::KvType::kF32},
                               Config{ops::NumericPath::kFast, arch::KvType::kF32},
                               Config{ops::NumericPath::kFast, arch::KvType::kF16},
                               Config{ops::NumericPath::kFast, arch::KvType::kQ8_0}}) {
    const ops::NumericPath path = config.path;
    {
      GoldenCase c;
      std::string error;
      ASSERT_TRUE(testing::LoadGoldenCase(model_name, "english", &c, &error)) << error;
      auto model = arch::Model::Open(c.model_path);
      ASSERT_TRUE(model.ok()) << model.status();
      if (!arch::KvCache::CheckType((*model)->config(), config.kv).ok()) continue;
    }
    std::vector<double> ours, llama;
    for (const std::string& prompt : testing::GoldenPrompts()) {
      GoldenCase c;
      std::string error;
      ASSERT_TRUE(testing::LoadGoldenCase(model_name, prompt, &c, &error)) << error;
      auto model = arch::Model::Open(c.model_path);
      ASSERT_TRUE(model.ok()) << model.status();
      moe::LocalExpertBackend backend(&(*model)->experts(), (*model)->config().n_expert, path,
                                      &pool);
      arch::SessionOptions options;
      options.path = path;
      options.n_batch = 64;  // the long prompt runs in several chunks
      options.kv_type = config.kv;
      auto session = arch::Session::Create(**model, &backend, &pool, options);
      ASSERT_TRUE(session.ok()) << session.status();

      std::map<int, Row> rows;
      std::vector<float> logits;
      const int n_prompt = static_cast<int>(c.prompt_tokens.size());
      ASSERT_TRUE((*session)->Evaluate(c.prompt_tokens, false, &logits).ok());
      rows[n_prompt - 1] = logits;
      for (int g = 0; g < 4; ++g) {
        ASSERT_TRUE((*session)->Evaluate({&c.greedy_tokens[g], 1}, false, &logits).ok());
        rows[n_prompt + g] = logits;
      }
      const GoldenCase restricted = Restrict(c, rows);
      Comparison cmp;
      ASSERT_TRUE(testing::Compare(restricted, rows, &cmp, &error)) << error;
      for (size_t i = 0; i < cmp.positions.size(); ++i) {
        if (path == ops::NumericPath::kExact) {
          EXPECT_LE(cmp.ours[i], 1e-3) << prompt << " position " << cmp.positions[i];
          EXPECT_TRUE(cmp.argmax_equal[i]) << prompt << " position " << cmp.positions[i];
        }
      }
      ours.insert(ours.end(), cmp.ours.begin(), cmp.ours.end());
      llama.insert(llama.end(), cmp.llama.begin(), cmp.llama.end());
    }
    std::printf("%s %s, KV %s: d(ours, exact) mean %.3g max %.3g; llama.cpp mean %.3g max %.3g\n",
                model_name.c_str(), path == ops::NumericPath::kExact ? "exact" : "fast",
                arch::KvTypeName(config.kv),
                std::accumulate(ours.begin(), ours.end(), 0.0) / ours.size(),
                *std::max_element(ours.begin(), ours.end()),
                std::accumulate(llama.begin(), llama.end(), 0.0) / llama.size(),
                *std::max_element(llama.begin(), llama.end()));
    if (path == ops::NumericPath::kFast) {
      const double our_mean = std::accumulate(ours.begin(), ours.end(), 0.0) / ours.size();
      const double llama_mean = std::accumulate(llama.begin(), llama.end(), 0.0) / llama.size();
      const double our_max = *std::max_element(ours.begin(), ours.end());
      const double llama_max = *std::max_element(llama.begin(), llama.end());
      if (config.kv == arch::KvType::kF32) {
        EXPECT_LE(our_mean, 1.25 * llama_mean + 1e-3);
        EXPECT_LE(our_max, 1.25 * llama_max + 1e-3);
      } else if (config.kv == arch::KvType::kF16) {
        // Keys and values rounded to 11 bits add their own error, which these
        // tiny random models amplify (0.003 on the f32 one, up to 1.6 times
        // llama.cpp's on the i-quant mix): held within twice llama.cpp's,
        // far below what a misplaced row or a wrong conversion gives.
        EXPECT_LE(our_mean, 2.0 * llama_mean + 0.01);
        EXPECT_LE(our_max, 2.0 * llama_max + 0.05);
      } else {
        // q8_0 rounds to 8 bits of each block's largest element, 2^-8 where
        // f16 rounds to 2^-11 of each element: on the f32 model (llama.cpp
        // exact there) 0.14 mean, 1.0 at most; elsewhere within 1.6 times
        // llama.cpp's. colibri_kv_type_bench measures the trained demo model.
        EXPECT_LE(our_mean, 2.0 * llama_mean + 0.25);
        EXPECT_LE(our_max, 2.0 * llama_max + 1.5);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecodeGoldenTest,
                         ::testing::ValuesIn(testing::AllGoldenModels()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(SessionTest, ContextOverflowIsAnErrorAndEvaluatesNothing) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  auto model = arch::Model::Open(testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  moe::LocalExpertBackend backend(&(*model)->experts(), (*model)->config().n_expert,
                                  ops::NumericPath::kExact, nullptr);
  arch::SessionOptions options;
  options.n_ctx = 8;
  auto session = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session.ok());
  std::vector<int32_t> tokens(6, 11);
  std::vector<float> logits;
  ASSERT_TRUE((*session)->Evaluate(tokens, false, &logits).ok());
  absl::Status s = (*session)->Evaluate(tokens, false, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_EQ((*session)->n_past(), 6);
  const int32_t bad = (*model)->config().n_vocab;
  EXPECT_EQ((*session)->Evaluate({&bad, 1}, false, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*session)->n_past(), 6);
}

}  // namespace
}  // namespace colibri
