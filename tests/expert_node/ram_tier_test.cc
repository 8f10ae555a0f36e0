#include "expert_node/ram_tier.h"

#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node {
namespace {

using testing::MakeExpert;
using testing::SyntheticExpert;

// A loader over synthetic experts of (layer, expert) -> width; counts loads.
class FakeDisk {
 public:
  explicit FakeDisk(int64_t n_ff_step) : n_ff_step_(n_ff_step) {}

  RamTier::Loader loader() {
    return [this](const ExpertId& id) -> absl::StatusOr<std::unique_ptr<ExpertBlob>> {
      ++loads_;
      if (id.expert < 0) return absl::NotFoundError("no such expert");
      const SyntheticExpert e = MakeExpert(16, n_ff_step_ * (1 + id.expert % 3), id.expert);
      return ExpertBlob::Copy(e.layout, e.gate, e.up, e.down);
    };
  }
  // RAM bytes the tier charges for expert e.
  uint64_t BlobBytes(int e) const {
    const SyntheticExpert x = MakeExpert(16, n_ff_step_ * (1 + e % 3), e);
    return ExpertBlob::Copy(x.layout, x.gate, x.up, x.down)->size_bytes();
  }
  int loads() const { return loads_; }

 private:
  const int64_t n_ff_step_;
  int loads_ = 0;
};

ExpertId Id(int e) { return ExpertId{"fp", 0, e}; }

TEST(RamTierTest, HitAfterMissAndCounters) {
  FakeDisk disk(16);
  RamTier tier(RamTier::Options{1 << 20}, disk.loader());
  {
    auto a = tier.Acquire(Id(1));
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(a->hit());
    EXPECT_TRUE(a->cached());
  }
  auto b = tier.Acquire(Id(1));
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->hit());
  EXPECT_EQ(disk.loads(), 1);
  const RamTier::Counters c = tier.counters();
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.misses, 1u);
  EXPECT_GT(c.disk_bytes_read, 0u);
  EXPECT_EQ(tier.used_bytes(), disk.BlobBytes(1));
  EXPECT_EQ(tier.Acquire(Id(-1)).status().code(), absl::StatusCode::kNotFound);
}

TEST(RamTierTest, EvictsLeastRecentlyUsed) {
  FakeDisk disk(16);
  // Experts 0, 3, 6, 9 all have the same size; room for three.
  const uint64_t size = disk.BlobBytes(0);
  RamTier tier(RamTier::Options{3 * size}, disk.loader());
  for (int e : {0, 3, 6}) ASSERT_TRUE(tier.Acquire(Id(e)).ok());
  ASSERT_TRUE(tier.Acquire(Id(0)).ok());  // 0 is now the most recent; 3 the least
  ASSERT_TRUE(tier.Acquire(Id(9)).ok());
  EXPECT_TRUE(tier.Contains(Id(0)));
  EXPECT_FALSE(tier.Contains(Id(3)));
  EXPECT_TRUE(tier.Contains(Id(6)));
  EXPECT_TRUE(tier.Contains(Id(9)));
  EXPECT_EQ(tier.counters().evictions, 1u);
}

TEST(RamTierTest, PinnedExpertsAreNeverEvicted) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  RamTier tier(RamTier::Options{2 * size}, disk.loader());
  auto pinned0 = tier.Acquire(Id(0));
  auto pinned3 = tier.Acquire(Id(3));
  ASSERT_TRUE(pinned0.ok() && pinned3.ok());
  // Everything is pinned: a third expert is served uncached.
  auto third = tier.Acquire(Id(6));
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->cached());
  EXPECT_TRUE(tier.Contains(Id(0)));
  EXPECT_TRUE(tier.Contains(Id(3)));
  EXPECT_FALSE(tier.Contains(Id(6)));
  EXPECT_LE(tier.used_bytes(), tier.budget_bytes());
  // The uncached handle's weights are usable.
  EXPECT_EQ(third->weights().n_embd(), 16);
  // Unpin 3: now 6 can take its place, 0 stays.
  *pinned3 = PinnedExpert();
  auto again = tier.Acquire(Id(6));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->cached());
  EXPECT_TRUE(tier.Contains(Id(0)));
  EXPECT_FALSE(tier.Contains(Id(3)));
}

TEST(RamTierTest, ExpertLargerThanBudgetIsServedUncached) {
  FakeDisk disk(16);
  RamTier tier(RamTier::Options{disk.BlobBytes(0) - 1}, disk.loader());
  auto a = tier.Acquire(Id(0));
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->cached());
  EXPECT_EQ(tier.used_bytes(), 0u);
  EXPECT_EQ(tier.counters().uncached, 1u);
  EXPECT_EQ(tier.Prefetch(Id(0)).code(), absl::StatusCode::kResourceExhausted);
}

TEST(RamTierTest, BudgetNeverExceededUnderRandomWorkload) {
  FakeDisk disk(16);
  const uint64_t budget = disk.BlobBytes(0) * 5 + disk.BlobBytes(1) * 2;
  RamTier tier(RamTier::Options{budget}, disk.loader());
  std::mt19937 rng(1);
  std::vector<std::pair<int, PinnedExpert>> held;  // (expert, handle)
  for (int step = 0; step < 2000; ++step) {
    const int e = static_cast<int>(rng() % 24);
    switch (rng() % 4) {
      case 0:
        (void)tier.Prefetch(Id(e));
        break;
      case 1: {
        auto h = tier.Acquire(Id(e));
        ASSERT_TRUE(h.ok());
        if (held.size() < 4) held.emplace_back(e, std::move(*h));
        break;
      }
      case 2:
        if (!held.empty()) held.erase(held.begin() + rng() % held.size());
        break;
      default: {
        auto h = tier.Acquire(Id(e));
        ASSERT_TRUE(h.ok());
        break;
      }
    }
    ASSERT_LE(tier.used_bytes(), budget) << "step " << step;
    for (const auto& [held_e, h] : held) {
      if (h.cached()) {
        ASSERT_TRUE(tier.Contains(Id(held_e))) << "pinned expert " << held_e;
      }
    }
  }
  const RamTier::Counters c = tier.counters();
  EXPECT_GT(c.evictions, 0u);
  EXPECT_GT(c.hits, 0u);
}

TEST(RamTierTest, PrefetchUsedAndWastedAreCounted) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  RamTier tier(RamTier::Options{2 * size}, disk.loader());
  ASSERT_TRUE(tier.Prefetch(Id(0)).ok());
  ASSERT_TRUE(tier.Prefetch(Id(3)).ok());
  ASSERT_TRUE(tier.Acquire(Id(0)).ok());  // used
  ASSERT_TRUE(tier.Acquire(Id(6)).ok());  // evicts 3, never used
  const RamTier::Counters c = tier.counters();
  EXPECT_EQ(c.prefetch_loaded, 2u);
  EXPECT_EQ(c.prefetch_used, 1u);
  EXPECT_EQ(c.prefetch_wasted, 1u);
  EXPECT_EQ(disk.loads(), 3);
}

}  // namespace
}  // namespace colibri::expert_node
