// `inspect` on the deepseek2 fixture: the MLA and routing hyper-parameters and
// the KV cache bytes per token against the expanded K/V form.
//   latent row: kv_lora_rank 64 + rope 16 = 80 floats x 4 B x 3 layers = 960 B
//   expanded:   4 heads x (k 48 + v 24) = 288 floats x 4 B x 3 = 3456 B (3.6x)
#include "coordinator/cli/inspect_command.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/patched_gguf.h"
#include "tests/support/paths.h"

namespace colibri::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(InspectCommandTest, Deepseek2ReportsMlaRoutingAndKvBytes) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  InspectOptions options;
  options.model_path = testing::FixturesDir() + "/models/deepseek2-tiny-q8_0.gguf";
  std::ostringstream out;
  ASSERT_TRUE(RunInspect(options, out).ok());
  const std::string s = out.str();
  EXPECT_THAT(s, HasSubstr("routing sigmoid + selection bias exp_probs_b, groups 4 (use 2), "
                           "weights scale 2.5\n"));
  EXPECT_THAT(s, HasSubstr("leading dense layers 1 (ffn 192)\n"));
  EXPECT_THAT(s, HasSubstr("yarn factor 40, original context 4096, log multiplier 0.1"));
  EXPECT_THAT(s,
              HasSubstr("MLA: q_lora_rank 96, kv_lora_rank 64, qk nope 32 + rope 16, v head 24"));
  EXPECT_THAT(s, HasSubstr("KV cache per token: 960 B (f32), 480 B (--kv-type f16), no q8_0 (a "
                           "row is not a multiple of 32 elements); compressed latent (expanded "
                           "K/V would be 3.38 KiB in f32, 3.6x)\n"));
}

TEST(InspectCommandTest, StandardAttentionKvBytes) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  InspectOptions options;
  // 2 kv heads x 32 x (k + v) x 4 B x 3 layers = 1536 B; q8_0 34 B per 32.
  options.model_path = testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf";
  std::ostringstream out;
  ASSERT_TRUE(RunInspect(options, out).ok());
  EXPECT_THAT(out.str(), HasSubstr("KV cache per token: 1.50 KiB (f32), 768 B (--kv-type f16), "
                                   "408 B (--kv-type q8_0)\n"));
}

// A header count the tensor table cannot back is reported, not printed as the
// model's shape.
TEST(InspectCommandTest, AbsurdBlockCountIsNotLoadable) {
  const std::string path = testing::PatchedFixture("mixtral-tiny-q4_k_m.gguf", "llama.block_count",
                                                    823558014, "inspect-block-count.gguf");
  if (path.empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  InspectOptions options;
  options.model_path = path;
  std::ostringstream out;
  ASSERT_TRUE(RunInspect(options, out).ok());
  EXPECT_THAT(out.str(), HasSubstr("not loadable: " + path +
                                   ": llama.block_count 823558014 but the file has tensors for "
                                   "2 layers\n"));
  EXPECT_THAT(out.str(), ::testing::Not(HasSubstr("layers 823558014")));
}

}  // namespace
}  // namespace colibri::coordinator
