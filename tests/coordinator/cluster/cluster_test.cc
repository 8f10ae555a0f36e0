// Cluster health and re-placement (coordinator/cluster/cluster.h) with fake nodes.
#include "coordinator/cluster/cluster.h"

#include <chrono>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/coordinator/cluster/cluster_test_support.h"
#include "tests/coordinator/cluster/fake_node_client.h"

namespace colibri::coordinator {
namespace {

using testing::Eventually;
using testing::RecordingRebalancer;

const std::vector<int> kExperts = {16, 0, 16, 16};

struct TestCluster {
  std::unique_ptr<Cluster> cluster;
  std::vector<testing::FakeNodeClient*> nodes;
  std::ostringstream log;
};

std::unique_ptr<TestCluster> MakeCluster(int n_nodes, int replicas, absl::Duration replace_after) {
  auto t = std::make_unique<TestCluster>();
  ClusterOptions options;
  options.replicas = replicas;
  options.probe_interval = absl::Milliseconds(5);
  options.replace_after = replace_after;
  options.log = &t->log;
  std::vector<std::unique_ptr<NodeClient>> clients;
  std::vector<Cluster::Node> nodes;
  for (int i = 0; i < n_nodes; ++i) {
    auto node = std::make_unique<testing::FakeNodeClient>("node" + std::to_string(i) + ":1");
    t->nodes.push_back(node.get());
    Cluster::Node n;
    n.address = node->address();
    n.node_id = "id-" + std::to_string(i);
    nodes.push_back(std::move(n));
    clients.push_back(std::move(node));
  }
  absl::StatusOr<std::unique_ptr<Cluster>> c =
      Cluster::Create(options, "fp", kExperts, std::move(clients), std::move(nodes));
  EXPECT_TRUE(c.ok()) << c.status();
  if (c.ok()) t->cluster = *std::move(c);
  return t;
}

// A node's work counts the ExpertWork units of the calls it answered; a
// failed call did no work.
TEST(ClusterTest, AnsweredCallsCountTheirWork) {
  std::unique_ptr<TestCluster> t = MakeCluster(2, 1, absl::InfiniteDuration());
  t->cluster->RecordCall(0, 10, 20, 0.01, 0.0, 7, absl::OkStatus());
  t->cluster->RecordCall(0, 10, 0, 0.01, 0.0, 5, absl::UnavailableError("down"));
  t->cluster->RecordCall(1, 10, 20, 0.01, 0.0, 3, absl::OkStatus());
  EXPECT_EQ(t->cluster->counters(0).work_units, 7);
  EXPECT_EQ(t->cluster->counters(1).work_units, 3);
}

// A node outrun by hedges stays outrun while its health probe fails and is
// cleared by the first probe it answers.
TEST(ClusterTest, AnOutrunNodeIsClearedByTheProbeItAnswers) {
  std::unique_ptr<TestCluster> t = MakeCluster(2, 1, absl::InfiniteDuration());
  t->nodes[0]->set_down(true);
  t->cluster->RecordCancelledCall(0, 10, 0.5, 7, /*outrun=*/true);
  t->cluster->RecordCancelledCall(1, 10, 0.5, 7, /*outrun=*/false);
  EXPECT_TRUE(t->cluster->outrun(0));
  EXPECT_FALSE(t->cluster->outrun(1));
  EXPECT_TRUE(t->cluster->healthy(0));
  EXPECT_EQ(t->cluster->counters(0).outruns, 1);
  t->nodes[0]->set_down(false);
  EXPECT_TRUE(Eventually([&] { return !t->cluster->outrun(0); }));
}

TEST(ClusterTest, NodeAwayTooLongIsReplacedAndPlacedBackWhenHealthy) {
  auto t = MakeCluster(3, 1, absl::Milliseconds(30));
  ASSERT_NE(t->cluster, nullptr);
  Cluster& cluster = *t->cluster;
  const Placement& original = cluster.placement();
  ASSERT_FALSE(original.ExpertsOf(1).empty());
  RecordingRebalancer rebalancer;
  cluster.SetRebalancer([&](const Placement& p) { return rebalancer(p); });

  t->nodes[1]->set_down(true);
  cluster.MarkUnhealthy(1, absl::UnavailableError("test"));
  ASSERT_TRUE(Eventually([&] { return cluster.replacements() == 1; })) << t->log.str();
  const Placement& moved = cluster.placement();
  EXPECT_TRUE(cluster.excluded(1));
  EXPECT_TRUE(moved.ExpertsOf(1).empty());
  // Only node 1's experts moved.
  for (int l = 0; l < moved.n_layer(); ++l) {
    for (int e = 0; e < moved.n_expert(l); ++e) {
      if (original.Primary(l, e) != 1) {
        EXPECT_EQ(moved.Primary(l, e), original.Primary(l, e));
      }
    }
  }
  // The reference handed out before stays valid (ASan would tell).
  EXPECT_FALSE(original.ExpertsOf(1).empty());

  t->nodes[1]->set_down(false);
  ASSERT_TRUE(Eventually([&] { return cluster.replacements() == 2; })) << t->log.str();
  EXPECT_FALSE(cluster.excluded(1));
  EXPECT_EQ(cluster.placement().ExpertsOf(1), original.ExpertsOf(1));
  EXPECT_EQ(rebalancer.calls(), 2);
  EXPECT_NE(t->log.str().find("re-placing experts (excluded: node1:1"), std::string::npos)
      << t->log.str();
}

TEST(ClusterTest, FailedRebalanceKeepsThePlacementAndRetries) {
  auto t = MakeCluster(3, 2, absl::Milliseconds(10));
  ASSERT_NE(t->cluster, nullptr);
  Cluster& cluster = *t->cluster;
  const std::vector<std::pair<int, int>> held = cluster.placement().ExpertsOf(2);
  RecordingRebalancer rebalancer;
  rebalancer.set_fail(true);
  cluster.SetRebalancer([&](const Placement& p) { return rebalancer(p); });
  t->nodes[2]->set_down(true);
  cluster.MarkUnhealthy(2, absl::UnavailableError("test"));
  ASSERT_TRUE(Eventually([&] { return rebalancer.calls() >= 2; })) << t->log.str();
  EXPECT_EQ(cluster.replacements(), 0);
  EXPECT_EQ(cluster.placement().ExpertsOf(2), held);
  EXPECT_FALSE(cluster.excluded(2));
  rebalancer.set_fail(false);
  ASSERT_TRUE(Eventually([&] { return cluster.replacements() == 1; })) << t->log.str();
  EXPECT_TRUE(cluster.placement().ExpertsOf(2).empty());
  EXPECT_EQ(cluster.placement().replicas(), 2);
}

TEST(ClusterTest, LastNodeIsNeverExcludedAndNoRebalancerMeansNoChange) {
  auto t = MakeCluster(2, 2, absl::Milliseconds(10));
  ASSERT_NE(t->cluster, nullptr);
  Cluster& cluster = *t->cluster;
  RecordingRebalancer rebalancer;
  cluster.SetRebalancer([&](const Placement& p) { return rebalancer(p); });
  for (int i : {0, 1}) {
    t->nodes[i]->set_down(true);
    cluster.MarkUnhealthy(i, absl::UnavailableError("test"));
  }
  ASSERT_TRUE(Eventually([&] { return cluster.replacements() == 1; })) << t->log.str();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cluster.replacements(), 1);
  EXPECT_NE(cluster.excluded(0), cluster.excluded(1));
  // R shrinks to the nodes left.
  EXPECT_EQ(cluster.placement().replicas(), 1);

  auto plain = MakeCluster(2, 1, absl::Milliseconds(1));
  ASSERT_NE(plain->cluster, nullptr);
  plain->nodes[0]->set_down(true);
  plain->cluster->MarkUnhealthy(0, absl::UnavailableError("test"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(plain->cluster->replacements(), 0);
  EXPECT_FALSE(plain->cluster->excluded(0));
}

TEST(ClusterTest, AnyHealthyUntilTheLastNodeFailsAndAgainWhenOneAnswers) {
  auto t = MakeCluster(2, 1, absl::Hours(1));
  ASSERT_NE(t->cluster, nullptr);
  Cluster& cluster = *t->cluster;
  EXPECT_TRUE(cluster.AnyHealthy());
  t->nodes[0]->set_down(true);
  cluster.MarkUnhealthy(0, absl::UnavailableError("test"));
  EXPECT_TRUE(cluster.AnyHealthy());
  t->nodes[1]->set_down(true);
  cluster.MarkUnhealthy(1, absl::UnavailableError("test"));
  EXPECT_FALSE(cluster.AnyHealthy());
  t->nodes[1]->set_down(false);
  ASSERT_TRUE(Eventually([&] { return cluster.AnyHealthy(); })) << t->log.str();
}

TEST(ClusterTest, RepairRunsTheRebalancerForThePlacementInForce) {
  auto t = MakeCluster(3, 1, absl::Hours(1));
  ASSERT_NE(t->cluster, nullptr);
  Cluster& cluster = *t->cluster;
  cluster.RequestRepair();  // no rebalancer yet: nothing to do
  RecordingRebalancer rebalancer;
  const Placement* seen = nullptr;
  cluster.SetRebalancer([&](const Placement& p) {
    seen = &p;
    return rebalancer(p);
  });
  EXPECT_EQ(rebalancer.calls(), 0);
  cluster.RequestRepair();
  cluster.RequestRepair();
  ASSERT_TRUE(Eventually([&] { return cluster.repairs() >= 1; })) << t->log.str();
  EXPECT_EQ(seen, &cluster.placement());
  EXPECT_EQ(cluster.replacements(), 0);
  EXPECT_LE(rebalancer.calls(), 2);
  EXPECT_NE(t->log.str().find("repairing"), std::string::npos) << t->log.str();
}

}  // namespace
}  // namespace colibri::coordinator
