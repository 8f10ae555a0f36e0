// Weighted rendezvous placement (coordinator/placement.h).
#include "coordinator/placement.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::coordinator {
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

}  // namespace
}  // namespace colibri::coordinator
