// ChooseFastestReplicas: work goes to the copy expected to answer first, is
// shared among copies of about the same speed, avoids a slow node whenever a
// faster copy exists, and only usable nodes are chosen.
#include "coordinator/cluster/replica_choice.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

using placement::ExpertWork;
using placement::Placement;
using placement::PlacementNode;

constexpr int kExperts = 32;

Placement ThreeNodesTwoCopies() {
  std::vector<PlacementNode> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(PlacementNode{"n" + std::to_string(i), 1.0});
  absl::StatusOr<Placement> p = Placement::Compute(nodes, {kExperts}, 2);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

// [node]: the work each node was given.
std::vector<int64_t> Load(const Placement& p, const std::vector<int>& chosen,
                          const std::vector<int64_t>& work) {
  std::vector<int64_t> load(p.n_nodes(), 0);
  for (int e = 0; e < kExperts; ++e) {
    if (work[e] > 0) load[p.Owners(0, e)[chosen[e]]] += work[e];
  }
  return load;
}

TEST(ReplicaChoiceTest, ASlowNodeGetsNothingWhileAFastCopyExists) {
  const Placement p = ThreeNodesTwoCopies();
  std::vector<int64_t> work(kExperts, 0);
  for (int e = 0; e < 8; ++e) work[e * 4] = ExpertWork(1);
  // Node 1 is behind a 20 ms link; the others answer in 0.5 ms.
  std::vector<NodeSpeed> speed = {{0.0005, 1e-5}, {0.040, 1e-5}, {0.0005, 1e-5}};
  const std::vector<int> chosen = ChooseFastestReplicas(p, 0, work, speed, {true, true, true});
  const std::vector<int64_t> load = Load(p, chosen, work);
  EXPECT_EQ(load[1], 0);
  EXPECT_GT(load[0], 0);
  EXPECT_GT(load[2], 0);
  // Speed is all that changed: the same arguments give the same choice.
  EXPECT_EQ(chosen, ChooseFastestReplicas(p, 0, work, speed, {true, true, true}));
}

TEST(ReplicaChoiceTest, NodesOfAboutTheSameSpeedShareTheWork) {
  const Placement p = ThreeNodesTwoCopies();
  std::vector<int64_t> work(kExperts, ExpertWork(2));
  // Within the slack of each other, and no compute figures at all.
  std::vector<NodeSpeed> speed = {{0.0010, 0}, {0.0011, 0}, {0.0012, 0}};
  const std::vector<int64_t> load =
      Load(p, ChooseFastestReplicas(p, 0, work, speed, {true, true, true}), work);
  const int64_t total = kExperts * ExpertWork(2);
  for (int n = 0; n < 3; ++n) {
    EXPECT_GT(load[n], total / 4) << "node " << n;
    EXPECT_LT(load[n], total / 2) << "node " << n;
  }
}

TEST(ReplicaChoiceTest, ASlowNodeTakesWorkOnceTheFastOnesAreLoadedEnough) {
  const Placement p = ThreeNodesTwoCopies();
  // A long prompt: every expert 500 tokens, 1 ms of work per token-unit on
  // each node; the slow node's 40 ms link is small beside that.
  std::vector<int64_t> work(kExperts, ExpertWork(500));
  std::vector<NodeSpeed> speed = {{0.0005, 1e-3}, {0.040, 1e-3}, {0.0005, 1e-3}};
  const std::vector<int64_t> load =
      Load(p, ChooseFastestReplicas(p, 0, work, speed, {true, true, true}), work);
  EXPECT_GT(load[1], 0);
}

TEST(ReplicaChoiceTest, OnlyUsableNodesAreChosen) {
  const Placement p = ThreeNodesTwoCopies();
  std::vector<int64_t> work(kExperts, ExpertWork(1));
  std::vector<NodeSpeed> speed = {{0.040, 0}, {0.0005, 0}, {0.0005, 0}};
  const std::vector<bool> usable = {true, false, true};
  const std::vector<int> chosen = ChooseFastestReplicas(p, 0, work, speed, usable);
  for (int e = 0; e < kExperts; ++e) {
    const int node = p.Owners(0, e)[chosen[e]];
    EXPECT_TRUE(usable[node]) << "expert " << e;
    // The slow node 0 only where it is the only usable copy.
    if (node == 0) {
      EXPECT_EQ(std::count(p.Owners(0, e).begin(), p.Owners(0, e).end(), 1), 1) << "expert " << e;
    }
  }
}

}  // namespace
}  // namespace colibri::coordinator
