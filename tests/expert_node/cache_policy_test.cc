#include "expert_node/cache_policy.h"

#include <vector>

#include "gtest/gtest.h"

namespace colibri::expert_node {
namespace {

ExpertId Id(int layer, int e) { return ExpertId{"fp", layer, e}; }

// Requests `id` as a cache would: Used, then Admitted on a miss.
void Request(CachePolicy* p, const ExpertId& id, bool resident) {
  p->Used(id, resident);
  if (!resident) p->Admitted(id, AdmitKind::kDemand);
}

TEST(CachePolicyTest, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(*ParseCachePolicyKind("lru"), CachePolicyKind::kLru);
  EXPECT_EQ(*ParseCachePolicyKind("adaptive"), CachePolicyKind::kAdaptive);
  absl::StatusOr<CachePolicyKind> bad = ParseCachePolicyKind("lfu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lru, adaptive"), absl::string_view::npos);
  EXPECT_EQ(CachePolicyName(CachePolicyKind::kAdaptive), "adaptive");
}

TEST(CachePolicyTest, LruEvictsLeastRecentlyUsedAndWarmedFirst) {
  auto p = MakeCachePolicy(CachePolicyKind::kLru);
  Request(p.get(), Id(0, 1), false);
  Request(p.get(), Id(0, 2), false);
  Request(p.get(), Id(0, 3), false);
  Request(p.get(), Id(0, 1), true);
  p->Admitted(Id(0, 9), AdmitKind::kWarm);
  EXPECT_EQ(p->VictimOrder(), (std::vector<ExpertId>{Id(0, 9), Id(0, 2), Id(0, 3), Id(0, 1)}));
  p->Evicted(Id(0, 2));
  EXPECT_EQ(p->VictimOrder(), (std::vector<ExpertId>{Id(0, 9), Id(0, 3), Id(0, 1)}));
}

// Two layers visited in turn; layer 0 uses expert 0 at every visit and
// expert 1 once, at the first. LRU evicts expert 0 of layer 0 after layer
// 1's visit (least recent), Belady and the adaptive policy evict expert 1,
// which is never used again, and keep expert 0, used at the next visit.
TEST(CachePolicyTest, AdaptiveKeepsWhatEachVisitUsesWhereLruDoesNot) {
  for (CachePolicyKind kind : {CachePolicyKind::kLru, CachePolicyKind::kAdaptive}) {
    SCOPED_TRACE(CachePolicyName(kind));
    auto p = MakeCachePolicy(kind);
    bool seen0 = false;
    for (int visit = 0; visit < 8; ++visit) {
      Request(p.get(), Id(0, 0), seen0);
      seen0 = true;
      if (visit == 7) {
        Request(p.get(), Id(0, 1), false);
      }
      Request(p.get(), Id(1, 5 + visit), false);  // a new expert every visit
      if (visit < 7) p->Evicted(Id(1, 5 + visit));
    }
    // Residents: (0,0) used at every visit, (0,1) once, (1,12) once and latest.
    const std::vector<ExpertId> order = p->VictimOrder();
    ASSERT_EQ(order.size(), 3u);
    if (kind == CachePolicyKind::kLru) {
      EXPECT_EQ(order.front(), Id(0, 0));
    } else {
      EXPECT_EQ(order.back(), Id(0, 0));
      EXPECT_NEAR(p->UseProbability(Id(0, 0)), 1.0, 0.01);
      EXPECT_LT(p->UseProbability(Id(0, 1)), 0.2);
    }
  }
}

TEST(CachePolicyTest, AdaptiveEvictsWarmedNeverUsedExpertsFirst) {
  auto p = MakeCachePolicy(CachePolicyKind::kAdaptive);
  Request(p.get(), Id(0, 1), false);
  p->Admitted(Id(0, 2), AdmitKind::kWarm);
  Request(p.get(), Id(0, 3), false);
  EXPECT_EQ(p->VictimOrder().front(), Id(0, 2));
}

TEST(CachePolicyTest, AdaptiveKeepsAHintedExpertLastUntilItsHintExpires) {
  CachePolicy::Options options;
  options.hint_horizon = 4;
  auto p = MakeCachePolicy(CachePolicyKind::kAdaptive, options);
  Request(p.get(), Id(0, 1), false);
  for (int i = 0; i < 3; ++i) Request(p.get(), Id(0, 2), i > 0);
  p->Hinted(Id(0, 1));
  EXPECT_EQ(p->VictimOrder().back(), Id(0, 1));
  for (int i = 0; i < 5; ++i) Request(p.get(), Id(0, 2), true);
  EXPECT_EQ(p->VictimOrder().front(), Id(0, 1));  // expired: used once, long ago
}

// Layers 0 and 1 visited in turn, one expert each: a visit period of 2
// ticks. A hint left unused protects its expert for two periods, not for
// Options::hint_horizon: after three visits of its layer it goes first.
TEST(CachePolicyTest, AnUnusedHintExpiresAfterTwoVisitsOfItsLayer) {
  auto p = MakeCachePolicy(CachePolicyKind::kAdaptive);  // hint_horizon 64
  for (int visit = 0; visit < 4; ++visit) {
    Request(p.get(), Id(0, 0), visit > 0);
    Request(p.get(), Id(1, 1), visit > 0);
  }
  p->Hinted(Id(1, 9));
  p->Admitted(Id(1, 9), AdmitKind::kPrefetch);
  EXPECT_EQ(p->VictimOrder().back(), Id(1, 9));
  for (int visit = 0; visit < 3; ++visit) {
    Request(p.get(), Id(0, 0), true);
    Request(p.get(), Id(1, 1), true);
  }
  EXPECT_EQ(p->VictimOrder().front(), Id(1, 9));
}

TEST(CachePolicyTest, HintPrecisionFollowsOutcomes) {
  auto p = MakeCachePolicy(CachePolicyKind::kAdaptive);
  EXPECT_DOUBLE_EQ(p->HintPrecision(), 0.5);
  for (int e = 0; e < 6; ++e) {
    p->Hinted(Id(0, e));
    Request(p.get(), Id(0, e), false);  // used: a good hint
  }
  const double good = p->HintPrecision();
  EXPECT_GT(good, 0.85);
  for (int e = 10; e < 16; ++e) {
    p->Hinted(Id(0, e));
    p->Admitted(Id(0, e), AdmitKind::kPrefetch);
    p->Evicted(Id(0, e));  // never used: wasted
  }
  EXPECT_LT(p->HintPrecision(), 0.6);
}

// An expert whose hints keep being wasted loses its prefetches while the
// node's other hints stay good.
TEST(CachePolicyTest, HintPrecisionOfAnExpertFollowsItsOwnOutcomes) {
  auto p = MakeCachePolicy(CachePolicyKind::kAdaptive);
  for (int round = 0; round < 6; ++round) {
    for (int e = 0; e < 4; ++e) {
      p->Hinted(Id(0, e));
      Request(p.get(), Id(0, e), round > 0);
    }
    p->Hinted(Id(0, 9));
    p->Admitted(Id(0, 9), AdmitKind::kPrefetch);
    p->Evicted(Id(0, 9));
  }
  EXPECT_GT(p->HintPrecision(), 0.6);
  EXPECT_GT(p->HintPrecision(Id(0, 1)), 0.8);
  EXPECT_LT(p->HintPrecision(Id(0, 9)), 0.25);
  EXPECT_DOUBLE_EQ(p->HintPrecision(Id(0, 7)), p->HintPrecision());  // no outcome yet
}

TEST(CachePolicyTest, PrefetchPaysOnlyWhenPrecisionBeatsCostAndVictim) {
  EXPECT_TRUE(PrefetchPays(0.6, 0.25, 0.0));
  EXPECT_FALSE(PrefetchPays(0.6, 0.25, 0.4));
  EXPECT_FALSE(PrefetchPays(0.2, 0.25, 0.0));
  EXPECT_TRUE(PrefetchPays(0.2, -1, 0.9));
}

}  // namespace
}  // namespace colibri::expert_node
