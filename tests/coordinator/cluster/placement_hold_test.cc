// A layer keeps the placement it routes by for as long as it runs. The
// cluster frees a replaced placement once kPlacementGrace has passed on its
// clock since the replacement, unless someone holds it: here a layer whose
// nodes hang through three re-placements and two graces, against fake nodes
// and the fixture's fake clock.
#include <memory>
#include <thread>
#include <vector>

#include "coordinator/cluster/cluster.h"
#include "coordinator/cluster/remote_expert_backend.h"
#include "gtest/gtest.h"
#include "model/moe/local_expert_backend.h"
#include "tests/coordinator/cluster/cluster_test_support.h"
#include "tests/coordinator/cluster/fake_expert_nodes.h"

namespace colibri::coordinator {
namespace {

using testing::Batch;
using testing::FakeNode;
using testing::kEmbd;
using testing::kExperts;
using testing::RandomBatch;
using testing::RemoteExpertBackendTest;

class PlacementHoldTest : public RemoteExpertBackendTest {
 protected:
  // Installs a placement with extra copies of layer 0's first n experts (each
  // on the node after its owner), then moves the clock past the grace.
  void Replace(int n) {
    const int64_t before = cluster_->replacements();
    std::vector<placement::ExtraCopy> extras;
    for (int e = 0; e < n; ++e) {
      const int owner = cluster_->placement().Owners(0, e)[0];
      extras.push_back({0, e, (owner + 1) % static_cast<int>(nodes_.size())});
    }
    cluster_->SetExtraCopies(extras);
    ASSERT_TRUE(testing::Eventually([&] { return cluster_->replacements() > before; }));
    now_ += Cluster::kPlacementGrace + absl::Seconds(1);
  }
  testing::RecordingRebalancer rebalancer_;
};

TEST_F(PlacementHoldTest, ALayerOutlastingTheGraceKeepsItsPlacementWhichIsFreedAfter) {
  MakeCluster(3, 1, absl::Hours(1), ReplicaChoice::kPrimary);
  cluster_->SetRebalancer([this](const Placement& p) { return rebalancer_(p); });
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts,
                             ops::NumericPath::kExact, &pool_);
  const std::weak_ptr<const Placement> first = cluster_->HoldPlacement();

  const Batch b = RandomBatch(3, 2, 7);
  std::vector<float> local_out(b.n_tokens * b.k * kEmbd, -1.0f);
  std::vector<float> remote_out(b.n_tokens * b.k * kEmbd, -2.0f);
  moe::LocalExpertBackend local(&model_.experts(), kExperts, ops::NumericPath::kExact, &pool_);
  local.Submit(b.view(0), local_out.data());
  ASSERT_TRUE(local.Wait().ok());

  for (FakeNode* node : nodes_) node->set_hold(true);
  remote.Submit(b.view(0), remote_out.data());
  absl::Status status = absl::UnknownError("Wait did not return");
  std::thread waiter([&] { status = remote.Wait(); });
  // The first placement is replaced, then two more after a grace each: the
  // cluster keeps none of it, the layer in flight still does.
  Replace(1);
  Replace(2);
  Replace(3);
  EXPECT_EQ(cluster_->replacements(), 3);
  EXPECT_FALSE(first.expired());
  for (FakeNode* node : nodes_) {
    node->set_hold(false);
    node->Release();
  }
  waiter.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(local_out, remote_out);

  // The next layer routes by the placement in force; the first one is freed
  // at the next re-placement.
  remote.Submit(b.view(1), remote_out.data());
  ASSERT_TRUE(remote.Wait().ok());
  Replace(4);
  EXPECT_TRUE(first.expired());
}

}  // namespace
}  // namespace colibri::coordinator
