#include "expert_node/ram_warmer.h"

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "expert_node/expert_store.h"
#include "expert_node/ram_tier.h"
#include "expert_node/usage_counts.h"
#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node {
namespace {

using testing::MakeExpert;
using testing::SyntheticExpert;
using testing::TempDir;

constexpr char kFp[] = "fp";

class RamWarmerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ExpertStore::Options options;
    options.data_dir = dir_.path();
    options.sync_writes = false;
    auto store = ExpertStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  // Stores experts 0..n-1 of `layer` (all of one size).
  void Store(int32_t layer, int n) {
    for (int e = 0; e < n; ++e) {
      const SyntheticExpert x = MakeExpert(16, 32, static_cast<uint32_t>(layer * 100 + e));
      ASSERT_TRUE(store_->Put(ExpertId{kFp, layer, e}, x.layout, x.gate, x.up, x.down).ok());
    }
  }
  uint64_t ExpertBytes() {
    absl::StatusOr<uint64_t> bytes = store_->RamBytes(ExpertId{kFp, 0, 0});
    EXPECT_TRUE(bytes.ok());
    return bytes.ok() ? *bytes : 0;
  }
  std::unique_ptr<RamTier> MakeTier(uint64_t budget) {
    RamTier::Options options;
    options.budget_bytes = budget;
    ExpertStore* store = store_.get();
    return std::make_unique<RamTier>(options,
                                     [store](const ExpertId& id) { return store->Get(id); });
  }
  // Waits (up to 20 s) until `done` holds.
  template <typename Done>
  static bool WaitFor(Done done) {
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (!done()) {
      if (absl::Now() > end) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  TempDir dir_;
  std::unique_ptr<ExpertStore> store_;
};

TEST_F(RamWarmerTest, FillsTheFreeRoomMostUsedFirstAndEvictsNothing) {
  Store(0, 4);
  Store(1, 4);
  const uint64_t size = ExpertBytes();
  UsageCounts::Options usage_options;
  usage_options.flush_interval = absl::ZeroDuration();
  auto usage = UsageCounts::Open(usage_options, store_.get());
  ASSERT_TRUE(usage.ok());
  const ExpertId hot{kFp, 1, 3}, warm{kFp, 1, 2};
  for (int i = 0; i < 3; ++i) (*usage)->Record(hot);
  (*usage)->Record(warm);
  // Room for 3 experts and a bit; one is in use already.
  auto tier = MakeTier(3 * size + size / 2);
  ASSERT_TRUE(tier->Acquire(ExpertId{kFp, 0, 2}).ok());

  RamWarmer warmer(store_.get(), tier.get(), usage->get());
  ASSERT_TRUE(WaitFor([&] { return warmer.counters().passes >= 1; }));
  EXPECT_EQ(tier->resident_count(), 3u);
  EXPECT_TRUE(tier->Contains(ExpertId{kFp, 0, 2}));
  EXPECT_TRUE(tier->Contains(hot));
  EXPECT_TRUE(tier->Contains(warm));
  const RamTier::Counters c = tier->counters();
  EXPECT_EQ(c.evictions, 0u);
  EXPECT_EQ(c.warm_loaded, 2u);
  const RamWarmer::Counters w = warmer.counters();
  EXPECT_EQ(w.experts, 2u);
  EXPECT_EQ(w.bytes, 2 * size);
  EXPECT_EQ(w.errors, 0u);
}

TEST_F(RamWarmerTest, WarmsExpertsStoredAfterItStarted) {
  Store(0, 2);
  const uint64_t size = ExpertBytes();
  auto tier = MakeTier(10 * size);
  RamWarmer warmer(store_.get(), tier.get(), nullptr);
  ASSERT_TRUE(WaitFor([&] { return tier->resident_count() == 2; }));
  // An ingest: the store's write observer wakes the warmer (it does not
  // poll), so without the wake-up these would never be warmed.
  Store(3, 5);
  ASSERT_TRUE(WaitFor([&] { return tier->resident_count() == 7; }))
      << tier->resident_count() << " resident";
  EXPECT_TRUE(tier->Contains(ExpertId{kFp, 3, 4}));
  EXPECT_EQ(tier->counters().misses, 0u);
  warmer.Stop();
  warmer.Stop();  // idempotent
  EXPECT_EQ(warmer.counters().experts, 7u);
}

TEST_F(RamWarmerTest, ADamagedExpertIsSkippedAndTheRestWarmed) {
  Store(0, 3);
  ASSERT_TRUE(store_->PutRawValueForTesting(ExpertId{kFp, 0, 1}, "not an expert").ok());
  auto tier = MakeTier(10 * ExpertBytes());
  RamWarmer warmer(store_.get(), tier.get(), nullptr);
  ASSERT_TRUE(WaitFor([&] { return warmer.counters().passes >= 1; }));
  EXPECT_TRUE(tier->Contains(ExpertId{kFp, 0, 0}));
  EXPECT_FALSE(tier->Contains(ExpertId{kFp, 0, 1}));
  EXPECT_TRUE(tier->Contains(ExpertId{kFp, 0, 2}));
  EXPECT_EQ(warmer.counters().errors, 1u);
  EXPECT_EQ(store_->checksum_failures(), 1u);
}

}  // namespace
}  // namespace colibri::expert_node
