// `colibri-coordinator run` against llama.cpp's and the exact float64 reference
// logits of the fixture models (acceptance rule in tests/support/golden.h).
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/golden.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using testing::Comparison;
using testing::GoldenCase;
using testing::Row;

struct Param {
  std::string model;
  bool exact;
};

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  std::string name = info.param.model + (info.param.exact ? "_exact" : "_fast");
  for (char& ch : name) {
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

class RunGoldenTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  }
};

// Teacher-forced: the prompt and llama.cpp's greedy tokens in one evaluation.
std::map<int, Row> RunAllLogits(const GoldenCase& c, bool exact) {
  std::vector<int> ids(c.prompt_tokens.begin(), c.prompt_tokens.end());
  ids.insert(ids.end(), c.greedy_tokens.begin(), c.greedy_tokens.end());
  const std::string out = ::testing::TempDir() + "/" + c.model + "." + c.prompt +
                          (exact ? ".exact" : ".fast") + ".f32";
  std::vector<std::string> argv = {testing::BinaryPath("coordinator/colibri-coordinator"),
                                   "run", "--model", c.model_path, "--prompt-tokens",
                                   testing::JoinIds(ids), "--n-predict", "0", "--all-logits",
                                   "--logits-out", out, "--threads", "2"};
  if (exact) argv.push_back("--exact");
  testing::CommandResult r = testing::RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<Row> rows;
  std::string error;
  EXPECT_TRUE(testing::ReadRows(out, c.n_vocab, &rows, &error)) << error;
  std::remove(out.c_str());
  EXPECT_EQ(rows.size(), ids.size());
  std::map<int, Row> by_pos;
  for (int p = 0; p < static_cast<int>(rows.size()); ++p) by_pos[p] = std::move(rows[p]);
  return by_pos;
}

TEST_P(RunGoldenTest, TeacherForcedLogitsMeetTheAcceptanceRule) {
  const Param& param = GetParam();
  std::vector<double> ours, llama;
  for (const std::string& prompt : testing::GoldenPrompts()) {
    GoldenCase c;
    std::string error;
    ASSERT_TRUE(testing::LoadGoldenCase(param.model, prompt, &c, &error)) << error;
    std::map<int, Row> logits = RunAllLogits(c, param.exact);
    Comparison cmp;
    ASSERT_TRUE(testing::Compare(c, logits, &cmp, &error)) << error;
    for (size_t i = 0; i < cmp.positions.size(); ++i) {
      if (param.exact) {
        EXPECT_LE(cmp.ours[i], 1e-3) << prompt << " position " << cmp.positions[i];
        EXPECT_TRUE(cmp.argmax_equal[i]) << prompt << " position " << cmp.positions[i];
      }
    }
    ours.insert(ours.end(), cmp.ours.begin(), cmp.ours.end());
    llama.insert(llama.end(), cmp.llama.begin(), cmp.llama.end());
  }
  const double our_mean = std::accumulate(ours.begin(), ours.end(), 0.0) / ours.size();
  const double llama_mean = std::accumulate(llama.begin(), llama.end(), 0.0) / llama.size();
  const double our_max = *std::max_element(ours.begin(), ours.end());
  const double llama_max = *std::max_element(llama.begin(), llama.end());
  std::printf("%s %s: d(ours, exact) mean %.3g max %.3g; d(llama.cpp, exact) mean %.3g max %.3g "
              "over %zu positions\n",
              param.model.c_str(), param.exact ? "exact" : "fast", our_mean, our_max, llama_mean,
              llama_max, ours.size());
  if (!param.exact) {
    EXPECT_LE(our_mean, 1.25 * llama_mean + 1e-3);
    EXPECT_LE(our_max, 1.25 * llama_max + 1e-3);
  }
}

std::vector<Param> AllParams() {
  std::vector<Param> params;
  for (const std::string& m : testing::AllGoldenModels()) {
    params.push_back({m, true});
    params.push_back({m, false});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RunGoldenTest, ::testing::ValuesIn(AllParams()), ParamName);

// On the F32 models greedy generation must reproduce llama.cpp's tokens exactly.
class RunGreedyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RunGreedyTest, F32ModelReproducesGreedyTokens) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  for (bool exact : {true, false}) {
    for (const std::string& prompt : testing::GoldenPrompts()) {
      GoldenCase c;
      std::string error;
      ASSERT_TRUE(testing::LoadGoldenCase(GetParam(), prompt, &c, &error)) << error;
      std::vector<int> ids(c.prompt_tokens.begin(), c.prompt_tokens.end());
      std::vector<std::string> argv = {
          testing::BinaryPath("coordinator/colibri-coordinator"), "run", "--model", c.model_path,
          "--prompt-tokens", testing::JoinIds(ids), "--n-predict",
          std::to_string(c.greedy_tokens.size()), "--temp", "0", "--ignore-eos",
          "--print-token-ids"};
      if (exact) argv.push_back("--exact");
      testing::CommandResult r = testing::RunCommand(argv);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::string want;
      for (size_t i = 0; i < c.greedy_tokens.size(); ++i) {
        want += (i ? " " : "") + std::to_string(c.greedy_tokens[i]);
      }
      EXPECT_EQ(r.out, want + "\n") << prompt << (exact ? " exact" : " fast");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(F32, RunGreedyTest,
                         ::testing::Values("qwen3moe-tiny-f32", "deepseek2-lite-tiny-f32"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace colibri
