// RemoteExpertBackend with latency estimates, against fake nodes and a fake
// clock: `fastest` keeps work off a node whose replies are slow and gives it
// back once it answers fast again; calls get deadlines from the estimates;
// a node that misses one is suspect and its share is computed elsewhere,
// bitwise the same. Slowness is injected as observed replies
// (Cluster::RecordCall) and lateness as DeadlineExceeded, so nothing sleeps.
// The fake nodes' own replies are timed for real, so their estimates carry
// the host's noise: the fake clock moves 50 ms per layer, as time passes in
// a generation, so that a node that lost its work to noise is measured again
// once its estimate is stale (LatencyOptions::refresh_after, 1 s), as in a
// real cluster.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/coordinator/cluster/fake_expert_nodes.h"

namespace colibri::coordinator {
namespace {

using testing::Batch;
using testing::FakeNode;
using testing::kExperts;
using testing::kLayers;
using testing::RandomBatch;
using testing::RemoteExpertBackendTest;

class LatencyAwareBackendTest : public RemoteExpertBackendTest {
 protected:
  // Runs `layers` random batches through remote and the local backend, 50 ms
  // of the fake clock apart, expects bitwise equal outputs, and returns the
  // ComputeLayer calls each node got.
  std::vector<int> Run(RemoteExpertBackend* remote, int layers, uint32_t seed) {
    std::vector<int> calls(nodes_.size(), 0);
    for (int i = 0; i < layers; ++i) {
      now_ += absl::Milliseconds(50);
      const Batch b = RandomBatch(1, 4, seed + i);
      std::vector<float> local_out, remote_out;
      RunBoth(b, i % kLayers, ops::NumericPath::kExact, remote, &local_out, &remote_out);
      EXPECT_EQ(0,
                std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
      for (size_t n = 0; n < nodes_.size(); ++n) {
        calls[n] += static_cast<int>(nodes_[n]->TakeRequests().size());
      }
    }
    return calls;
  }
  // Records `n` replies of node that took `seconds`, as the backend would.
  void SlowReplies(int node, int n, double seconds) {
    for (int i = 0; i < n; ++i) {
      cluster_->RecordCall(node, 0, 0, seconds, 0.0, ExpertWork(1), absl::OkStatus());
    }
  }
};

TEST_F(LatencyAwareBackendTest, ASlowNodeLosesWorkAndWinsItBackWhenItRecovers) {
  MakeCluster(3, 2, absl::Milliseconds(5), ReplicaChoice::kFastest);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kExact,
                             &pool_);
  std::vector<int> calls = Run(&remote, 24, 1);
  for (int n = 0; n < 3; ++n) EXPECT_GT(calls[n], 0) << "node " << n;

  // Node 1 answers 40 ms late twice (a 20 ms link): it loses all its work
  // (for 12 layers, 0.6 s: its estimate is not stale yet).
  const int slow = 1;
  SlowReplies(slow, 2, 0.040);
  calls = Run(&remote, 12, 100);
  EXPECT_EQ(calls[slow], 0);
  EXPECT_GT(calls[0] + calls[2], 0);

  // A second later its estimate is stale: it is given work, measured fast
  // (the fake answers at once) and gets work again (more than the one call
  // that measures it, even when noise costs it a refresh period).
  now_ += absl::Seconds(2);
  calls = Run(&remote, 30, 200);
  EXPECT_GT(calls[slow], 1);
  EXPECT_LT(cluster_->latency(slow).wait_ewma, 0.040);
  EXPECT_EQ(remote.stats().fallback_routes, 0);
}

TEST_F(LatencyAwareBackendTest, ANodeJudgedSlowByAFewColdRepliesIsMeasuredAgainSoon) {
  MakeCluster(3, 2, absl::Milliseconds(5), ReplicaChoice::kFastest);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kExact,
                             &pool_);
  Run(&remote, 24, 1);
  // Node 1's newest replies took 2 ms (a cold start), the others' a fraction
  // of that: it loses its work, but is tried again after kProbeAfterWaits of
  // its waits (0.1 s), long before its estimate is stale (0.6 s here, under
  // refresh_after), answers fast and gets work again.
  SlowReplies(1, 3, 0.002);
  const std::vector<int> calls = Run(&remote, 12, 400);
  EXPECT_GT(calls[1], 1);
  EXPECT_LT(cluster_->latency(1).wait_ewma, 0.001);
}

// A node whose only reply so far was slow (a cold first call) counts as fast
// as the fastest until it has been sent kTrustedReplies calls; from then on its
// estimate decides.
TEST_F(LatencyAwareBackendTest, OneSlowFirstReplyDoesNotJudgeANode) {
  MakeCluster(3, 2, absl::Milliseconds(5), ReplicaChoice::kFastest);
  for (int n = 0; n < 3; ++n) SlowReplies(n, n == 1 ? 1 : 8, n == 1 ? 0.002 : 0.0002);
  std::vector<NodeSpeed> speed = cluster_->Speeds(3);
  EXPECT_DOUBLE_EQ(speed[1].network_seconds,
                   std::min(speed[0].network_seconds, speed[2].network_seconds));
  SlowReplies(1, kTrustedReplies - 1, 0.002);
  speed = cluster_->Speeds(3);
  EXPECT_GT(speed[1].network_seconds, 5 * speed[0].network_seconds);
}

TEST_F(LatencyAwareBackendTest, PrimaryAndBalanceIgnoreTheEstimates) {
  for (ReplicaChoice choice : {ReplicaChoice::kPrimary, ReplicaChoice::kBalance}) {
    MakeCluster(3, 2, absl::Milliseconds(5), choice);
    RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts,
                               ops::NumericPath::kExact, &pool_);
    Run(&remote, 4, 1);
    SlowReplies(1, 4, 0.040);
    EXPECT_GT(Run(&remote, 24, 300)[1], 0);
  }
}

TEST_F(LatencyAwareBackendTest, DeadlinesComeFromTheEstimate) {
  MakeCluster(3, 2, absl::Milliseconds(5), ReplicaChoice::kFastest);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kExact,
                             &pool_);
  Run(&remote, 1, 1);
  // Before any reply, the fixed ceiling (NodeClientOptions::compute_deadline).
  for (FakeNode* node : nodes_) {
    for (absl::Duration d : node->TakeDeadlines()) EXPECT_EQ(d, absl::Seconds(30));
  }
  Run(&remote, 12, 1);
  int seen = 0;
  for (FakeNode* node : nodes_) {
    for (absl::Duration d : node->TakeDeadlines()) {
      // Fast replies: the floor (ClusterOptions::deadline_floor).
      EXPECT_EQ(d, absl::Seconds(1));
      ++seen;
    }
  }
  EXPECT_GT(seen, 0);
  // A node seen answering in 0.5 s: 8 x that.
  SlowReplies(0, 64, 0.5);
  EXPECT_EQ(cluster_->CallDeadline(0, ExpertWork(1)), absl::Seconds(4));
  // Never beyond the ceiling.
  SlowReplies(0, 64, 10.0);
  EXPECT_EQ(cluster_->CallDeadline(0, ExpertWork(1)), absl::Seconds(30));
}

TEST_F(LatencyAwareBackendTest, ALateNodeIsSuspectAndItsShareGoesToAReplica) {
  // Probes so rare that the suspect node stays out for the whole test.
  MakeCluster(3, 2, absl::Hours(1), ReplicaChoice::kFastest);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kExact,
                             &pool_);
  Run(&remote, 12, 1);
  const int late = 2;
  nodes_[late]->set_late(true);
  // Its estimate stale, so that it counts as fast as the fastest and is
  // given work whatever the noise of its last replies: once a batch involves
  // it, the step completes from the replicas.
  now_ += absl::Seconds(2);
  for (int i = 0; i < 24 && cluster_->healthy(late); ++i) Run(&remote, 1, 400 + i);
  EXPECT_FALSE(cluster_->healthy(late));
  EXPECT_EQ(cluster_->counters(late).deadline_misses, 1);
  EXPECT_NE(log_.str().find("suspect"), std::string::npos) << log_.str();
  EXPECT_GT(remote.stats().failovers, 0);
  EXPECT_EQ(remote.stats().fallback_routes, 0);
  // No new work for it.
  EXPECT_EQ(Run(&remote, 12, 500)[late], 0);
}

TEST_F(LatencyAwareBackendTest, ALateNodeWithoutReplicaIsComputedHere) {
  MakeCluster(3, 1, absl::Hours(1), ReplicaChoice::kFastest);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kExact,
                             &pool_);
  Run(&remote, 12, 1);
  nodes_[0]->set_late(true);
  for (int i = 0; i < 24 && cluster_->healthy(0); ++i) Run(&remote, 1, 600 + i);
  EXPECT_FALSE(cluster_->healthy(0));
  EXPECT_EQ(cluster_->counters(0).deadline_misses, 1);
  EXPECT_GT(remote.stats().fallback_routes, 0);
}

}  // namespace
}  // namespace colibri::coordinator
