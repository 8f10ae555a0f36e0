// HotExpertRebalancer over a Cluster of fake nodes: a round's copies are used
// only once the rebalancer (the nodes) confirmed them, a failed transfer keeps
// the placement in force (every expert keeps its confirmed copy), cold copies
// are dropped, and RAM budgets bound the copies.
#include "coordinator/cluster/hot_expert_rebalancer.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/coordinator/cluster/cluster_test_support.h"
#include "tests/coordinator/cluster/fake_node_client.h"

namespace colibri::coordinator {
namespace {

constexpr int64_t kExpertBytes = 1000;
const std::vector<int> kExperts = {8, 8};

using testing::Eventually;
using testing::RecordingRebalancer;

struct Fixture {
  std::unique_ptr<Cluster> cluster;
  RecordingRebalancer rebalancer;
  std::ostringstream log;
  absl::Mutex use_mu;
  std::vector<std::vector<int64_t>> use ABSL_GUARDED_BY(use_mu) = {std::vector<int64_t>(8, 0),
                                                                   std::vector<int64_t>(8, 0)};
  std::unique_ptr<HotExpertRebalancer> hot;

  explicit Fixture(uint64_t ram_budget) {
    ClusterOptions options;
    options.probe_interval = absl::Milliseconds(5);
    options.log = &log;
    std::vector<std::unique_ptr<NodeClient>> clients;
    std::vector<Cluster::Node> nodes;
    for (int i = 0; i < 2; ++i) {
      auto node = std::make_unique<testing::FakeNodeClient>("node" + std::to_string(i) + ":1");
      Cluster::Node n;
      n.address = node->address();
      n.node_id = "id-" + std::to_string(i);
      n.inventory.set_ram_budget_bytes(ram_budget);
      nodes.push_back(std::move(n));
      clients.push_back(std::move(node));
    }
    cluster = *Cluster::Create(options, "fp", kExperts, std::move(clients), std::move(nodes));
    cluster->SetRebalancer([this](const Placement& p) { return rebalancer(p); });
    hot = std::make_unique<HotExpertRebalancer>(HotExpertRebalancerOptions(), cluster.get(),
                                                std::vector<int64_t>{kExpertBytes, kExpertBytes},
                                                [this] {
                                                  absl::MutexLock lock(&use_mu);
                                                  return use;
                                                });
  }
  void Use(int layer, int expert, int64_t routes) {
    absl::MutexLock lock(&use_mu);
    use[layer][expert] += routes;
  }
  // An expert of layer 0 whose rendezvous copy is on node.
  int ExpertOn(int node) const {
    for (int e = 0; e < 8; ++e) {
      if (cluster->placement().Primary(0, e) == node) return e;
    }
    return -1;
  }
};

TEST(HotExpertRebalancerTest, AddsACopyOnlyOnceConfirmedAndDropsItWhenCold) {
  Fixture f(100 * kExpertBytes);
  const int hot = f.ExpertOn(0);
  const int other = f.ExpertOn(1);
  ASSERT_GE(hot, 0);
  ASSERT_GE(other, 0);
  // Transfers fail: the plan asks for the copy but the placement in force
  // keeps the hot expert on its one confirmed copy.
  f.rebalancer.set_fail(true);
  f.Use(0, hot, 100);
  const HotExpertPlan plan = f.hot->Round();
  ASSERT_EQ(plan.added, (std::vector<placement::ExtraCopy>{{0, hot, 1}}));
  ASSERT_TRUE(Eventually([&] { return f.rebalancer.calls() >= 1; }));
  EXPECT_EQ(f.cluster->placement().Owners(0, hot).size(), 1u);
  EXPECT_EQ(f.cluster->extra_copy_counters().added, 0);
  // Once the transfer succeeds (it is retried), the copy is in force.
  f.rebalancer.set_fail(false);
  ASSERT_TRUE(Eventually([&] { return f.cluster->placement().Owners(0, hot).size() == 2; }));
  EXPECT_EQ(f.cluster->placement().Owners(0, hot)[1], 1);
  EXPECT_EQ(f.cluster->extra_copy_counters().added, 1);
  // The load moves to another expert: the copy is cold and dropped; the
  // rendezvous copy stays.
  // Each round waits for its plan to be in force, so that the next one plans
  // from it (rounds in serve are seconds apart).
  for (int round = 0; round < 8; ++round) {
    f.Use(0, other, 100);
    const HotExpertPlan next = f.hot->Round();
    ASSERT_TRUE(Eventually([&] {
      const auto in_force = f.cluster->placement().AllExtras();
      return in_force.size() == next.extras.size() &&
             std::is_permutation(in_force.begin(), in_force.end(), next.extras.begin());
    })) << f.log.str();
  }
  ASSERT_TRUE(Eventually([&] { return f.cluster->placement().Owners(0, hot).size() == 1; }))
      << f.log.str();
  EXPECT_EQ(f.cluster->placement().Primary(0, hot), 0);
  // Copies of the expert that became hot may come and go on the way.
  EXPECT_GE(f.cluster->extra_copy_counters().dropped, 1);
  EXPECT_GE(f.hot->stats().rounds, 9);
}

TEST(HotExpertRebalancerTest, RamBudgetsBoundTheCopies) {
  // Each node's RAM holds its rendezvous share and nothing more.
  Fixture f(0);
  const std::vector<int64_t> budgets = HotExpertRebalancer::ExtraBudgets(
      *f.cluster, f.cluster->placement(), {kExpertBytes, kExpertBytes});
  EXPECT_EQ(budgets, (std::vector<int64_t>{0, 0}));
  f.Use(0, f.ExpertOn(0), 100);
  EXPECT_TRUE(f.hot->Round().added.empty());
}

TEST(HotExpertRebalancerTest, BudgetIsRamLessTheRendezvousShare) {
  Fixture f(20 * kExpertBytes);
  const Placement& p = f.cluster->placement();
  std::vector<int64_t> want = {20 * kExpertBytes, 20 * kExpertBytes};
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 8; ++e) want[p.Primary(l, e)] -= kExpertBytes;
  }
  EXPECT_EQ(HotExpertRebalancer::ExtraBudgets(*f.cluster, p, {kExpertBytes, kExpertBytes}), want);
}

}  // namespace
}  // namespace colibri::coordinator
