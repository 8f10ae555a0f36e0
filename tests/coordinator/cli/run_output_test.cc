// What `colibri-coordinator run` prints: valid UTF-8 whatever bytes the model
// emits (as serve sends them); the same tokens whether the weights were copied
// into RAM (the default) or stay mapped from the file (--mmap).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/moe/routing_trace.h"
#include "gtest/gtest.h"
#include "tests/support/coordinator_run.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // cut short
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

TEST(RunOutputTest, IsValidUtf8WhateverTheModelEmits) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  // Near-uniform sampling over a byte-level vocabulary: with this seed the
  // model emits byte tokens that are not UTF-8 on their own.
  const testing::CommandResult r = testing::RunCommand(
      {testing::BinaryPath("coordinator/colibri-coordinator"), "run", "--model",
       testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf", "--prompt", "Hello",
       "--n-predict", "500", "--temp", "100", "--seed", "1", "--ignore-eos", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(r.out.size(), 500u);
  EXPECT_TRUE(IsValidUtf8(r.out)) << r.out;
}

// The timing lines on stderr: the generation's rate, and its tokens' times in
// order (min <= median <= p90 <= max), one per token fed back (the last of the
// 24 is sampled, not fed back).
TEST(RunOutputTest, ReportsEveryFedBackTokensTime) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const testing::CommandResult r = testing::RunCommand(
      {testing::BinaryPath("coordinator/colibri-coordinator"), "run", "--model",
       testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf", "--prompt", "Hello",
       "--n-predict", "24", "--temp", "0", "--ignore-eos", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("generation: 24 tokens in "), std::string::npos) << r.err;
  const size_t at = r.err.find("per token: median ");
  ASSERT_NE(at, std::string::npos) << r.err;
  double median = 0, min = 0, p90 = 0, max = 0;
  int fed = 0;
  ASSERT_EQ(std::sscanf(r.err.c_str() + at,
                        "per token: median %lf ms, min %lf, p90 %lf, max %lf (%d tokens fed back)",
                        &median, &min, &p90, &max, &fed),
            5)
      << r.err;
  EXPECT_EQ(fed, 23);
  EXPECT_GT(min, 0.0);
  EXPECT_LE(min, median);
  EXPECT_LE(median, p90);
  EXPECT_LE(p90, max);
}

// `run` of `model` on `prompt`: 24 greedy tokens (EOS ignored) printed as
// ids, 2 threads.
std::vector<std::string> GreedyIdsArgs(const std::string& model, const std::string& prompt) {
  return {testing::BinaryPath("coordinator/colibri-coordinator"),
          "run",
          "--model",
          model,
          "--prompt",
          prompt,
          "--n-predict",
          "24",
          "--temp",
          "0",
          "--ignore-eos",
          "--print-token-ids",
          "--threads",
          "2"};
}

TEST(RunOutputTest, TheSameTokensWithTheWeightsInRamOrMapped) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const std::vector<std::string> args =
      GreedyIdsArgs(testing::FixturesDir() + "/models/qwen2moe-tiny-q8_0.gguf", "Once upon a time");
  const testing::CommandResult in_ram = testing::RunCommand(args);
  ASSERT_EQ(in_ram.exit_code, 0) << in_ram.err;
  EXPECT_NE(in_ram.err.find("MiB copied into RAM on huge pages (every expert runs here)"),
            std::string::npos)
      << in_ram.err;
  std::vector<std::string> mapped_args = args;
  mapped_args.push_back("--mmap");
  const testing::CommandResult mapped = testing::RunCommand(mapped_args);
  ASSERT_EQ(mapped.exit_code, 0) << mapped.err;
  EXPECT_EQ(mapped.err.find("copied into RAM"), std::string::npos) << mapped.err;
  EXPECT_FALSE(in_ram.out.empty());
  EXPECT_EQ(in_ram.out, mapped.out);
  // In RAM in the file's order (the default interleaves the Q8_0 matrices
  // where the kernels have tiles for that layout): the same tokens.
  std::vector<std::string> file_order_args = args;
  file_order_args.push_back("--gguf-order");
  const testing::CommandResult file_order = testing::RunCommand(file_order_args);
  ASSERT_EQ(file_order.exit_code, 0) << file_order.err;
  EXPECT_NE(file_order.err.find("MiB copied into RAM"), std::string::npos) << file_order.err;
  EXPECT_EQ(file_order.err.find("interleaved"), std::string::npos) << file_order.err;
  EXPECT_EQ(in_ram.out, file_order.out);
}

// The same for gpt-oss's MXFP4 experts, which the AVX2 kernels read in a
// layout of their own (8 rows' codes four bytes at a time): the same tokens
// as in the file's order.
TEST(RunOutputTest, InterleavedMxfp4ExpertsGiveTheFileOrdersTokens) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const std::vector<std::string> args = GreedyIdsArgs(
      testing::FixturesDir() + "/models/gpt-oss-tiny-mxfp4.gguf", "The old lighthouse keeper");
  const testing::CommandResult interleaved = testing::RunCommand(args);
  ASSERT_EQ(interleaved.exit_code, 0) << interleaved.err;
  std::vector<std::string> file_order_args = args;
  file_order_args.push_back("--gguf-order");
  const testing::CommandResult file_order = testing::RunCommand(file_order_args);
  ASSERT_EQ(file_order.exit_code, 0) << file_order.err;
  EXPECT_FALSE(interleaved.out.empty());
  EXPECT_EQ(interleaved.out, file_order.out);
}

// Files of one type (colibri-make-model's demo shape) whose matrices the
// model interleaves (Q4_0, Q4_1, Q5_0, IQ4_NL, Q6_K): they give the file order's
// tokens and logits, bit for bit.
TEST(RunOutputTest, InterleavedTypesGiveTheFileOrdersTokensAndLogits) {
  const std::string dir = ::testing::TempDir();
  for (const std::string type : {"q4_0", "q4_1", "q5_0", "iq4_nl", "q6_k"}) {
    SCOPED_TRACE(type);
    const std::string model = dir + "/run-output-" + type + ".gguf";
    const testing::CommandResult made =
        testing::RunCommand({testing::BinaryPath("tools/colibri-make-model"), "--preset", "demo",
                             "--type", type, "--out", model});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    auto run = [&](const std::string& logits, bool file_order) {
      std::vector<std::string> args = {testing::BinaryPath("coordinator/colibri-coordinator"),
                                       "run",
                                       "--model",
                                       model,
                                       "--prompt",
                                       "one two three four",
                                       "--n-predict",
                                       "16",
                                       "--temp",
                                       "0",
                                       "--ignore-eos",
                                       "--print-token-ids",
                                       "--threads",
                                       "2",
                                       "--logits-out",
                                       logits};
      if (file_order) args.push_back("--gguf-order");
      return testing::RunCommand(args);
    };
    const std::string interleaved_logits = dir + "/" + type + "-interleaved.f32";
    const std::string file_order_logits = dir + "/" + type + "-file-order.f32";
    const testing::CommandResult interleaved = run(interleaved_logits, false);
    ASSERT_EQ(interleaved.exit_code, 0) << interleaved.err;
    const testing::CommandResult file_order = run(file_order_logits, true);
    ASSERT_EQ(file_order.exit_code, 0) << file_order.err;
    EXPECT_FALSE(interleaved.out.empty());
    EXPECT_EQ(interleaved.out, file_order.out);
    const std::string a = testing::ReadAll(interleaved_logits);
    const std::string b = testing::ReadAll(file_order_logits);
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "the logits differ";
  }
}

// --kv-type: f16 generates (and says so on the summary line) for standard
// and latent attention (deepseek2), q8_0 for standard attention, and refuses
// deepseek2's latent rows of 80 naming them; f32 is the default.
TEST(RunOutputTest, KvTypeF16Generates) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  auto args = [](const std::string& model) {
    return std::vector<std::string>{testing::BinaryPath("coordinator/colibri-coordinator"),
                                    "run",
                                    "--model",
                                    testing::FixturesDir() + "/models/" + model,
                                    "--prompt",
                                    "Once upon a time",
                                    "--n-predict",
                                    "8",
                                    "--temp",
                                    "0",
                                    "--ignore-eos",
                                    "--print-token-ids"};
  };
  const testing::CommandResult plain = testing::RunCommand(args("qwen2moe-tiny-q8_0.gguf"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.err.find("KV cache f32"), std::string::npos) << plain.err;
  std::vector<std::string> half = args("qwen2moe-tiny-q8_0.gguf");
  half.insert(half.end(), {"--kv-type", "f16"});
  const testing::CommandResult f16 = testing::RunCommand(half);
  ASSERT_EQ(f16.exit_code, 0) << f16.err;
  EXPECT_NE(f16.err.find("KV cache f16"), std::string::npos) << f16.err;
  EXPECT_FALSE(f16.out.empty());

  std::vector<std::string> mla = args("deepseek2-tiny-q8_0.gguf");
  mla.insert(mla.end(), {"--kv-type", "f16"});
  const testing::CommandResult latent = testing::RunCommand(mla);
  ASSERT_EQ(latent.exit_code, 0) << latent.err;
  EXPECT_NE(latent.err.find("KV cache f16"), std::string::npos) << latent.err;
  EXPECT_FALSE(latent.out.empty());

  std::vector<std::string> q8 = args("qwen2moe-tiny-q8_0.gguf");
  q8.insert(q8.end(), {"--kv-type", "q8_0"});
  const testing::CommandResult eight = testing::RunCommand(q8);
  ASSERT_EQ(eight.exit_code, 0) << eight.err;
  EXPECT_NE(eight.err.find("KV cache q8_0"), std::string::npos) << eight.err;
  EXPECT_FALSE(eight.out.empty());
  std::vector<std::string> mla8 = args("deepseek2-tiny-q8_0.gguf");
  mla8.insert(mla8.end(), {"--kv-type", "q8_0"});
  const testing::CommandResult refused = testing::RunCommand(mla8);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("latent row (kv_lora_rank + rope dims) is 80"), std::string::npos)
      << refused.err;
}

// --trace-routing: one R record per MoE layer per forward step (the prompt's
// step, then one per fed-back token), each routing every token to top-k
// experts, and with --prefetch-depth 1 the predictor's hints for every MoE
// layer of a step (the first from the step's input) before its R record.
TEST(RunOutputTest, TraceRoutingRecordsEveryStepsLayers) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/run_output_trace." +
                           std::to_string(::getpid());
  const testing::CommandResult r = testing::RunCommand(
      {testing::BinaryPath("coordinator/colibri-coordinator"), "run", "--model",
       testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf", "--prompt-tokens", "1,2,3",
       "--n-predict", "5", "--temp", "0", "--ignore-eos", "--threads", "1", "--prefetch-depth",
       "1", "--trace-routing", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<std::vector<moe::TraceRecord>> records = moe::ReadRoutingTrace(path);
  ASSERT_TRUE(records.ok()) << records.status();
  int routes = 0;
  int hints = 0;
  int64_t last_step = -1;
  int route_tokens_step0 = 0;
  std::set<std::pair<int64_t, int>> hinted;  // (step, layer)
  for (const moe::TraceRecord& rec : *records) {
    if (rec.kind == moe::TraceRecord::Kind::kHint) {
      ++hints;
      hinted.insert({rec.step, rec.layer});
      continue;
    }
    ++routes;
    EXPECT_TRUE(hinted.count({rec.step, rec.layer}))
        << "step " << rec.step << " layer " << rec.layer << " routed without a hint before";
    last_step = rec.step;
    int tokens = 0;
    for (const auto& [e, n] : rec.experts) tokens += n;
    if (rec.step == 0 && rec.layer == 0) route_tokens_step0 = tokens;
  }
  EXPECT_EQ(last_step, 4);  // the prompt's step and 4 fed-back tokens
  EXPECT_GT(routes, 0);
  EXPECT_EQ(routes % (last_step + 1), 0);  // the same layers every step
  EXPECT_EQ(hints, routes);
  EXPECT_EQ(route_tokens_step0 % 3, 0);  // 3 prompt tokens times top-k
  std::remove(path.c_str());
}

}  // namespace
}  // namespace colibri
