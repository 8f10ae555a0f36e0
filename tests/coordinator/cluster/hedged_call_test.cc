// RemoteExpertBackend's hedged calls against fake nodes that hold their
// replies until the test releases them (or the backend cancels them): a call
// still unanswered after its hedge delay has its share re-sent to the other
// copies, the first answer per expert is taken and the other call cancelled,
// the output stays bitwise equal to the local backend's, the budget caps the
// hedges, and a call whose experts have no other copy is not hedged. Replica
// choice is `primary`, so that the test knows which node computes what; the
// budget's clock is the fixture's fake clock.
#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/cluster/fake_expert_nodes.h"

namespace colibri::coordinator {
namespace {

using testing::Batch;
using testing::FakeNode;
using testing::kEmbd;
using testing::kExperts;
using testing::kLayers;
using testing::RandomBatch;
using testing::RemoteExpertBackendTest;

constexpr int kLayer = 0;

class HedgedCallTest : public RemoteExpertBackendTest {
 protected:
  // A cluster of n_nodes with `replicas`, hedging after max(1 x a node's
  // high-percentile time, floor), `budget` hedges per second; every node has
  // answered (so has an estimate) when it returns.
  void Start(int n_nodes, int replicas, absl::Duration floor = absl::Milliseconds(1),
             double budget = 100) {
    options_.hedge_factor = 1;
    options_.hedge_floor = floor;
    options_.hedge_budget = budget;
    MakeCluster(n_nodes, replicas, absl::Hours(1), ReplicaChoice::kPrimary);
    remote_ = std::make_unique<RemoteExpertBackend>(cluster_.get(), &model_.experts(), kExperts,
                                                    ops::NumericPath::kExact, &pool_);
    for (int i = 0; i < 64 && !EveryNodeMeasured(); ++i) {
      std::vector<float> local_out, remote_out;
      RunBoth(RandomBatch(2, 4, 1000 + i), i % kLayers, ops::NumericPath::kExact, remote_.get(),
              &local_out, &remote_out);
    }
    ASSERT_TRUE(EveryNodeMeasured());
    for (FakeNode* node : nodes_) node->TakeRequests();
    base_ = remote_->stats();
  }
  bool EveryNodeMeasured() const {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (cluster_->latency(static_cast<int>(i)).samples == 0) return false;
    }
    return true;
  }
  // The experts of kLayer whose primary copy is on node.
  std::vector<int32_t> PrimaryOn(int node) const {
    std::vector<int32_t> out;
    for (int32_t e = 0; e < kExperts; ++e) {
      if (cluster_->placement().Owners(kLayer, e)[0] == node) out.push_back(e);
    }
    return out;
  }
  // The node of expert e's copy after its primary.
  int SecondOwner(int32_t e) const { return cluster_->placement().Owners(kLayer, e)[1]; }
  // One token routed to `experts`.
  static Batch BatchOf(const std::vector<int32_t>& experts, uint32_t seed) {
    Batch b = RandomBatch(1, 1, seed);
    b.k = static_cast<int>(experts.size());
    b.experts = experts;
    b.weights.assign(experts.size(), 1.0f / static_cast<float>(experts.size()));
    return b;
  }
  // Submits b to the remote backend, runs Wait on another thread while
  // `meanwhile` runs on this one, and expects the output bitwise equal to
  // the local backend's.
  template <typename Fn>
  void RunWhile(const Batch& b, Fn meanwhile) {
    std::vector<float> local_out(b.n_tokens * b.k * kEmbd, -1.0f);
    std::vector<float> remote_out(b.n_tokens * b.k * kEmbd, -2.0f);
    moe::LocalExpertBackend local(&model_.experts(), kExperts, ops::NumericPath::kExact, &pool_);
    local.Submit(b.view(kLayer), local_out.data());
    ASSERT_TRUE(local.Wait().ok());
    remote_->Submit(b.view(kLayer), remote_out.data());
    absl::Status status;
    absl::Notification returned;
    std::thread waiter([&] {
      status = remote_->Wait();
      returned.Notify();
    });
    meanwhile();
    // Only when the backend is broken: it waits for a held call it should
    // have cancelled. Release it so that the test fails instead of hanging.
    if (!returned.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      ADD_FAILURE() << "Wait did not return";
      for (FakeNode* node : nodes_) node->Release();
    }
    waiter.join();
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(0,
              std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  }
  // Returns once done() holds (polled; at most 30 s, then the test goes on
  // and fails on what it expected).
  template <typename Fn>
  static void Until(Fn done) {
    for (int i = 0; i < 30000 && !done(); ++i) absl::SleepFor(absl::Milliseconds(1));
  }
  // The backend's counters since Start.
  RemoteBackendStats Delta() const {
    RemoteBackendStats s = remote_->stats();
    s.hedges -= base_.hedges;
    s.hedge_wins -= base_.hedge_wins;
    s.hedge_wasted_bytes -= base_.hedge_wasted_bytes;
    s.failovers -= base_.failovers;
    s.fallback_routes -= base_.fallback_routes;
    return s;
  }
  static int64_t Bytes(const std::vector<v1::ComputeLayerRequest>& requests) {
    int64_t n = 0;
    for (const v1::ComputeLayerRequest& r : requests) n += static_cast<int64_t>(r.ByteSizeLong());
    return n;
  }

  std::unique_ptr<RemoteExpertBackend> remote_;
  RemoteBackendStats base_;
};

// The delay is the node's high-percentile time for the call's work times the
// factor, at least the floor; none before a reply or with the budget at 0.
TEST_F(HedgedCallTest, TheDelayComesFromTheEstimate) {
  options_.hedge_factor = 3;
  options_.hedge_floor = absl::Milliseconds(20);
  options_.hedge_budget = 20;
  MakeCluster(2, 2, absl::Hours(1), ReplicaChoice::kPrimary);
  EXPECT_EQ(cluster_->HedgeDelay(0, ExpertWork(1)), absl::InfiniteDuration());
  cluster_->RecordCall(0, 0, 0, 0.001, 0.0, ExpertWork(1), absl::OkStatus());
  EXPECT_EQ(cluster_->HedgeDelay(0, ExpertWork(1)), absl::Milliseconds(20));
  for (int i = 0; i < 64; ++i) {
    cluster_->RecordCall(0, 0, 0, 0.5, 0.0, ExpertWork(1), absl::OkStatus());
  }
  EXPECT_EQ(cluster_->HedgeDelay(0, ExpertWork(1)), absl::Milliseconds(1500));
  // Work on the node counts per unit: 0.25 s of reported work per unit.
  for (int i = 0; i < 64; ++i) {
    cluster_->RecordCall(1, 0, 0, 0.5, 0.5, ExpertWork(1) * 2, absl::OkStatus());
  }
  EXPECT_EQ(cluster_->HedgeDelay(1, ExpertWork(1) * 4), absl::Seconds(3));

  options_.hedge_budget = 0;
  MakeCluster(2, 2, absl::Hours(1), ReplicaChoice::kPrimary);
  cluster_->RecordCall(0, 0, 0, 0.5, 0.0, ExpertWork(1), absl::OkStatus());
  EXPECT_EQ(cluster_->HedgeDelay(0, ExpertWork(1)), absl::InfiniteDuration());
  EXPECT_FALSE(cluster_->TakeHedge());
}

TEST_F(HedgedCallTest, AHeldCallIsOutrunByItsHedgeAndCancelled) {
  Start(3, 2);
  const int slow = 0;
  const std::vector<int32_t> experts = PrimaryOn(slow);
  ASSERT_FALSE(experts.empty());
  const int64_t samples = cluster_->latency(slow).samples;
  nodes_[slow]->set_hold(true);
  // The node never answers: the layer completes from the hedge alone.
  RunWhile(BatchOf(experts, 1), [] {});

  const RemoteBackendStats s = Delta();
  EXPECT_EQ(s.hedges, 1);
  EXPECT_EQ(s.hedge_wins, 1);
  EXPECT_EQ(s.failovers, 0);
  EXPECT_EQ(s.fallback_routes, 0);
  // The loser: the held call, cancelled unanswered.
  const std::vector<v1::ComputeLayerRequest> held = nodes_[slow]->TakeRequests();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(nodes_[slow]->cancelled(), 1);
  EXPECT_EQ(s.hedge_wasted_bytes, Bytes(held));
  // Its share went to the experts' second copies.
  int hedged_routes = 0;
  for (int n = 0; n < 3; ++n) {
    for (const v1::ComputeLayerRequest& r : nodes_[n]->TakeRequests()) {
      EXPECT_NE(n, slow);
      for (const v1::Route& route : r.routes()) {
        EXPECT_EQ(SecondOwner(route.expert()), n);
        ++hedged_routes;
      }
    }
  }
  EXPECT_EQ(hedged_routes, static_cast<int>(experts.size()));
  // Merely late: not suspect, no failure; its wait is a reply time seen.
  EXPECT_TRUE(cluster_->healthy(slow));
  EXPECT_EQ(cluster_->counters(slow).failures, 0);
  EXPECT_EQ(cluster_->counters(slow).deadline_misses, 0);
  EXPECT_EQ(cluster_->latency(slow).samples, samples + 1);
  const HedgeCounters c = cluster_->hedges();
  EXPECT_EQ(c.hedges, 1);
  EXPECT_EQ(c.wins, 1);
  EXPECT_EQ(c.wasted_bytes, s.hedge_wasted_bytes);
}

// An outrun node takes no first-choice work from the next layer on, so a hung
// node costs one hedge delay, not one per layer; once it answers a call it is
// chosen first again.
TEST_F(HedgedCallTest, AnOutrunNodeGetsNoFirstChoiceWorkUntilItAnswers) {
  Start(3, 2);
  const int slow = 0;
  const std::vector<int32_t> experts = PrimaryOn(slow);
  ASSERT_FALSE(experts.empty());
  nodes_[slow]->set_hold(true);
  RunWhile(BatchOf(experts, 10), [] {});
  EXPECT_TRUE(cluster_->outrun(slow));
  EXPECT_EQ(cluster_->counters(slow).outruns, 1);
  for (FakeNode* node : nodes_) node->TakeRequests();
  // The next layer goes to the second copies at once: no call to the held
  // node, no second hedge.
  RunWhile(BatchOf(experts, 11), [] {});
  EXPECT_EQ(Delta().hedges, 1);
  EXPECT_TRUE(nodes_[slow]->TakeRequests().empty());
  EXPECT_TRUE(cluster_->healthy(slow));
  // It answers (a call of another backend, say): first choice again.
  nodes_[slow]->set_hold(false);
  cluster_->RecordCall(slow, 0, 0, 0.001, 0.0, ExpertWork(1), absl::OkStatus());
  EXPECT_FALSE(cluster_->outrun(slow));
  RunWhile(BatchOf(experts, 12), [] {});
  EXPECT_EQ(nodes_[slow]->TakeRequests().size(), 1u);
  EXPECT_EQ(Delta().hedges, 1);
}

TEST_F(HedgedCallTest, WhenTheOriginalAnswersFirstTheHedgeIsCancelled) {
  Start(3, 2);
  const int slow = 0;
  const std::vector<int32_t> experts = PrimaryOn(slow);
  ASSERT_FALSE(experts.empty());
  // Where the hedge goes: each expert's second copy, one call per node.
  std::vector<int> hedge_calls(3, 0);
  for (int32_t e : experts) hedge_calls[SecondOwner(e)] = 1;
  for (FakeNode* node : nodes_) node->set_hold(true);
  RunWhile(BatchOf(experts, 2), [&] {
    for (int n = 0; n < 3; ++n) {
      if (hedge_calls[n] > 0) {
        EXPECT_TRUE(nodes_[n]->AwaitHeld(1)) << "no hedge to node " << n;
      }
    }
    // The hedge is out: now the original answers.
    EXPECT_EQ(nodes_[slow]->Release(), 1);
  });
  const RemoteBackendStats s = Delta();
  EXPECT_EQ(s.hedges, 1);
  EXPECT_EQ(s.hedge_wins, 0);
  int64_t hedge_bytes = 0;
  for (int n = 0; n < 3; ++n) {
    if (n == slow) continue;
    EXPECT_EQ(nodes_[n]->cancelled(), hedge_calls[n]) << "node " << n;
    hedge_bytes += Bytes(nodes_[n]->TakeRequests());
  }
  EXPECT_EQ(s.hedge_wasted_bytes, hedge_bytes);
  EXPECT_EQ(nodes_[slow]->cancelled(), 0);
  for (FakeNode* node : nodes_) EXPECT_EQ(node->Release(), 0);
}

TEST_F(HedgedCallTest, NoHedgeBeforeTheDelay) {
  Start(3, 2, /*floor=*/absl::Hours(1));
  const int slow = 0;
  nodes_[slow]->set_hold(true);
  // A node that answers late, well within the hour.
  RunWhile(BatchOf(PrimaryOn(slow), 3), [&] {
    ASSERT_TRUE(nodes_[slow]->AwaitHeld(1));
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(nodes_[slow]->Release(), 1);
  });
  EXPECT_EQ(Delta().hedges, 0);
  EXPECT_EQ(cluster_->hedges().hedges, 0);
}

TEST_F(HedgedCallTest, TheBudgetCapsHedges) {
  Start(3, 2, absl::Milliseconds(1), /*budget=*/2);
  const int slow = 0;
  const std::vector<int32_t> experts = PrimaryOn(slow);
  nodes_[slow]->set_hold(true);
  // An outrun node gets no first-choice work until it answers: a reply of
  // another call between the layers keeps giving it the layer.
  const auto answered = [&] {
    cluster_->RecordCall(slow, 0, 0, 0.0005, 0.0, ExpertWork(1), absl::OkStatus());
  };
  // The bucket holds 2: two layers are hedged.
  RunWhile(BatchOf(experts, 4), [] {});
  answered();
  RunWhile(BatchOf(experts, 5), [] {});
  answered();
  EXPECT_EQ(Delta().hedges, 2);
  // The third waits for its node (which answers once the budget refused).
  RunWhile(BatchOf(experts, 6), [&] {
    ASSERT_TRUE(nodes_[slow]->AwaitHeld(1));
    Until([&] { return cluster_->hedges().refused > 0; });
    EXPECT_EQ(nodes_[slow]->Release(), 1);
  });
  EXPECT_EQ(Delta().hedges, 2);
  EXPECT_EQ(cluster_->hedges().refused, 1);
  // Half a second later one hedge is back in the bucket.
  now_ += absl::Milliseconds(500);
  RunWhile(BatchOf(experts, 7), [] {});
  EXPECT_EQ(Delta().hedges, 3);
  EXPECT_EQ(Delta().hedge_wins, 3);
}

TEST_F(HedgedCallTest, NoHedgeWithoutAnotherCopy) {
  Start(2, 2);
  const int slow = 0;
  const std::vector<int32_t> experts = PrimaryOn(slow);
  ASSERT_FALSE(experts.empty());
  // The only other copy is on an unhealthy node.
  cluster_->MarkUnhealthy(1, absl::UnavailableError("test"));
  nodes_[slow]->set_hold(true);
  RunWhile(BatchOf(experts, 8), [&] {
    ASSERT_TRUE(nodes_[slow]->AwaitHeld(1));
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(nodes_[slow]->Release(), 1);
  });
  EXPECT_EQ(Delta().hedges, 0);
  EXPECT_EQ(cluster_->hedges().refused, 0);
  EXPECT_TRUE(nodes_[1]->TakeRequests().empty());
}

TEST_F(HedgedCallTest, AFailedHedgeLeavesTheShareToTheOriginal) {
  Start(3, 2);
  const int slow = 0;
  const std::vector<int32_t> experts = PrimaryOn(slow);
  ASSERT_FALSE(experts.empty());
  std::vector<bool> target(3, false);
  for (int32_t e : experts) target[SecondOwner(e)] = true;
  for (int n = 0; n < 3; ++n) {
    if (target[n]) nodes_[n]->set_down(true);  // its calls fail at once
  }
  nodes_[slow]->set_hold(true);
  RunWhile(BatchOf(experts, 9), [&] {
    ASSERT_TRUE(nodes_[slow]->AwaitHeld(1));
    for (int n = 0; n < 3; ++n) {
      if (target[n]) Until([&] { return !cluster_->healthy(n); });
    }
    EXPECT_EQ(nodes_[slow]->Release(), 1);
  });
  const RemoteBackendStats s = Delta();
  EXPECT_EQ(s.hedges, 1);
  EXPECT_EQ(s.hedge_wins, 0);
  // The original still carried the share: no failover, nothing computed here.
  EXPECT_EQ(s.failovers, 0);
  EXPECT_EQ(s.fallback_routes, 0);
  EXPECT_TRUE(cluster_->healthy(slow));
}

}  // namespace
}  // namespace colibri::coordinator
