#include "coordinator/cli/cluster_command.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/paths.h"

namespace colibri::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// Each value by hand: tier = min(budget, placed) (placed when the budget is
// unknown), + 1 GiB, rounded up to a whole GiB.
TEST(RecommendedNodeMemoryLimitTest, TierPlusOverheadRoundedUpToAGiB) {
  // The systemd example: ram-budget 8G on a node holding 20 GiB -> 8 + 1 = 9G.
  EXPECT_EQ(RecommendedNodeMemoryLimit(8 * kGiB, 20 * kGiB), 9 * kGiB);
  // The k8s base: ram-budget 6G, more experts than that -> 7Gi.
  EXPECT_EQ(RecommendedNodeMemoryLimit(6 * kGiB, 6 * kGiB + 1), 7 * kGiB);
  // 3 GiB 200 MiB of experts under an 8 GiB budget: 4.2 GiB -> 5 GiB.
  EXPECT_EQ(RecommendedNodeMemoryLimit(8 * kGiB, 3 * kGiB + 200 * kMiB), 5 * kGiB);
  // Budget unknown: the experts alone, 6 GiB -> 7 GiB exactly.
  EXPECT_EQ(RecommendedNodeMemoryLimit(0, 6 * kGiB), 7 * kGiB);
  EXPECT_EQ(RecommendedNodeMemoryLimit(4 * kGiB, 0), 1 * kGiB);
}

TEST(PlanTest, PrintsEachNodesMemoryLimit) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  PlanOptions options;
  options.model_path = testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf";
  options.cluster.nodes = {"a:7071", "b:7071"};
  options.cluster.assume_equal = true;
  options.list_experts = false;
  std::ostringstream out;
  ASSERT_TRUE(RunPlan(options, out).ok()) << out.str();
  // The tiny model's experts take a few MiB per node, with no ram-budget
  // known: 1 GiB + a few MiB rounds up to 2 GiB.
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("node a:7071"));
  EXPECT_THAT(text, HasSubstr("its experts; ram-budget not known"));
  size_t count = 0;
  for (size_t at = text.find("MemoryMax=2G, Kubernetes limits.memory: 2Gi");
       at != std::string::npos; at = text.find("MemoryMax=2G", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 2u) << text;
}

}  // namespace
}  // namespace colibri::coordinator
