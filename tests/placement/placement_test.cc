// Weighted rendezvous placement (placement/placement.h).
#include "placement/placement.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::placement {
namespace {

std::vector<PlacementNode> Nodes(const std::vector<double>& weights) {
  std::vector<PlacementNode> nodes;
  for (size_t i = 0; i < weights.size(); ++i) {
    nodes.push_back({"node-" + std::to_string(i), weights[i]});
  }
  return nodes;
}

// A model-like grid: 64 layers of 128 experts.
const std::vector<int> kGrid(64, 128);
constexpr int kTotal = 64 * 128;

std::vector<int> PrimaryCounts(const Placement& p) {
  std::vector<int> count(p.n_nodes());
  for (int l = 0; l < p.n_layer(); ++l) {
    for (int e = 0; e < p.n_expert(l); ++e) ++count[p.Primary(l, e)];
  }
  return count;
}

TEST(PlacementTest, EqualWeightsBalance) {
  absl::StatusOr<Placement> p = Placement::Compute(Nodes({1, 1, 1, 1}), kGrid, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int c : PrimaryCounts(*p)) {
    EXPECT_NEAR(c, kTotal / 4.0, 0.05 * kTotal / 4.0);
  }
}

TEST(PlacementTest, SharesAreProportionalToWeights) {
  const std::vector<double> w = {1, 2, 3, 6};
  absl::StatusOr<Placement> p = Placement::Compute(Nodes(w), kGrid, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<int> count = PrimaryCounts(*p);
  for (size_t i = 0; i < w.size(); ++i) {
    const double expected = kTotal * w[i] / 12.0;
    EXPECT_NEAR(count[i], expected, 0.08 * expected) << "node " << i;
  }
}

TEST(PlacementTest, RemovingANodeMovesOnlyItsExperts) {
  const std::vector<PlacementNode> all = Nodes({1, 2, 1, 1, 3});
  std::vector<PlacementNode> fewer = all;
  fewer.erase(fewer.begin() + 2);  // indexes after 2 shift down by one
  for (int replicas : {1, 2}) {
    absl::StatusOr<Placement> before = Placement::Compute(all, kGrid, replicas);
    absl::StatusOr<Placement> after = Placement::Compute(fewer, kGrid, replicas);
    ASSERT_TRUE(before.ok() && after.ok());
    int moved = 0;
    for (int l = 0; l < before->n_layer(); ++l) {
      for (int e = 0; e < before->n_expert(l); ++e) {
        std::vector<std::string> b, a;
        for (int n : before->Owners(l, e)) b.push_back(all[n].id);
        for (int n : after->Owners(l, e)) a.push_back(fewer[n].id);
        bool held_by_removed = false;
        for (const std::string& id : b) held_by_removed |= id == all[2].id;
        if (!held_by_removed) {
          EXPECT_EQ(a, b) << "layer " << l << " expert " << e;
        } else {
          ++moved;
          // The surviving replicas keep their order; one new node joins at the end.
          std::vector<std::string> kept;
          for (const std::string& id : b) {
            if (id != all[2].id) kept.push_back(id);
          }
          EXPECT_EQ(std::vector<std::string>(a.begin(), a.begin() + kept.size()), kept);
        }
      }
    }
    // The removed node held about weight share * replicas of the experts.
    EXPECT_GT(moved, 0);
    EXPECT_LT(moved, kTotal * replicas * 1.0 / 8 * 1.3);
  }
}

TEST(PlacementTest, AddingANodeMovesOnlyItsNewShare) {
  const std::vector<PlacementNode> before_nodes = Nodes({1, 1, 1});
  std::vector<PlacementNode> after_nodes = before_nodes;
  after_nodes.push_back({"node-new", 1});
  absl::StatusOr<Placement> before = Placement::Compute(before_nodes, kGrid, 1);
  absl::StatusOr<Placement> after = Placement::Compute(after_nodes, kGrid, 1);
  ASSERT_TRUE(before.ok() && after.ok());
  int moved = 0;
  for (int l = 0; l < before->n_layer(); ++l) {
    for (int e = 0; e < before->n_expert(l); ++e) {
      if (before->Primary(l, e) != after->Primary(l, e)) {
        ++moved;
        EXPECT_EQ(after->Primary(l, e), 3) << "an expert moved between old nodes";
      }
    }
  }
  EXPECT_NEAR(moved, kTotal / 4.0, 0.05 * kTotal / 4.0);
}

TEST(PlacementTest, ReplicasAreOnDistinctNodes) {
  absl::StatusOr<Placement> p = Placement::Compute(Nodes({1, 1, 2, 1, 1}), kGrid, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int> held(5);
  for (int l = 0; l < p->n_layer(); ++l) {
    for (int e = 0; e < p->n_expert(l); ++e) {
      std::set<int> owners(p->Owners(l, e).begin(), p->Owners(l, e).end());
      EXPECT_EQ(owners.size(), 3u);
    }
  }
  for (int n = 0; n < 5; ++n) held[n] = static_cast<int>(p->ExpertsOf(n).size());
  int sum = 0;
  for (int h : held) sum += h;
  EXPECT_EQ(sum, 3 * kTotal);
}

TEST(PlacementTest, IsDeterministicAndSkipsDenseLayers) {
  const std::vector<int> grid = {8, 0, 8};
  absl::StatusOr<Placement> a = Placement::Compute(Nodes({1, 1}), grid, 1);
  absl::StatusOr<Placement> b = Placement::Compute(Nodes({1, 1}), grid, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->n_expert(1), 0);
  for (int l : {0, 2}) {
    for (int e = 0; e < 8; ++e) EXPECT_EQ(a->Primary(l, e), b->Primary(l, e));
  }
}

// Marking a node unavailable (node indexes stay put) must give the same owners
// as removing it from the list.
TEST(PlacementTest, UnavailableNodeIsLikeARemovedOne) {
  const std::vector<PlacementNode> all = Nodes({1, 2, 1, 3});
  std::vector<PlacementNode> fewer = all;
  fewer.erase(fewer.begin() + 1);
  for (int replicas : {1, 2, 3}) {
    absl::StatusOr<Placement> masked =
        Placement::Compute(all, kGrid, replicas, {true, false, true, true});
    absl::StatusOr<Placement> removed = Placement::Compute(fewer, kGrid, replicas);
    ASSERT_TRUE(masked.ok() && removed.ok()) << masked.status() << removed.status();
    EXPECT_EQ(masked->n_nodes(), 4);
    EXPECT_TRUE(masked->ExpertsOf(1).empty());
    for (int l = 0; l < static_cast<int>(kGrid.size()); l += 7) {
      for (int e = 0; e < kGrid[l]; ++e) {
        std::vector<std::string> a, b;
        for (int n : masked->Owners(l, e)) a.push_back(all[n].id);
        for (int n : removed->Owners(l, e)) b.push_back(fewer[n].id);
        EXPECT_EQ(a, b) << "layer " << l << " expert " << e;
      }
    }
  }
  EXPECT_FALSE(Placement::Compute(all, kGrid, 2, {false, false, true, false}).ok());
  EXPECT_FALSE(Placement::Compute(all, kGrid, 1, {true, true}).ok());
}

TEST(PlacementTest, RejectsBadInput) {
  EXPECT_FALSE(Placement::Compute({}, kGrid, 1).ok());
  EXPECT_FALSE(Placement::Compute(Nodes({1, 1}), kGrid, 3).ok());
  EXPECT_FALSE(Placement::Compute(Nodes({1, 1}), kGrid, 0).ok());
  EXPECT_FALSE(Placement::Compute(Nodes({1, 0}), kGrid, 1).ok());
  EXPECT_FALSE(Placement::Compute({{"a", 1}, {"a", 1}}, kGrid, 1).ok());
}

TEST(PlacementTest, ScoreGrowsWithWeight) {
  PlacementNode light{"x", 1.0};
  PlacementNode heavy{"x", 2.0};
  EXPECT_DOUBLE_EQ(RendezvousScore(heavy, 3, 7), 2 * RendezvousScore(light, 3, 7));
  EXPECT_GT(RendezvousScore(light, 3, 7), 0);
}

// Experts of layer 0 of `p` (one layer) whose owners are exactly `owners`.
std::vector<int> ExpertsOwnedBy(const Placement& p, const std::vector<int>& owners) {
  std::vector<int> found;
  for (int e = 0; e < p.n_expert(0); ++e) {
    absl::Span<const int> o = p.Owners(0, e);
    if (std::vector<int>(o.begin(), o.end()) == owners) found.push_back(e);
  }
  return found;
}

// The most work any node gets when expert e goes to Owners(0, e)[chosen[e]].
int64_t MaxLoad(const Placement& p, const std::vector<int64_t>& cost,
                const std::vector<int>& chosen) {
  std::vector<int64_t> load(p.n_nodes(), 0);
  for (int e = 0; e < p.n_expert(0); ++e) {
    if (cost[e] > 0) load[p.Owners(0, e)[chosen[e]]] += cost[e];
  }
  return *std::max_element(load.begin(), load.end());
}

TEST(BalanceReplicasTest, OneReplicaLeavesEveryExpertOnItsOwner) {
  absl::StatusOr<Placement> p = Placement::Compute(Nodes({1, 1, 1}), {64}, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int64_t> cost(64, ExpertWork(1));
  EXPECT_EQ(BalanceReplicas(*p, 0, cost, {true, true, true}), std::vector<int>(64, 0));
}

TEST(BalanceReplicasTest, SplitsExpertsThatShareAPrimary) {
  absl::StatusOr<Placement> p = Placement::Compute(Nodes({1, 1, 1}), {256}, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<int> pair = ExpertsOwnedBy(*p, {0, 1});
  ASSERT_GE(pair.size(), 4u);
  std::vector<int64_t> cost(256, 0);
  // Alone, an expert stays on its primary (a tie goes to the first owner).
  cost[pair[0]] = ExpertWork(1);
  EXPECT_EQ(BalanceReplicas(*p, 0, cost, {true, true, true})[pair[0]], 0);
  // Four of them with primary 0 and secondary 1: two each.
  for (int i = 0; i < 4; ++i) cost[pair[i]] = ExpertWork(1);
  const std::vector<int> chosen = BalanceReplicas(*p, 0, cost, {true, true, true});
  int on_secondary = 0;
  for (int i = 0; i < 4; ++i) on_secondary += chosen[pair[i]];
  EXPECT_EQ(on_secondary, 2);
  EXPECT_EQ(MaxLoad(*p, cost, chosen), 2 * ExpertWork(1));
  // The heavier expert is placed first, on its primary.
  cost[pair[3]] = ExpertWork(5);
  EXPECT_EQ(BalanceReplicas(*p, 0, cost, {true, true, true})[pair[3]], 0);
}

TEST(BalanceReplicasTest, AnExpertWithOneHealthyReplicaPushesTheOthersAway) {
  absl::StatusOr<Placement> p = Placement::Compute(Nodes({1, 1, 1}), {256}, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  // a: node 2 then 1; b: node 0 then 2. With node 0 down, b can only go to
  // node 2, so a goes to its secondary, node 1.
  const std::vector<int> a = ExpertsOwnedBy(*p, {2, 1});
  const std::vector<int> b = ExpertsOwnedBy(*p, {0, 2});
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  std::vector<int64_t> cost(256, 0);
  cost[a[0]] = ExpertWork(1);
  cost[b[0]] = ExpertWork(1);
  std::vector<int> chosen = BalanceReplicas(*p, 0, cost, {false, true, true});
  EXPECT_EQ(chosen[b[0]], 1);
  EXPECT_EQ(chosen[a[0]], 1);
  // All healthy, each stays on its primary.
  chosen = BalanceReplicas(*p, 0, cost, {true, true, true});
  EXPECT_EQ(chosen[b[0]], 0);
  EXPECT_EQ(chosen[a[0]], 0);
  // An expert with both replicas down keeps 0 (the caller falls back).
  const std::vector<int> c = ExpertsOwnedBy(*p, {2, 0});
  ASSERT_FALSE(c.empty());
  cost[c[0]] = ExpertWork(1);
  EXPECT_EQ(BalanceReplicas(*p, 0, cost, {false, true, false})[c[0]], 0);
}

// Random batches on 4 nodes: every choice is a healthy replica, and the
// busiest node never carries more than with every expert on its primary.
TEST(BalanceReplicasTest, NeverWorseThanThePrimariesAndOnlyHealthyNodes) {
  absl::StatusOr<Placement> p = Placement::Compute(Nodes({1, 1, 1, 1}), {128}, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  std::mt19937 rng(3);
  int64_t balanced_total = 0, primary_total = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<int64_t> cost(128, 0);
    for (int r = 0; r < 8 * (1 + round % 4); ++r) {
      const int e = static_cast<int>(rng() % 128);
      cost[e] = ExpertWork(cost[e] == 0 ? 1 : (cost[e] - 4) / 3 + 1);
    }
    std::vector<bool> healthy(4, true);
    if (round % 5 == 0) healthy[rng() % 4] = false;
    const std::vector<int> chosen = BalanceReplicas(*p, 0, cost, healthy);
    std::vector<int> primary(128, 0);
    for (int e = 0; e < 128; ++e) {
      if (cost[e] == 0) continue;
      absl::Span<const int> owners = p->Owners(0, e);
      if (!healthy[owners[0]]) primary[e] = 1;
      EXPECT_TRUE(healthy[owners[chosen[e]]]) << "round " << round << " expert " << e;
    }
    const int64_t balanced = MaxLoad(*p, cost, chosen);
    const int64_t on_primaries = MaxLoad(*p, cost, primary);
    EXPECT_LE(balanced, on_primaries) << "round " << round;
    balanced_total += balanced;
    primary_total += on_primaries;
  }
  // And clearly better on the whole (about a fifth less here).
  EXPECT_LT(balanced_total * 10, primary_total * 9);
}

}  // namespace
}  // namespace colibri::placement
