// Cluster membership (coordinator/cluster/cluster.h, "Membership") with fake nodes:
// nodes joining and leaving a running cluster, and a node unreachable at
// start-up joining under its own id. The expected owners are computed here
// from the rendezvous scores directly, not from Placement.
#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "coordinator/cluster/cluster.h"
#include "gtest/gtest.h"
#include "tests/coordinator/cluster/cluster_test_support.h"
#include "tests/coordinator/cluster/fake_node_client.h"

namespace colibri::coordinator {
namespace {

const std::vector<int> kExperts = {16, 0, 16, 16};

// Reports its id in Inventory; unreachable while down.
class IdNode : public testing::FakeNodeClient {
 public:
  IdNode(std::string address, std::string id)
      : FakeNodeClient(std::move(address)), id_(std::move(id)) {}
  absl::StatusOr<v1::InventoryReply> Inventory(const v1::InventoryRequest&) override {
    if (down()) return absl::UnavailableError(address() + " is down");
    v1::InventoryReply reply;
    reply.set_node_id(id_);
    return reply;
  }

 private:
  const std::string id_;
};

std::string Address(int k) { return "node" + std::to_string(k) + ":1"; }
std::string Id(int k) { return "id-" + std::to_string(k); }

// The id of the node with the highest rendezvous score for (layer, expert)
// among `ids` (equal weights, one replica).
std::string ExpectedOwner(const std::vector<int>& ids, int layer, int expert) {
  std::string best;
  double best_score = -1;
  for (int k : ids) {
    PlacementNode node;
    node.id = Id(k);
    const double score = RendezvousScore(node, layer, expert);
    if (score > best_score) {
      best_score = score;
      best = node.id;
    }
  }
  return best;
}

// Experts whose owner differs between the member sets `from` and `to`.
int64_t ExpectedMoves(const std::vector<int>& from, const std::vector<int>& to) {
  int64_t n = 0;
  for (int l = 0; l < static_cast<int>(kExperts.size()); ++l) {
    for (int e = 0; e < kExperts[l]; ++e) n += ExpectedOwner(from, l, e) != ExpectedOwner(to, l, e);
  }
  return n;
}

// Every expert of the placement in force is on the node ExpectedOwner names.
void ExpectOwners(const Cluster& cluster, const std::vector<int>& ids) {
  const Placement& p = cluster.placement();
  for (int l = 0; l < static_cast<int>(kExperts.size()); ++l) {
    for (int e = 0; e < kExperts[l]; ++e) {
      EXPECT_EQ(cluster.node(p.Primary(l, e)).node_id, ExpectedOwner(ids, l, e))
          << "layer " << l << " expert " << e;
    }
  }
}

using testing::Eventually;

// What the rebalancer saw when asked to realise a placement: the one in force
// then (routing must not have moved yet) and the clients of every node.
struct RebalanceCall {
  const Placement* in_force = nullptr;
  const Placement* asked = nullptr;
  std::vector<bool> has_client;
};

class ClusterMembershipTest : public ::testing::Test {
 protected:
  // n nodes, all reachable except `provisional` (-1: none), which starts down.
  void Start(int n, int provisional = -1) {
    ClusterOptions options;
    options.probe_interval = absl::Milliseconds(5);
    options.replace_after = absl::Hours(1);
    options.log = &log_;
    options.client_factory =
        [](const NodeClientOptions& o) -> absl::StatusOr<std::unique_ptr<NodeClient>> {
      // "nodeK:1" reports "id-K"; "deadK:1" never answers.
      const std::string k = o.address.substr(4, o.address.find(':') - 4);
      auto node = std::make_unique<IdNode>(o.address, "id-" + k);
      node->set_down(o.address.rfind("dead", 0) == 0);
      return node;
    };
    std::vector<std::unique_ptr<NodeClient>> clients;
    std::vector<Cluster::Node> nodes;
    std::vector<bool> reachable;
    for (int k = 0; k < n; ++k) {
      auto client = std::make_unique<IdNode>(Address(k), Id(k));
      Cluster::Node node;
      node.address = Address(k);
      node.node_id = k == provisional ? Address(k) : Id(k);
      node.provisional = k == provisional;
      if (k == provisional) {
        client->set_down(true);
        provisional_client_ = client.get();
      }
      reachable.push_back(k != provisional);
      nodes.push_back(std::move(node));
      clients.push_back(std::move(client));
    }
    absl::StatusOr<std::unique_ptr<Cluster>> c = Cluster::Create(
        options, "fp", kExperts, std::move(clients), std::move(nodes), std::move(reachable));
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    cluster_->SetRebalancer([this](const Placement& p) {
      RebalanceCall call;
      call.in_force = &cluster_->placement();
      call.asked = &p;
      for (int i = 0; i < cluster_->n_nodes(); ++i) {
        call.has_client.push_back(cluster_->client(i) != nullptr);
      }
      absl::MutexLock lock(&mu_);
      calls_.push_back(std::move(call));
      return absl::OkStatus();
    });
  }
  std::vector<RebalanceCall> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::string log() const { return log_.str(); }

  std::ostringstream log_;
  std::unique_ptr<Cluster> cluster_;
  IdNode* provisional_client_ = nullptr;
  absl::Mutex mu_;
  std::vector<RebalanceCall> calls_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ClusterMembershipTest, AJoiningNodeGetsItsShareBeforeRoutingAndARemovedOneIsReleasedAfter) {
  Start(3);
  Cluster& cluster = *cluster_;
  ExpectOwners(cluster, {0, 1, 2});

  // Node 3 joins.
  ASSERT_TRUE(cluster.SetMembers({Address(0), Address(1), Address(2), Address(3)}).ok());
  ASSERT_TRUE(Eventually([&] { return cluster.n_nodes() == 4 && !cluster.excluded(3); })) << log();
  EXPECT_EQ(cluster.node(3).node_id, Id(3));
  ExpectOwners(cluster, {0, 1, 2, 3});
  const int64_t joined_moves = ExpectedMoves({0, 1, 2}, {0, 1, 2, 3});
  EXPECT_GT(joined_moves, 0);
  EXPECT_EQ(cluster.moved_experts(), joined_moves);
  std::vector<RebalanceCall> seen = calls();
  ASSERT_EQ(seen.size(), 1u);
  // Asked to place onto node 3 while the placement in force had nothing on it.
  EXPECT_FALSE(seen[0].asked->ExpertsOf(3).empty());
  EXPECT_TRUE(seen[0].in_force->ExpertsOf(3).empty());

  // Node 1 leaves.
  ASSERT_TRUE(cluster.SetMembers({Address(0), Address(2), Address(3)}).ok());
  ASSERT_TRUE(Eventually([&] {
    return cluster.retired(1) && cluster.excluded(1) && cluster.client(1) == nullptr;
  })) << log();
  ExpectOwners(cluster, {0, 2, 3});
  EXPECT_EQ(cluster.moved_experts(), joined_moves + ExpectedMoves({0, 1, 2, 3}, {0, 2, 3}));
  seen = calls();
  ASSERT_EQ(seen.size(), 2u);
  // Its experts were placed elsewhere while it still served them.
  EXPECT_FALSE(seen[1].in_force->ExpertsOf(1).empty());
  EXPECT_TRUE(seen[1].asked->ExpertsOf(1).empty());
  EXPECT_TRUE(seen[1].has_client[1]);
  EXPECT_EQ(cluster.n_nodes(), 4);

  // Back with its old id: a new index, the same share as before.
  ASSERT_TRUE(cluster.SetMembers({Address(0), Address(1), Address(2), Address(3)}).ok());
  ASSERT_TRUE(Eventually([&] { return cluster.n_nodes() == 5 && !cluster.excluded(4); })) << log();
  EXPECT_EQ(cluster.node(4).node_id, Id(1));
  ExpectOwners(cluster, {0, 1, 2, 3});

  EXPECT_TRUE(absl::IsInvalidArgument(cluster.SetMembers({})));
}

TEST_F(ClusterMembershipTest, ANodeUnreachableAtStartJoinsUnderItsOwnId) {
  Start(3, /*provisional=*/2);
  Cluster& cluster = *cluster_;
  EXPECT_TRUE(cluster.placement().ExpertsOf(2).empty());
  ExpectOwners(cluster, {0, 1});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(cluster.n_nodes(), 3);  // not taken in while it does not answer

  provisional_client_->set_down(false);
  ASSERT_TRUE(Eventually([&] { return cluster.n_nodes() == 4 && !cluster.excluded(3); })) << log();
  EXPECT_EQ(cluster.node(3).node_id, Id(2));
  EXPECT_EQ(cluster.node(3).address, Address(2));
  EXPECT_TRUE(cluster.retired(2));
  EXPECT_TRUE(cluster.placement().ExpertsOf(2).empty());
  ExpectOwners(cluster, {0, 1, 2});
  EXPECT_EQ(cluster.moved_experts(), ExpectedMoves({0, 1}, {0, 1, 2}));
  EXPECT_TRUE(Eventually([&] { return cluster.client(2) == nullptr; }));
}

TEST_F(ClusterMembershipTest, RemovingEveryNodeKeepsThemUntilAnotherJoins) {
  Start(2);
  Cluster& cluster = *cluster_;
  // The only node listed never answers: nodes 0 and 1 stay in force.
  ASSERT_TRUE(cluster.SetMembers({"dead5:1"}).ok());
  ASSERT_TRUE(Eventually([&] { return cluster.retired(0) && cluster.retired(1); })) << log();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(cluster.excluded(0));
  EXPECT_FALSE(cluster.excluded(1));
  EXPECT_NE(cluster.client(0), nullptr);
}

}  // namespace
}  // namespace colibri::coordinator
