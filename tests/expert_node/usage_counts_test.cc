#include "expert_node/usage_counts.h"

#include <memory>

#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node {
namespace {

using testing::TempDir;

std::unique_ptr<ExpertStore> OpenStore(const std::string& dir) {
  ExpertStore::Options options;
  options.data_dir = dir;
  options.sync_writes = false;
  auto store = ExpertStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(UsageCountsTest, DecaysWithTheHalfLifeAndSurvivesReopening) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  UsageCounts::Options options;
  options.half_life = absl::Hours(1);
  options.flush_interval = absl::ZeroDuration();
  const absl::Time t0 = absl::FromUnixSeconds(1700000000);
  const ExpertId a{"fp", 1, 2}, b{"fp", 0, 7};
  {
    auto counts = UsageCounts::Open(options, store.get());
    ASSERT_TRUE(counts.ok());
    for (int i = 0; i < 4; ++i) (*counts)->Record(a, t0);
    (*counts)->Record(b, t0);
    EXPECT_DOUBLE_EQ((*counts)->Score(a, t0), 4.0);
    EXPECT_DOUBLE_EQ((*counts)->Score(a, t0 + absl::Hours(1)), 2.0);
    (*counts)->Record(a, t0 + absl::Hours(2));  // 4 / 4 + 1
    EXPECT_DOUBLE_EQ((*counts)->Score(a, t0 + absl::Hours(2)), 2.0);
    ASSERT_TRUE((*counts)->Flush().ok());
  }
  // A malformed record is skipped, not fatal.
  ASSERT_TRUE(store->PutUsageRecords({{ExpertId{"fp", 3, 3}, "junk"}}).ok());
  auto counts = UsageCounts::Open(options, store.get());
  ASSERT_TRUE(counts.ok());
  EXPECT_DOUBLE_EQ((*counts)->Score(a, t0 + absl::Hours(3)), 1.0);
  EXPECT_DOUBLE_EQ((*counts)->Score(b, t0 + absl::Hours(1)), 0.5);
  EXPECT_EQ((*counts)->Score(ExpertId{"fp", 3, 3}, t0), 0.0);
  const auto hottest = (*counts)->Hottest(t0 + absl::Hours(2));
  ASSERT_EQ(hottest.size(), 2u);
  EXPECT_EQ(hottest[0].first, a);
}

TEST(UsageCountsTest, DestructionFlushes) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  UsageCounts::Options options;
  options.flush_interval = absl::Hours(1);  // only the final flush can write
  const ExpertId a{"fp", 1, 2};
  {
    auto counts = UsageCounts::Open(options, store.get());
    ASSERT_TRUE(counts.ok());
    (*counts)->Record(a);
  }
  auto records = store->ListUsageRecords();
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].first, a);
}

}  // namespace
}  // namespace colibri::expert_node
