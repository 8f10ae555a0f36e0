#include "tools/cache_sim/cache_sim.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::cache_sim {
namespace {

using expert_node::CachePolicyKind;

std::vector<moe::TraceRecord> Parse(const std::string& text) {
  absl::StatusOr<std::vector<moe::TraceRecord>> records = moe::ParseRoutingTrace(text, "test");
  EXPECT_TRUE(records.ok()) << records.status();
  return records.ok() ? *records : std::vector<moe::TraceRecord>();
}

placement::Placement OneNode(const std::vector<int>& experts) {
  return *placement::Placement::Compute({{"n0", 1.0}}, experts, 1);
}

// The workload of a single node holding every expert of one layer.
std::vector<NodeEvent> OneLayerEvents(const std::string& trace, int experts) {
  absl::StatusOr<std::vector<NodeEvent>> events = NodeWorkload(Parse(trace), OneNode({experts}), 0);
  EXPECT_TRUE(events.ok()) << events.status();
  return events.ok() ? *events : std::vector<NodeEvent>();
}

// One layer, one expert a step: a b c a b c at capacity 2.
// LRU: every request misses (each reuse is 3 requests back): 0 hits.
// Belady: a b c miss; c evicts b (next use 4, a's is 3); a hits; b misses
// and evicts a (never used again, c's next use is 5); c hits: 2 hits.
TEST(CacheSimTest, HandComputedHitsOfLruAndBelady) {
  const std::vector<moe::TraceRecord> records = Parse(
      "colibri-routing-trace 1\n"
      "R 0 0 0:1\nR 1 0 1:1\nR 2 0 2:1\nR 3 0 0:1\nR 4 0 1:1\nR 5 0 2:1\n");
  absl::StatusOr<std::vector<NodeEvent>> events = NodeWorkload(records, OneNode({3}), 0);
  ASSERT_TRUE(events.ok()) << events.status();
  SimOptions options;
  options.capacity = 2;
  const SimResult lru = SimulatePolicy(*events, CachePolicyKind::kLru, options);
  EXPECT_EQ(lru.requests, 6u);
  EXPECT_EQ(lru.hits, 0u);
  const SimResult belady = SimulateBelady(*events, 2);
  EXPECT_EQ(belady.requests, 6u);
  EXPECT_EQ(belady.hits, 2u);
  const SimResult adaptive = SimulatePolicy(*events, CachePolicyKind::kAdaptive, options);
  EXPECT_LE(adaptive.hits, belady.hits);
}

// One layer: a b c a c a at capacity 2 (a used 3 times, b once, c twice).
// LFU told the counts evicts b for c and then hits a, c, a: 3 hits, as
// Belady; LRU evicts a for c, then b for a: 2 hits (c, then a).
TEST(CacheSimTest, HandComputedHitsOfTheFrequencyOracle) {
  const std::vector<NodeEvent> events = OneLayerEvents(
      "colibri-routing-trace 1\n"
      "R 0 0 0:1\nR 1 0 1:1\nR 2 0 2:1\nR 3 0 0:1\nR 4 0 2:1\nR 5 0 0:1\n",
      3);
  const SimResult oracle = SimulateOracleFrequency(events, 2);
  EXPECT_EQ(oracle.requests, 6u);
  EXPECT_EQ(oracle.hits, 3u);
  SimOptions options;
  options.capacity = 2;
  EXPECT_EQ(SimulatePolicy(events, CachePolicyKind::kLru, options).hits, 2u);
  EXPECT_EQ(SimulateBelady(events, 2).hits, 3u);
}

// A RAM tier hears of hints only through prefetches, so without prefetching
// the policy must not see them: a hint protects expert 0 in the adaptive
// policy, which would then evict expert 1 for expert 2 and miss it at step 3.
// Without the hint, the tie between 0 and 1 goes to the least recently used
// (0) and step 3 hits.
TEST(CacheSimTest, HintsReachThePolicyOnlyWithPrefetching) {
  const std::vector<NodeEvent> events = OneLayerEvents(
      "colibri-routing-trace 1\n"
      "R 0 0 0:1\nR 1 0 1:1\nH 1 0 0\nR 2 0 2:1\nR 3 0 1:1\n",
      3);
  SimOptions options;
  options.capacity = 2;
  EXPECT_EQ(SimulatePolicy(events, CachePolicyKind::kAdaptive, options).hits, 1u);
}

// A layer's experts are pinned together: at capacity 1, a record of two
// experts serves the second uncached.
TEST(CacheSimTest, ALayersExpertsArePinnedTogether) {
  const std::vector<moe::TraceRecord> records =
      Parse("colibri-routing-trace 1\nR 0 0 0:1 1:1\nR 1 0 0:1 1:1\n");
  absl::StatusOr<std::vector<NodeEvent>> events = NodeWorkload(records, OneNode({2}), 0);
  ASSERT_TRUE(events.ok());
  SimOptions options;
  options.capacity = 1;
  const SimResult lru = SimulatePolicy(*events, CachePolicyKind::kLru, options);
  EXPECT_EQ(lru.hits, 1u);  // expert 0 at step 1
  EXPECT_EQ(lru.uncached, 2u);
  const SimResult belady = SimulateBelady(*events, 1);
  EXPECT_EQ(belady.hits, 1u);
  EXPECT_EQ(belady.uncached, 2u);
}

// Hints load experts ahead of use; one never used counts as wasted.
TEST(CacheSimTest, PrefetchesAreCountedUsedOrWasted) {
  const std::vector<moe::TraceRecord> records = Parse(
      "colibri-routing-trace 1\n"
      "H 0 1 3 4\nR 0 0 0:1\nR 0 1 3:1\n");
  absl::StatusOr<std::vector<NodeEvent>> events = NodeWorkload(records, OneNode({1, 5}), 0);
  ASSERT_TRUE(events.ok());
  SimOptions options;
  options.capacity = 4;
  options.prefetch_all = true;
  const SimResult r = SimulatePolicy(*events, CachePolicyKind::kLru, options);
  EXPECT_EQ(r.prefetch_issued, 2u);
  EXPECT_EQ(r.prefetch_used, 1u);
  EXPECT_EQ(r.prefetch_wasted, 1u);
  EXPECT_EQ(r.hits, 1u);
}

TEST(CacheSimTest, NodesShareTheRequestsByPlacement) {
  const std::vector<moe::TraceRecord> records =
      Parse("colibri-routing-trace 1\nR 0 0 0:1 1:2 2:1 3:5 4:1 5:1 6:1 7:1\n");
  const placement::Placement placement =
      *placement::Placement::Compute({{"a", 1.0}, {"b", 1.0}, {"c", 1.0}}, {8}, 2);
  uint64_t total = 0;
  for (int node = 0; node < 3; ++node) {
    absl::StatusOr<std::vector<NodeEvent>> events = NodeWorkload(records, placement, node);
    ASSERT_TRUE(events.ok());
    for (const NodeEvent& ev : *events) {
      const absl::Span<const int> owners = placement.Owners(ev.layer, ev.expert);
      EXPECT_NE(std::find(owners.begin(), owners.end(), node), owners.end());
    }
    total += events->size();
  }
  EXPECT_EQ(total, 8u);  // each routed expert reaches exactly one replica
  EXPECT_FALSE(NodeWorkload(records, placement, 3).ok());
  EXPECT_FALSE(NodeWorkload(Parse("colibri-routing-trace 1\nR 0 0 9:1\n"), placement, 0).ok());
}

// A node's workload built by hand: each Use call is one record (group) of
// its own unless `same_group`.
class Workload {
 public:
  void Use(int layer, int expert, bool same_group = false) {
    if (!same_group) ++group_;
    events_.push_back(NodeEvent{NodeEvent::Kind::kUse, layer, expert, group_});
  }
  void Hint(int layer, int expert) {
    events_.push_back(NodeEvent{NodeEvent::Kind::kHint, layer, expert, 0});
  }
  const std::vector<NodeEvent>& events() const { return events_; }

 private:
  std::vector<NodeEvent> events_;
  int64_t group_ = 0;
};

// Layer 0's experts 0 and 1 are used at every step; layers 1-3 each scan a
// new expert a step, never used again. At 3 experts LRU evicts the hot pair
// for the scan every step and never hits; the expected-use rank keeps them
// (Belady's choice) and hits both at every step once their counts show it.
TEST(CacheSimTest, AScanDoesNotFlushHotExperts) {
  Workload w;
  constexpr int kSteps = 50;
  for (int step = 0; step < kSteps; ++step) {
    w.Use(0, 0);
    w.Use(0, 1, /*same_group=*/true);
    for (int layer = 1; layer <= 3; ++layer) w.Use(layer, step);
  }
  SimOptions options;
  options.capacity = 3;
  EXPECT_EQ(SimulatePolicy(w.events(), CachePolicyKind::kLru, options).hits, 0u);
  const SimResult adaptive = SimulatePolicy(w.events(), CachePolicyKind::kAdaptive, options);
  EXPECT_GE(adaptive.hits, 2u * (kSteps - 5));
  EXPECT_LE(adaptive.hits, SimulateBelady(w.events(), 3).hits);
}

// 1000 steps use experts 0 and 1 of layer 0 (and expert 9 of layer 1), then
// 200 steps use expert 2 and, in turn, 3 or 4 of layer 0 (and 9). The old
// pair's long-run counts stay high for thousands of requests; recency (LRU)
// drops them at once and hits every request after the first few of the new
// phase. The adaptive policy must follow: its ghost lists move the weight
// to the recent counts within some 40 misses, where long-run counts alone
// would miss one request a step to the end (~200).
TEST(CacheSimTest, RecencyWinsAfterAPhaseChange) {
  Workload w;
  for (int step = 0; step < 1200; ++step) {
    w.Use(0, step < 1000 ? 0 : 2);
    w.Use(0, step < 1000 ? 1 : 3 + step % 2, /*same_group=*/true);
    w.Use(1, 9);
  }
  SimOptions options;
  options.capacity = 4;
  const SimResult lru = SimulatePolicy(w.events(), CachePolicyKind::kLru, options);
  const SimResult adaptive = SimulatePolicy(w.events(), CachePolicyKind::kAdaptive, options);
  EXPECT_GE(lru.hits, 3600u - 6);
  EXPECT_GE(adaptive.hits + 40, lru.hits);
}

// Every step hints a new expert of layer 1, then uses two new experts of
// layer 0, then the hinted one. At 3 experts the prefetched expert, never
// used before (use probability 0), is the first to go unless its hint keeps
// it: then both of layer 0's misses evict the other residents and every
// hinted expert is a hit.
TEST(CacheSimTest, AHintedExpertIsKeptUntilUsed) {
  Workload w;
  constexpr int kSteps = 20;
  for (int step = 0; step < kSteps; ++step) {
    w.Hint(1, step);
    w.Use(0, 2 * step);
    w.Use(0, 2 * step + 1, /*same_group=*/true);
    w.Use(1, step);
  }
  SimOptions options;
  options.capacity = 3;
  options.prefetch_all = true;
  const SimResult adaptive = SimulatePolicy(w.events(), CachePolicyKind::kAdaptive, options);
  EXPECT_EQ(adaptive.prefetch_issued, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(adaptive.prefetch_used, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(adaptive.hits, static_cast<uint64_t>(kSteps));
}

TEST(CacheSimTest, ExpertsPerLayerLeavesUnroutedLayersEmpty) {
  EXPECT_EQ(ExpertsPerLayer(Parse("colibri-routing-trace 1\nR 0 1 3:1\nR 0 2 0:1 7:2\n")),
            (std::vector<int>{0, 4, 8}));
}

}  // namespace
}  // namespace colibri::cache_sim
