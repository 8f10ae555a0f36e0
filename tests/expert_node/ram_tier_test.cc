#include "expert_node/ram_tier.h"

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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
  int loads() const { return loads_.load(); }

 private:
  const int64_t n_ff_step_;
  std::atomic<int> loads_{0};
};

// Every test runs with both replacement policies (the parameter). The
// prefetch rule is off unless a test turns it on, so that a prefetch that
// finds room is issued, and so is the adaptive policy's own protection of
// hinted experts: these tests exercise the tier's (prefetch_protection).
CachePolicyKind current_policy = CachePolicyKind::kAdaptive;

class RamTierTest : public ::testing::TestWithParam<CachePolicyKind> {
 protected:
  void SetUp() override { current_policy = GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Policies, RamTierTest,
                         ::testing::Values(CachePolicyKind::kLru, CachePolicyKind::kAdaptive),
                         [](const ::testing::TestParamInfo<CachePolicyKind>& info) {
                           return std::string(CachePolicyName(info.param));
                         });

RamTier::Options TierOptions(uint64_t budget, absl::Duration protection = absl::ZeroDuration(),
                             absl::Duration victim_min_idle = absl::ZeroDuration()) {
  RamTier::Options options;
  options.budget_bytes = budget;
  options.prefetch_protection = protection;
  options.prefetch_victim_min_idle = victim_min_idle;
  options.policy = current_policy;
  options.prefetch_cost = -1;
  options.policy_options.hint_horizon = 0;
  return options;
}

ExpertId Id(int e) { return ExpertId{"fp", 0, e}; }

// Room for three experts of PooledDisk (768 KiB each) in the free list.
uint64_t disk_free_bound() { return 3 * 3 * (uint64_t{256} << 10) + 100; }

TEST_P(RamTierTest, HitAfterMissAndCounters) {
  FakeDisk disk(16);
  RamTier tier(TierOptions(1 << 20), disk.loader());
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

TEST_P(RamTierTest, EvictsLeastRecentlyUsed) {
  FakeDisk disk(16);
  // Experts 0, 3, 6, 9 all have the same size; room for three.
  const uint64_t size = disk.BlobBytes(0);
  RamTier tier(TierOptions(3 * size), disk.loader());
  for (int e : {0, 3, 6}) ASSERT_TRUE(tier.Acquire(Id(e)).ok());
  ASSERT_TRUE(tier.Acquire(Id(0)).ok());  // 0 is now the most recent; 3 the least
  ASSERT_TRUE(tier.Acquire(Id(9)).ok());
  EXPECT_TRUE(tier.Contains(Id(0)));
  EXPECT_FALSE(tier.Contains(Id(3)));
  EXPECT_TRUE(tier.Contains(Id(6)));
  EXPECT_TRUE(tier.Contains(Id(9)));
  EXPECT_EQ(tier.counters().evictions, 1u);
}

TEST_P(RamTierTest, PinnedExpertsAreNeverEvicted) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  RamTier tier(TierOptions(2 * size), disk.loader());
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

TEST_P(RamTierTest, ExpertLargerThanBudgetIsServedUncached) {
  FakeDisk disk(16);
  RamTier tier(TierOptions(disk.BlobBytes(0) - 1), disk.loader());
  auto a = tier.Acquire(Id(0));
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->cached());
  EXPECT_EQ(tier.used_bytes(), 0u);
  EXPECT_EQ(tier.counters().uncached, 1u);
  EXPECT_EQ(tier.Prefetch(Id(0)).code(), absl::StatusCode::kResourceExhausted);
}

TEST_P(RamTierTest, BudgetNeverExceededUnderRandomWorkload) {
  FakeDisk disk(16);
  const uint64_t budget = disk.BlobBytes(0) * 5 + disk.BlobBytes(1) * 2;
  RamTier tier(TierOptions(budget), disk.loader());
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

TEST_P(RamTierTest, PrefetchUsedAndWastedAreCounted) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  RamTier tier(TierOptions(2 * size), disk.loader());
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

TEST_P(RamTierTest, ProtectionWindowKeepsAPrefetchedExpertWhenOtherVictimsExist) {
  for (const bool protect : {true, false}) {
    SCOPED_TRACE(protect ? "protected" : "unprotected");
    FakeDisk disk(16);
    const uint64_t size = disk.BlobBytes(0);  // experts 0, 3, 6, 9: same size
    RamTier tier(
        TierOptions(3 * size, protect ? absl::InfiniteDuration() : absl::ZeroDuration()),
        disk.loader());
    ASSERT_TRUE(tier.Prefetch(Id(0)).ok());  // the least recently used from here on
    ASSERT_TRUE(tier.Acquire(Id(3)).ok());
    ASSERT_TRUE(tier.Acquire(Id(6)).ok());
    ASSERT_TRUE(tier.Acquire(Id(9)).ok());  // must evict one
    EXPECT_EQ(tier.Contains(Id(0)), protect);
    EXPECT_EQ(tier.Contains(Id(3)), !protect);
    EXPECT_EQ(tier.counters().prefetch_wasted, protect ? 0u : 1u);
    EXPECT_LE(tier.used_bytes(), tier.budget_bytes());
  }
}

TEST_P(RamTierTest, DemandLoadWithOnlyProtectedVictimsIsServedUncached) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  RamTier tier(TierOptions(2 * size, absl::InfiniteDuration()), disk.loader());
  ASSERT_TRUE(tier.Prefetch(Id(0)).ok());
  ASSERT_TRUE(tier.Prefetch(Id(3)).ok());
  auto h = tier.Acquire(Id(6));
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->cached());
  EXPECT_TRUE(tier.Contains(Id(0)) && tier.Contains(Id(3)));
  EXPECT_EQ(tier.counters().peak_used_bytes, 2 * size);
}

TEST_P(RamTierTest, PrefetchDoesNotEvictRecentlyUsedExperts) {
  for (const bool recent_protected : {true, false}) {
    SCOPED_TRACE(recent_protected ? "min idle infinite" : "min idle 0");
    FakeDisk disk(16);
    const uint64_t size = disk.BlobBytes(0);
    RamTier tier(TierOptions(2 * size, absl::ZeroDuration(),
                             recent_protected ? absl::InfiniteDuration() : absl::ZeroDuration()),
                 disk.loader());
    ASSERT_TRUE(tier.Acquire(Id(0)).ok());
    ASSERT_TRUE(tier.Acquire(Id(3)).ok());
    const absl::Status s = tier.Prefetch(Id(6), size);
    EXPECT_EQ(s.ok(), !recent_protected) << s;
    // Dropped before reading the disk.
    EXPECT_EQ(disk.loads(), recent_protected ? 2 : 3);
    EXPECT_EQ(tier.counters().prefetch_no_room, recent_protected ? 1u : 0u);
    EXPECT_EQ(tier.Contains(Id(0)), recent_protected);
    EXPECT_TRUE(tier.Contains(Id(3)));
  }
}

TEST_P(RamTierTest, ResidentPinsAreNeverEvictedAndCountWithinTheBudget) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  RamTier tier(TierOptions(2 * size), disk.loader());
  ASSERT_TRUE(tier.PinResident(Id(0)).ok());
  ASSERT_TRUE(tier.PinResident(Id(0)).ok());  // idempotent
  for (int e : {3, 6, 9, 3, 6}) ASSERT_TRUE(tier.Acquire(Id(e)).ok());
  EXPECT_TRUE(tier.Contains(Id(0)));
  RamTier::Counters c = tier.counters();
  EXPECT_EQ(c.pinned_experts, 1u);
  EXPECT_EQ(c.pinned_bytes, size);
  EXPECT_LE(c.peak_used_bytes, 2 * size);
  ASSERT_TRUE(tier.PinResident(Id(3)).ok());
  EXPECT_EQ(tier.PinResident(Id(6)).code(), absl::StatusCode::kResourceExhausted);
  auto h = tier.Acquire(Id(9));  // no evictable room left
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->cached());
  EXPECT_TRUE(tier.Contains(Id(0)) && tier.Contains(Id(3)));
  EXPECT_EQ(tier.PinResident(Id(-1)).code(), absl::StatusCode::kNotFound);
}

TEST_P(RamTierTest, LoadsInFlightAreSharedByPrefetchesAndMisses) {
  FakeDisk disk(16);
  absl::Notification started, release;
  std::atomic<int> loads{0};
  RamTier::Loader inner = disk.loader();
  RamTier tier(TierOptions(1 << 20), [&](const ExpertId& id) {
    ++loads;
    started.Notify();
    release.WaitForNotification();
    return inner(id);
  });
  std::thread prefetcher([&] { EXPECT_TRUE(tier.Prefetch(Id(7)).ok()); });
  started.WaitForNotification();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(tier.Prefetch(Id(7)).ok());  // coalesced
  std::vector<std::thread> readers;
  std::vector<std::vector<uint8_t>> bytes(3);
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      auto h = tier.Acquire(Id(7));
      ASSERT_TRUE(h.ok());
      const auto& w = h->weights();
      bytes[r].assign(w.gate.data, w.gate.data + w.gate.rows * w.gate.row_bytes);
    });
  }
  while (tier.counters().load_waits < 3) std::this_thread::yield();
  release.Notify();
  prefetcher.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(loads.load(), 1);
  const RamTier::Counters c = tier.counters();
  EXPECT_EQ(c.prefetch_coalesced, 5u);
  EXPECT_EQ(c.misses, 3u);
  EXPECT_EQ(c.load_waits, 3u);
  EXPECT_EQ(c.prefetch_used, 1u);
  EXPECT_EQ(c.prefetch_loaded, 1u);
  EXPECT_EQ(c.prefetch_wasted, 0u);
  EXPECT_TRUE(tier.Contains(Id(7)));
  const SyntheticExpert expected = MakeExpert(16, 16 * (1 + 7 % 3), 7);
  for (const auto& b : bytes) EXPECT_EQ(b, expected.gate);
}

// A background loader standing in for the disk queue: holds each read until
// released, then reads it unless its control was cancelled (and not promoted
// since), and records the control's state when the read was decided.
class HeldBackgroundDisk {
 public:
  explicit HeldBackgroundDisk(FakeDisk* disk) : inner_(disk->loader()) {}

  RamTier::BackgroundLoader loader() {
    return [this](const ExpertId& id,
                  const ReadControl* control) -> absl::StatusOr<std::unique_ptr<ExpertBlob>> {
      ++reads_;
      started_.Notify();
      release_.WaitForNotification();
      last_state_ = control->state();
      if (last_state_ == ReadControl::State::kCancelled) {
        return absl::CancelledError("background read cancelled before it started");
      }
      return inner_(id);
    };
  }
  void WaitStarted() { started_.WaitForNotification(); }
  void Release() { release_.Notify(); }
  int reads() const { return reads_.load(); }
  ReadControl::State last_state() const { return last_state_.load(); }

 private:
  RamTier::Loader inner_;
  absl::Notification started_, release_;
  std::atomic<int> reads_{0};
  std::atomic<ReadControl::State> last_state_{ReadControl::State::kBackground};
};

// A prefetch whose hint proved wrong before its read started is dropped
// unread; one a request joined is promoted and served.
TEST_P(RamTierTest, StalePrefetchReadsAreCancelledJoinedOnesPromoted) {
  for (const bool joined : {false, true}) {
    SCOPED_TRACE(joined ? "joined by an Acquire" : "nobody waits");
    FakeDisk disk(16);
    HeldBackgroundDisk held(&disk);
    RamTier tier(TierOptions(1 << 20), disk.loader(), held.loader());
    absl::Status prefetched;
    std::thread prefetcher([&] { prefetched = tier.Prefetch(Id(4)); });
    held.WaitStarted();
    std::thread reader;
    if (joined) {
      reader = std::thread([&] { EXPECT_TRUE(tier.Acquire(Id(4)).ok()); });
      while (tier.counters().load_waits < 1) std::this_thread::yield();
    }
    tier.PrefetchStale(Id(4));
    held.Release();
    prefetcher.join();
    if (reader.joinable()) reader.join();
    const RamTier::Counters c = tier.counters();
    EXPECT_EQ(held.reads(), 1);
    EXPECT_EQ(disk.loads(), joined ? 1 : 0);
    EXPECT_EQ(tier.Contains(Id(4)), joined);
    EXPECT_EQ(c.prefetch_cancelled, joined ? 0u : 1u);
    EXPECT_EQ(held.last_state(),
              joined ? ReadControl::State::kPromoted : ReadControl::State::kCancelled);
    EXPECT_EQ(absl::IsCancelled(prefetched), !joined) << prefetched;
  }
}

// An expert a prefetch admitted and no request used loses its protection
// once its hint proves wrong: the next demand load may evict it.
TEST_P(RamTierTest, AStalePrefetchedExpertLosesItsProtection) {
  for (const bool stale : {false, true}) {
    SCOPED_TRACE(stale ? "stale" : "still hinted");
    FakeDisk disk(16);
    const uint64_t size = disk.BlobBytes(0);
    RamTier tier(TierOptions(size, absl::InfiniteDuration()), disk.loader());
    ASSERT_TRUE(tier.Prefetch(Id(0)).ok());
    if (stale) tier.PrefetchStale(Id(0));
    auto h = tier.Acquire(Id(3));
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->cached(), stale);
    EXPECT_EQ(tier.Contains(Id(0)), !stale);
    EXPECT_EQ(tier.counters().prefetch_wasted, stale ? 1u : 0u);
  }
}

TEST_P(RamTierTest, WarmFillsFreeRoomAndEvictsNothing) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);  // experts 0, 3, 6 have the same size
  RamTier tier(TierOptions(2 * size), disk.loader());
  ASSERT_TRUE(tier.Acquire(Id(0)).ok());
  ASSERT_TRUE(tier.Warm(Id(3), size).ok());
  EXPECT_TRUE(tier.Contains(Id(3)));
  EXPECT_TRUE(tier.Warm(Id(3), size).ok());  // resident: nothing read
  EXPECT_EQ(disk.loads(), 2);
  // Full: refused before reading when the size is known...
  EXPECT_EQ(tier.Warm(Id(6), size).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(disk.loads(), 2);
  // ...and after reading when it is not, without admitting it.
  EXPECT_EQ(tier.Warm(Id(6)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(disk.loads(), 3);
  EXPECT_FALSE(tier.Contains(Id(6)));
  EXPECT_TRUE(tier.Contains(Id(0)));
  const RamTier::Counters c = tier.counters();
  EXPECT_EQ(c.warm_loaded, 1u);
  EXPECT_EQ(c.evictions, 0u);
  EXPECT_EQ(c.misses, 1u);  // warming is not a lookup
  EXPECT_EQ(c.hits, 0u);
  EXPECT_EQ(tier.Warm(Id(-1)).code(), absl::StatusCode::kNotFound);
}

TEST_P(RamTierTest, WarmedExpertsAreTheFirstVictimsInTheOrderWarmed) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);  // experts 0, 3, 6, 9, 12 have the same size
  RamTier tier(TierOptions(3 * size), disk.loader());
  ASSERT_TRUE(tier.Acquire(Id(0)).ok());  // used by a request
  ASSERT_TRUE(tier.Warm(Id(3)).ok());     // warmed first (the hotter)
  ASSERT_TRUE(tier.Warm(Id(6)).ok());
  ASSERT_TRUE(tier.Acquire(Id(9)).ok());  // evicts 6, the last warmed
  EXPECT_TRUE(tier.Contains(Id(0)));
  EXPECT_TRUE(tier.Contains(Id(3)));
  EXPECT_FALSE(tier.Contains(Id(6)));
  ASSERT_TRUE(tier.Acquire(Id(12)).ok());  // then 3; 0 was used, so it stays
  EXPECT_TRUE(tier.Contains(Id(0)));
  EXPECT_FALSE(tier.Contains(Id(3)));
  EXPECT_EQ(tier.counters().evictions, 2u);
}

TEST_P(RamTierTest, AnAcquireJoiningAWarmLoadMakesItDemand) {
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  absl::Notification started, release;
  RamTier::Loader inner = disk.loader();
  RamTier tier(TierOptions(size), [&](const ExpertId& id) {
    if (id.expert == 3) {
      started.Notify();
      release.WaitForNotification();
    }
    return inner(id);
  });
  ASSERT_TRUE(tier.Acquire(Id(0)).ok());  // the tier is full
  // The size unknown, the warm-up reads; a request then waits for that read.
  std::thread warmer([&] { EXPECT_TRUE(tier.Warm(Id(3)).ok()); });
  started.WaitForNotification();
  std::thread reader([&] { EXPECT_TRUE(tier.Acquire(Id(3)).ok()); });
  while (tier.counters().load_waits < 1) std::this_thread::yield();
  release.Notify();
  warmer.join();
  reader.join();
  EXPECT_EQ(disk.loads(), 2);
  // Admitted by the demand rule: 0 was evicted to make room.
  EXPECT_TRUE(tier.Contains(Id(3)));
  EXPECT_FALSE(tier.Contains(Id(0)));
  EXPECT_EQ(tier.counters().uncached, 0u);
}

// Many threads acquire, hold and prefetch random experts (more than fit):
// resident bytes never exceed the budget, at any instant, and every handle
// sees its own expert's bytes.
TEST_P(RamTierTest, BudgetNeverExceededUnderConcurrentEvictionWorkload) {
  constexpr int kExperts = 30;
  FakeDisk disk(16);
  std::vector<SyntheticExpert> expected;
  for (int e = 0; e < kExperts; ++e) expected.push_back(MakeExpert(16, 16 * (1 + e % 3), e));
  const uint64_t budget = disk.BlobBytes(0) * 4 + disk.BlobBytes(2) * 2 + 100;
  RamTier tier(TierOptions(budget, absl::Microseconds(200)), disk.loader());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> max_seen{0};
  std::thread watcher([&] {
    while (!stop.load()) {
      const uint64_t used = tier.used_bytes();
      uint64_t prev = max_seen.load();
      while (used > prev && !max_seen.compare_exchange_weak(prev, used)) {
      }
    }
  });
  std::vector<std::thread> workers;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 6; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::vector<std::pair<int, PinnedExpert>> held;
      for (int step = 0; step < 1500; ++step) {
        const int e = static_cast<int>(rng() % kExperts);
        if (rng() % 3 == 0) {
          (void)tier.Prefetch(Id(e), rng() % 2 == 0 ? disk.BlobBytes(e) : 0);
          continue;
        }
        auto h = tier.Acquire(Id(e));
        if (!h.ok()) {
          ++mismatches;
          continue;
        }
        const moe::ExpertWeights& w = h->weights();
        if (std::memcmp(w.down.data, expected[e].down.data(), expected[e].down.size()) != 0) {
          ++mismatches;
        }
        held.emplace_back(e, std::move(*h));
        if (held.size() > 2) held.erase(held.begin() + rng() % held.size());
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  watcher.join();
  const RamTier::Counters c = tier.counters();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_LE(c.peak_used_bytes, budget);
  EXPECT_LE(max_seen.load(), budget);
  EXPECT_GT(c.evictions, 0u);
  EXPECT_GT(c.hits, 0u);
  EXPECT_GT(c.prefetch_loaded, 0u);
  EXPECT_EQ(c.used_bytes, tier.used_bytes());
}

// Experts of one size, loaded into buffers of a pool, as ExpertStore::Get does.
class PooledDisk {
 public:
  PooledDisk(int n_experts, uint64_t max_free_bytes) {
    BlobBufferPool::Options options;
    options.max_free_bytes = max_free_bytes;
    pool_ = BlobBufferPool::Create(options);
    // [n_ff 1024][n_embd 64] F32: 256 KiB per matrix, above kMapThreshold.
    for (int e = 0; e < n_experts; ++e) experts_.push_back(MakeExpert(64, 1024, e));
  }
  RamTier::Loader loader() {
    return [this](const ExpertId& id) -> absl::StatusOr<std::unique_ptr<ExpertBlob>> {
      const SyntheticExpert& e = experts_.at(id.expert);
      return ExpertBlob::Copy(e.layout, e.gate, e.up, e.down, pool_.get());
    };
  }
  uint64_t BlobBytes() const { return ExpertBlob::SizeFor(experts_[0].layout); }
  bool SameBytes(const PinnedExpert& h, int e) const {
    const moe::ExpertWeights& w = h.weights();
    return std::memcmp(w.gate.data, experts_[e].gate.data(), experts_[e].gate.size()) == 0 &&
           std::memcmp(w.up.data, experts_[e].up.data(), experts_[e].up.size()) == 0 &&
           std::memcmp(w.down.data, experts_[e].down.data(), experts_[e].down.size()) == 0;
  }
  BlobBufferPool& pool() { return *pool_; }

 private:
  std::shared_ptr<BlobBufferPool> pool_;
  std::vector<SyntheticExpert> experts_;
};

// Cycling through twice as many experts as fit misses on every Acquire; after
// the first eviction each load takes the buffer the previous eviction freed.
TEST_P(RamTierTest, EvictionChurnReusesBuffersAndAllocatesNothingNew) {
  constexpr int kExperts = 8;
  PooledDisk disk(kExperts, 4 * (uint64_t{1} << 20));
  RamTier tier(TierOptions(disk.BlobBytes() * 4), disk.loader());
  for (int e = 0; e < kExperts; ++e) ASSERT_TRUE(tier.Acquire(Id(e)).ok());
  // Four fill the budget; the fifth is loaded before the first eviction.
  const BlobBufferPool::Counters warm = disk.pool().counters();
  EXPECT_EQ(warm.allocations, 5u);
  constexpr int kLoads = 40;
  for (int i = 0; i < kLoads; ++i) {
    const int e = i % kExperts;
    auto h = tier.Acquire(Id(e));
    ASSERT_TRUE(h.ok());
    EXPECT_FALSE(h->hit());
    EXPECT_TRUE(disk.SameBytes(*h, e)) << "expert " << e << " load " << i;
  }
  const BlobBufferPool::Counters c = disk.pool().counters();
  EXPECT_EQ(c.allocations, warm.allocations);
  EXPECT_EQ(c.reuses, warm.reuses + kLoads);
  EXPECT_EQ(tier.counters().evictions, static_cast<uint64_t>(kExperts - 4 + kLoads));
  EXPECT_LE(tier.counters().peak_used_bytes, tier.budget_bytes());
}

// An expert served uncached gives its buffer back when its handle goes.
TEST_P(RamTierTest, UncachedBuffersAreRecycledToo) {
  PooledDisk disk(3, 4 * (uint64_t{1} << 20));
  RamTier tier(TierOptions(disk.BlobBytes() * 2), disk.loader());
  auto a = tier.Acquire(Id(0));
  auto b = tier.Acquire(Id(1));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 3; ++i) {
    auto c = tier.Acquire(Id(2));
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE(c->cached());
    EXPECT_TRUE(disk.SameBytes(*c, 2));
  }
  const BlobBufferPool::Counters c = disk.pool().counters();
  EXPECT_EQ(c.allocations, 3u);
  EXPECT_EQ(c.reuses, 2u);
  EXPECT_EQ(c.free_bytes, disk.BlobBytes());
  EXPECT_EQ(tier.counters().uncached, 3u);
}

// Concurrent acquires, holds and prefetches over pooled buffers: bytes stay
// right, the free list stays within its bound and the budget holds.
TEST_P(RamTierTest, PooledBuffersUnderConcurrentEvictionWorkload) {
  constexpr int kExperts = 12;
  PooledDisk disk(kExperts, disk_free_bound());
  RamTier tier(TierOptions(disk.BlobBytes() * 4, absl::Microseconds(200)), disk.loader());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(200 + t);
      std::vector<PinnedExpert> held;
      for (int step = 0; step < 300; ++step) {
        const int e = static_cast<int>(rng() % kExperts);
        if (rng() % 3 == 0) {
          (void)tier.Prefetch(Id(e), disk.BlobBytes());
          continue;
        }
        auto h = tier.Acquire(Id(e));
        if (!h.ok() || !disk.SameBytes(*h, e)) {
          ++mismatches;
          continue;
        }
        held.push_back(std::move(*h));
        if (held.size() > 1) held.erase(held.begin());
        EXPECT_LE(disk.pool().counters().free_bytes, disk_free_bound());
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(mismatches.load(), 0);
  const BlobBufferPool::Counters c = disk.pool().counters();
  EXPECT_LE(c.peak_free_bytes, disk_free_bound());
  EXPECT_GT(c.reuses, 0u);
  EXPECT_LE(tier.counters().peak_used_bytes, tier.budget_bytes());
}

}  // namespace
}  // namespace colibri::expert_node

namespace colibri::expert_node {
namespace {

// Three layers in turn; layer 0 uses expert 0 at every visit, layers 1 and 2
// a new expert each visit; room for two experts. LRU always evicts expert 0
// before its next use (never a hit); the adaptive policy learns that it is
// used at every visit and keeps it.
TEST(RamTierPolicyTest, AdaptiveKeepsTheExpertEveryVisitUsesWhereLruNeverHits) {
  for (CachePolicyKind kind : {CachePolicyKind::kLru, CachePolicyKind::kAdaptive}) {
    SCOPED_TRACE(CachePolicyName(kind));
    current_policy = kind;
    FakeDisk disk(16);
    RamTier tier(TierOptions(2 * disk.BlobBytes(0)), disk.loader());
    const int visits = 12;
    int hot_hits = 0;
    for (int v = 0; v < visits; ++v) {
      auto hot = tier.Acquire(ExpertId{"fp", 0, 0});
      ASSERT_TRUE(hot.ok());
      hot_hits += hot->hit() ? 1 : 0;
      hot = PinnedExpert();
      ASSERT_TRUE(tier.Acquire(ExpertId{"fp", 1, 3 * (v + 1)}).ok());
      ASSERT_TRUE(tier.Acquire(ExpertId{"fp", 2, 3 * (v + 1)}).ok());
    }
    if (kind == CachePolicyKind::kLru) {
      EXPECT_EQ(hot_hits, 0);
    } else {
      EXPECT_GE(hot_hits, visits - 3);
    }
  }
}

// The prefetch rule: with free room a hint of 0.5 prior precision pays for a
// read costing 0.25 of a miss; with a full tier whose only victim is used at
// every visit of its layer, it does not, and nothing is read.
// At the default cost, a hint is loaded only once hints have proved right
// more than half the time: a fresh tier (prior precision 0.5) declines one
// even into free room, before reading; once a hinted expert was used, it
// loads the next.
TEST(RamTierPolicyTest, AtTheDefaultCostUnprovenHintsAreDeclined) {
  current_policy = CachePolicyKind::kAdaptive;
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  RamTier::Options options;
  options.budget_bytes = 8 * size;
  options.policy_options.hint_horizon = 64;
  RamTier tier(options, disk.loader());
  const absl::Status s = tier.Prefetch(Id(3), size);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(tier.counters().prefetch_declined, 1u);
  EXPECT_EQ(disk.loads(), 0);
  // A hint that came true: hinted (declined), then used.
  ASSERT_TRUE(tier.Acquire(Id(3)).ok());
  EXPECT_TRUE(tier.Prefetch(Id(12), size).ok());
  EXPECT_EQ(tier.counters().prefetch_loaded, 1u);
}

TEST(RamTierPolicyTest, PrefetchIsDeclinedWhenItWouldEvictWhatIsAlwaysUsed) {
  current_policy = CachePolicyKind::kAdaptive;
  FakeDisk disk(16);
  const uint64_t size = disk.BlobBytes(0);
  RamTier::Options options = TierOptions(size);
  options.prefetch_cost = 0.25;
  RamTier tier(options, disk.loader());
  EXPECT_TRUE(tier.Prefetch(Id(3), size).ok());  // free room
  EXPECT_EQ(tier.counters().prefetch_loaded, 1u);
  for (int v = 0; v < 4; ++v) ASSERT_TRUE(tier.Acquire(Id(0)).ok());
  const int loads = disk.loads();
  const absl::Status s = tier.Prefetch(Id(6), size);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(tier.counters().prefetch_declined, 1u);
  EXPECT_EQ(disk.loads(), loads);
  EXPECT_TRUE(tier.Contains(Id(0)));
  options.prefetch_cost = -1;  // the rule off: the same prefetch is issued
  RamTier always(options, disk.loader());
  for (int v = 0; v < 4; ++v) ASSERT_TRUE(always.Acquire(Id(0)).ok());
  EXPECT_TRUE(always.Prefetch(Id(6), size).ok());
  EXPECT_EQ(always.counters().prefetch_declined, 0u);
}

}  // namespace
}  // namespace colibri::expert_node
