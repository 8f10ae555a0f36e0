// PlanHotExperts with hand-made loads, speeds and budgets whose right answer
// is known: the hot expert gets a copy on the fastest node with room, budgets
// and the byte bound hold, cold copies and copies on unusable nodes go, and
// rendezvous copies are never touched.
#include "coordinator/cluster/hot_experts.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "placement/placement.h"

namespace colibri::coordinator {
namespace {

using placement::ExtraCopy;
using placement::Placement;
using placement::PlacementNode;

constexpr int64_t kBytes = 1000;  // one expert
constexpr int kE = 64;            // experts per layer

Placement Make(int n_nodes, std::vector<int> experts_per_layer) {
  std::vector<PlacementNode> nodes;
  for (int i = 0; i < n_nodes; ++i) nodes.push_back({"node-" + std::to_string(i), 1.0});
  return *Placement::Compute(nodes, experts_per_layer, 1);
}

// An expert of `layer` whose primary is `node` (-1 when none is).
int ExpertOn(const Placement& p, int layer, int node) {
  for (int e = 0; e < p.n_expert(layer); ++e) {
    if (p.Primary(layer, e) == node) return e;
  }
  return -1;
}

HotExpertInputs Inputs(const Placement& p, std::vector<std::vector<double>> load, int n_nodes) {
  HotExpertInputs in;
  in.placement = &p;
  in.load = std::move(load);
  in.seconds_per_load.assign(n_nodes, 1.0);
  in.usable.assign(n_nodes, true);
  in.budget_bytes.assign(n_nodes, 10 * kBytes);
  in.expert_bytes.assign(p.n_layer(), kBytes);
  return in;
}

TEST(LayerNodeTimesTest, SharesAnExpertOverItsCopiesByTheirSpeed) {
  // One expert of load 12 on nodes 0 (1 s per unit) and 1 (0.5 s): both
  // finish at T with T/1 + T/0.5 = 12, T = 4.
  const std::vector<double> t = LayerNodeTimes({{0, 1}}, {12}, {1.0, 0.5}, {true, true});
  EXPECT_DOUBLE_EQ(t[0], 4);
  EXPECT_DOUBLE_EQ(t[1], 4);
  // An unusable copy takes nothing.
  const std::vector<double> u = LayerNodeTimes({{0, 1}}, {12}, {1.0, 0.5}, {true, false});
  EXPECT_DOUBLE_EQ(u[0], 12);
  EXPECT_DOUBLE_EQ(u[1], 0);
}

TEST(PlanHotExpertsTest, CopiesTheHotExpertOfTheBusiestNodeToAnIdleOne) {
  const Placement p = Make(2, {kE});
  const int hot = ExpertOn(p, 0, 0);
  ASSERT_GE(hot, 0);
  std::vector<std::vector<double>> load(1, std::vector<double>(kE, 0.0));
  load[0][hot] = 100;
  const HotExpertPlan plan = PlanHotExperts(Inputs(p, load, 2));
  ASSERT_EQ(plan.added.size(), 1u);
  EXPECT_EQ(plan.added[0], (ExtraCopy{0, hot, 1}));
  EXPECT_EQ(plan.extras, plan.added);
  EXPECT_TRUE(plan.dropped.empty());
  EXPECT_EQ(plan.bytes_added, kBytes);
  EXPECT_DOUBLE_EQ(plan.cost_before, 100);
  EXPECT_DOUBLE_EQ(plan.cost_after, 50);
  // The plan applies to the placement and keeps every rendezvous copy.
  const Placement next = *p.WithExtraCopies(plan.extras);
  for (int e = 0; e < kE; ++e) EXPECT_EQ(next.Primary(0, e), p.Primary(0, e));
  EXPECT_EQ(next.Owners(0, hot).size(), 2u);
}

TEST(PlanHotExpertsTest, PrefersTheFastestNodeWithRoom) {
  const Placement p = Make(3, {kE});
  const int hot = ExpertOn(p, 0, 0);
  ASSERT_GE(hot, 0);
  std::vector<std::vector<double>> load(1, std::vector<double>(kE, 0.0));
  load[0][hot] = 90;
  HotExpertInputs in = Inputs(p, load, 3);
  in.seconds_per_load = {1.0, 1.0, 0.25};
  HotExpertPlan plan = PlanHotExperts(in);
  ASSERT_FALSE(plan.added.empty());
  EXPECT_EQ(plan.added[0].node, 2);
  // Without room on node 2 the copy goes to node 1.
  in.budget_bytes[2] = kBytes - 1;
  plan = PlanHotExperts(in);
  ASSERT_EQ(plan.added.size(), 1u);
  EXPECT_EQ(plan.added[0], (ExtraCopy{0, hot, 1}));
}

TEST(PlanHotExpertsTest, RespectsBudgetsAndTheBytesPerRound) {
  const Placement p = Make(2, {kE, kE, kE});
  std::vector<std::vector<double>> load(3, std::vector<double>(kE, 0.0));
  for (int l = 0; l < 3; ++l) {
    ASSERT_GE(ExpertOn(p, l, 0), 0);
    load[l][ExpertOn(p, l, 0)] = 100;
  }
  HotExpertInputs in = Inputs(p, load, 2);
  // Room for every layer's copy: three adds.
  EXPECT_EQ(PlanHotExperts(in).added.size(), 3u);
  // Node 1 has room for two experts.
  in.budget_bytes[1] = 2 * kBytes;
  HotExpertPlan plan = PlanHotExperts(in);
  EXPECT_EQ(plan.added.size(), 2u);
  for (const ExtraCopy& x : plan.added) EXPECT_EQ(x.node, 1);
  // One expert's bytes per round.
  in.budget_bytes[1] = 10 * kBytes;
  HotExpertOptions options;
  options.max_bytes_added = kBytes;
  plan = PlanHotExperts(in, options);
  EXPECT_EQ(plan.added.size(), 1u);
  EXPECT_EQ(plan.bytes_added, kBytes);
  // No room anywhere: nothing.
  in.budget_bytes = {0, 0};
  EXPECT_TRUE(PlanHotExperts(in).added.empty());
}

TEST(PlanHotExpertsTest, DropsColdCopiesAndKeepsHotOnes) {
  const Placement base = Make(2, {kE});
  const int hot = ExpertOn(base, 0, 0);
  const int cold = ExpertOn(base, 0, 1);
  ASSERT_GE(hot, 0);
  ASSERT_GE(cold, 0);
  const Placement p = *base.WithExtraCopies({{0, hot, 1}, {0, cold, 0}});
  std::vector<std::vector<double>> load(1, std::vector<double>(kE, 0.0));
  load[0][hot] = 100;
  load[0][cold] = 1;
  const HotExpertPlan plan = PlanHotExperts(Inputs(p, load, 2));
  EXPECT_EQ(plan.extras, (std::vector<ExtraCopy>{{0, hot, 1}}));
  EXPECT_EQ(plan.dropped, (std::vector<ExtraCopy>{{0, cold, 0}}));
  EXPECT_TRUE(plan.added.empty());
}

TEST(PlanHotExpertsTest, DropsCopiesOnUnusableNodesAndOverBudget) {
  const Placement base = Make(3, {kE});
  const int hot = ExpertOn(base, 0, 0);
  ASSERT_GE(hot, 0);
  const Placement p = *base.WithExtraCopies({{0, hot, 1}, {0, hot, 2}});
  std::vector<std::vector<double>> load(1, std::vector<double>(kE, 0.0));
  load[0][hot] = 100;
  HotExpertInputs in = Inputs(p, load, 3);
  in.usable[2] = false;
  HotExpertPlan plan = PlanHotExperts(in);
  EXPECT_EQ(plan.extras, (std::vector<ExtraCopy>{{0, hot, 1}}));
  EXPECT_EQ(plan.dropped, (std::vector<ExtraCopy>{{0, hot, 2}}));
  in.usable[2] = true;
  in.budget_bytes[1] = 0;
  plan = PlanHotExperts(in);
  EXPECT_EQ(plan.extras, (std::vector<ExtraCopy>{{0, hot, 2}}));
}

TEST(PlanHotExpertsTest, KeepsTheExtrasWhenThereIsNoLoad) {
  const Placement base = Make(2, {kE});
  const Placement p = *base.WithExtraCopies({{0, ExpertOn(base, 0, 0), 1}});
  const HotExpertPlan plan = PlanHotExperts(Inputs(p, {std::vector<double>(kE, 0.0)}, 2));
  EXPECT_EQ(plan.extras, p.AllExtras());
  EXPECT_TRUE(plan.added.empty());
  EXPECT_TRUE(plan.dropped.empty());
}

TEST(PlanHotExpertsTest, ABalancedLayerGetsNoCopies) {
  const Placement p = Make(2, {kE});
  // Every expert equally used: both nodes carry their share already (the
  // placement gives each some experts); a copy gains less than min_gain
  // unless the shares differ.
  std::vector<std::vector<double>> load(1, std::vector<double>(kE, 0.0));
  const int a = ExpertOn(p, 0, 0);
  const int b = ExpertOn(p, 0, 1);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  load[0][a] = 50;
  load[0][b] = 50;
  EXPECT_TRUE(PlanHotExperts(Inputs(p, load, 2)).added.empty());
}

TEST(PlacementExtrasTest, RejectsBadCopies) {
  const Placement p = Make(2, {kE});
  const int e = ExpertOn(p, 0, 0);
  EXPECT_FALSE(p.WithExtraCopies({{0, e, 0}}).ok());  // held already
  EXPECT_FALSE(p.WithExtraCopies({{0, e, 1}, {0, e, 1}}).ok());
  EXPECT_FALSE(p.WithExtraCopies({{1, 0, 0}}).ok());
  EXPECT_FALSE(p.WithExtraCopies({{0, kE, 0}}).ok());
  EXPECT_FALSE(p.WithExtraCopies({{0, e, 2}}).ok());
  const Placement q = *p.WithExtraCopies({{0, e, 1}});
  EXPECT_EQ(q.max_copies(), 2);
  EXPECT_EQ(q.replicas(), 1);
  EXPECT_EQ(q.Extras(0, e).size(), 1u);
  EXPECT_EQ(q.AllExtras(), (std::vector<ExtraCopy>{{0, e, 1}}));
}

}  // namespace
}  // namespace colibri::coordinator
