// RemoteExpertBackend against fake nodes that compute with the same kernels:
// bitwise equality with LocalExpertBackend, one call per involved node,
// failover to replicas, the local fallback, health probes and where prefetch
// hints go and when.
#include "coordinator/cluster/remote_expert_backend.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/cluster/cluster.h"
#include "gtest/gtest.h"
#include "model/moe/expert_ffn.h"
#include "model/moe/local_expert_backend.h"
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

TEST_F(RemoteExpertBackendTest, MatchesLocalBitwiseWithOneCallPerInvolvedNode) {
  MakeCluster(3, 1);
  for (ops::NumericPath path : {ops::NumericPath::kExact, ops::NumericPath::kFast}) {
    RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, path, &pool_);
    for (int layer = 0; layer < kLayers; ++layer) {
      const Batch b = RandomBatch(7, 2, 11 + layer);
      std::vector<float> local_out, remote_out;
      RunBoth(b, layer, path, &remote, &local_out, &remote_out);
      EXPECT_EQ(0,
                std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
      // Expected involvement from the placement.
      std::set<int> involved;
      for (int32_t e : b.experts) involved.insert(cluster_->placement().Primary(layer, e));
      int calls = 0;
      int routes = 0;
      for (int n = 0; n < 3; ++n) {
        std::vector<v1::ComputeLayerRequest> reqs = nodes_[n]->TakeRequests();
        EXPECT_LE(reqs.size(), 1u);
        EXPECT_EQ(reqs.size(), involved.count(n));
        for (const v1::ComputeLayerRequest& r : reqs) {
          ++calls;
          routes += r.routes_size();
          EXPECT_EQ(r.layer(), layer);
          EXPECT_EQ(r.model_fingerprint(), "fp");
          // Each token once: the rows are exactly the tokens the routes use.
          std::set<int> used;
          for (const v1::Route& route : r.routes()) {
            used.insert(route.token());
            EXPECT_EQ(cluster_->placement().Primary(layer, route.expert()), n);
          }
          EXPECT_EQ(static_cast<int64_t>(used.size()), r.hidden().shape(0));
        }
      }
      EXPECT_EQ(calls, static_cast<int>(involved.size()));
      EXPECT_EQ(routes, b.n_tokens * b.k);
    }
    const RemoteBackendStats s = remote.stats();
    EXPECT_EQ(s.round_trips, s.involved_nodes);
    EXPECT_EQ(s.layers, kLayers);
    EXPECT_EQ(s.fallback_routes, 0);
  }
}

// node_seconds sums what the replies report (compute + disk wait), never
// less than zero nor more than the call's own wait (a reply is untrusted).
TEST_F(RemoteExpertBackendTest, NodeWorkSecondsComeFromTheReplies) {
  MakeCluster(1, 1);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts,
                             ops::NumericPath::kFast, &pool_);
  std::vector<float> local_out, remote_out;
  nodes_[0]->set_reported_micros(absl::Milliseconds(5), 3000, 1000);
  RunBoth(RandomBatch(3, 2, 5), 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  NodeCounters c = cluster_->counters(0);
  ASSERT_EQ(c.requests, 1);
  EXPECT_DOUBLE_EQ(c.node_seconds, 0.004);
  EXPECT_GE(c.wait_seconds, 0.005);

  nodes_[0]->set_reported_micros(absl::ZeroDuration(), -7000000, -1);
  RunBoth(RandomBatch(3, 2, 6), 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  c = cluster_->counters(0);
  EXPECT_DOUBLE_EQ(c.node_seconds, 0.004);

  nodes_[0]->set_reported_micros(absl::ZeroDuration(), std::numeric_limits<int64_t>::max(),
                                 std::numeric_limits<int64_t>::max());
  RunBoth(RandomBatch(3, 2, 7), 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  c = cluster_->counters(0);
  EXPECT_EQ(c.requests, 3);
  EXPECT_LE(c.node_seconds, c.wait_seconds);
  EXPECT_GT(c.node_seconds, 0.004);
}

// The step timeline's node figures: per layer, what the node of the slowest
// call reported (once per layer, however many nodes the layer involved),
// never more than that call's own wait.
TEST_F(RemoteExpertBackendTest, TheSlowestCallOfEachLayerGivesItsNodesFigures) {
  MakeCluster(3, 1);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts,
                             ops::NumericPath::kFast, &pool_);
  for (FakeNode* node : nodes_) node->set_reported_micros(absl::Milliseconds(2), 300, 200);
  std::vector<float> local_out, remote_out;
  for (int layer = 0; layer < kLayers; ++layer) {
    RunBoth(RandomBatch(4, 4, 20 + layer), layer, ops::NumericPath::kFast, &remote, &local_out,
            &remote_out);
  }
  const RemoteBackendStats s = remote.stats();
  ASSERT_GT(s.involved_nodes, kLayers);  // some layer went to several nodes
  EXPECT_EQ(s.slowest_compute_micros, 300 * kLayers);
  EXPECT_EQ(s.slowest_disk_micros, 200 * kLayers);

  // Absurd figures are cut to the call's wait (2 ms of sleep, well under 1 s).
  for (FakeNode* node : nodes_) {
    node->set_reported_micros(absl::Milliseconds(2), std::numeric_limits<int64_t>::max(), -5);
  }
  RunBoth(RandomBatch(4, 4, 30), 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  const RemoteBackendStats t = remote.stats();
  EXPECT_GE(t.slowest_compute_micros - s.slowest_compute_micros, 2000);
  EXPECT_LT(t.slowest_compute_micros - s.slowest_compute_micros, 1000000);
  EXPECT_EQ(t.slowest_disk_micros, s.slowest_disk_micros);
}

// Two half-batches in flight at once: one on the backend, one on its second
// channel; each gives the local result, and stats() counts both.
TEST_F(RemoteExpertBackendTest, TheSecondChannelRunsABatchAlongside) {
  MakeCluster(3, 1);
  const ops::NumericPath path = ops::NumericPath::kFast;
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, path, &pool_);
  moe::ExpertBackend* second = remote.SecondChannel();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(remote.SecondChannel(), second);
  const Batch a = RandomBatch(5, 2, 21), b = RandomBatch(6, 2, 22);
  std::vector<float> a_local(a.n_tokens * a.k * kEmbd), b_local(b.n_tokens * b.k * kEmbd);
  moe::LocalExpertBackend local(&model_.experts(), kExperts, path, &pool_);
  local.Submit(a.view(0), a_local.data());
  ASSERT_TRUE(local.Wait().ok());
  local.Submit(b.view(1), b_local.data());
  ASSERT_TRUE(local.Wait().ok());

  std::vector<float> a_out(a_local.size(), -1.0f), b_out(b_local.size(), -2.0f);
  remote.Submit(a.view(0), a_out.data());
  second->Submit(b.view(1), b_out.data());
  ASSERT_TRUE(second->Wait().ok());
  ASSERT_TRUE(remote.Wait().ok());
  EXPECT_EQ(0, std::memcmp(a_out.data(), a_local.data(), a_out.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(b_out.data(), b_local.data(), b_out.size() * sizeof(float)));
  EXPECT_EQ(remote.stats().layers, 2);
  EXPECT_GT(remote.stats().round_trips, 1);
}

TEST_F(RemoteExpertBackendTest, FallsBackLocallyWithoutReplicas) {
  MakeCluster(3, 1);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  // Find a node the batch involves and take it down.
  const Batch b = RandomBatch(9, 2, 5);
  const int victim = cluster_->placement().Primary(0, b.experts[0]);
  nodes_[victim]->set_down(true);
  std::vector<float> local_out, remote_out;
  RunBoth(b, 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  EXPECT_EQ(0, std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  EXPECT_FALSE(cluster_->healthy(victim));
  EXPECT_GT(remote.stats().fallback_routes, 0);
  EXPECT_EQ(cluster_->counters(victim).failures, 1);
  EXPECT_EQ(cluster_->counters(victim).failovers, 0);
  // While down, the node is not called at all.
  nodes_[victim]->TakeRequests();
  RunBoth(b, 1, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  EXPECT_EQ(0, std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  EXPECT_TRUE(nodes_[victim]->TakeRequests().empty());
  // It rejoins once its health check passes.
  nodes_[victim]->set_down(false);
  for (int i = 0; i < 400 && !cluster_->healthy(victim); ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(cluster_->healthy(victim));
  EXPECT_NE(log_.str().find("healthy again"), std::string::npos);
}

TEST_F(RemoteExpertBackendTest, FailsOverToTheNextReplica) {
  // Every expert on its primary first, so that the victim's are known.
  MakeCluster(3, 2, absl::Milliseconds(5), ReplicaChoice::kPrimary);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kExact,
                             &pool_);
  const Batch b = RandomBatch(9, 3, 9);
  const int victim = cluster_->placement().Primary(1, b.experts[0]);
  nodes_[victim]->set_down(true);
  std::vector<float> local_out, remote_out;
  RunBoth(b, 1, ops::NumericPath::kExact, &remote, &local_out, &remote_out);
  EXPECT_EQ(0, std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  EXPECT_EQ(remote.stats().fallback_routes, 0);
  EXPECT_EQ(cluster_->counters(victim).failovers, 1);
  // One retry call per distinct next replica of the victim's experts.
  std::set<int> retried;
  for (int32_t e : b.experts) {
    absl::Span<const int> owners = cluster_->placement().Owners(1, e);
    if (owners[0] == victim) retried.insert(owners[1]);
  }
  EXPECT_EQ(remote.stats().round_trips,
            remote.stats().involved_nodes + static_cast<int64_t>(retried.size()));
  EXPECT_EQ(remote.stats().failovers, 1);
}

// With replicas, the experts of a layer that share a primary are spread over
// their replicas: the busiest node gets fewer routes than on the primaries
// alone, and the outputs stay bitwise those of the local backend.
TEST_F(RemoteExpertBackendTest, BalancedReplicasSpreadTheWorkAndMatchLocal) {
  MakeCluster(3, 2);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  int64_t busiest_total = 0, busiest_on_primaries = 0, moved = 0;
  for (uint32_t seed = 0; seed < 24; ++seed) {
    const int layer = static_cast<int>(seed % kLayers);
    const Batch b = RandomBatch(1 + seed % 3, 4, 100 + seed);
    std::vector<float> local_out, remote_out;
    RunBoth(b, layer, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
    ASSERT_EQ(0,
              std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
    std::vector<int> experts_at(3, 0), on_primaries(3, 0);
    std::set<int32_t> distinct(b.experts.begin(), b.experts.end());
    for (int32_t e : distinct) ++on_primaries[cluster_->placement().Primary(layer, e)];
    for (int n = 0; n < 3; ++n) {
      std::vector<v1::ComputeLayerRequest> reqs = nodes_[n]->TakeRequests();
      ASSERT_LE(reqs.size(), 1u);
      std::set<int32_t> here;
      for (const v1::ComputeLayerRequest& r : reqs) {
        for (const v1::Route& route : r.routes()) {
          absl::Span<const int> owners = cluster_->placement().Owners(layer, route.expert());
          // A node only computes experts it holds.
          EXPECT_NE(std::find(owners.begin(), owners.end(), n), owners.end());
          here.insert(route.expert());
        }
      }
      for (int32_t e : here) moved += cluster_->placement().Primary(layer, e) != n;
      experts_at[n] = static_cast<int>(here.size());
    }
    busiest_total += *std::max_element(experts_at.begin(), experts_at.end());
    busiest_on_primaries += *std::max_element(on_primaries.begin(), on_primaries.end());
  }
  EXPECT_GT(moved, 0);
  EXPECT_LT(busiest_total, busiest_on_primaries);
  EXPECT_EQ(remote.stats().fallback_routes, 0);
}

// A node that fails under balancing: its experts go to their other replica.
TEST_F(RemoteExpertBackendTest, BalancedReplicasFailOverToo) {
  MakeCluster(3, 2);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  for (int victim = 0; victim < 3; ++victim) {
    for (FakeNode* node : nodes_) node->set_down(false);
    for (int i = 0; i < 400; ++i) {
      if (cluster_->healthy(0) && cluster_->healthy(1) && cluster_->healthy(2)) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    nodes_[victim]->set_down(true);
    const Batch b = RandomBatch(3, 4, 40 + victim);
    std::vector<float> local_out, remote_out;
    RunBoth(b, 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
    EXPECT_EQ(0,
              std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  }
  EXPECT_EQ(remote.stats().fallback_routes, 0);
  EXPECT_GT(remote.stats().failovers, 0);
}

TEST_F(RemoteExpertBackendTest, AllNodesDownStillCompletes) {
  MakeCluster(2, 2);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  nodes_[0]->set_down(true);
  nodes_[1]->set_down(true);
  const Batch b = RandomBatch(4, 2, 3);
  std::vector<float> local_out, remote_out;
  RunBoth(b, 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  EXPECT_EQ(0, std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  EXPECT_EQ(remote.stats().fallback_routes, b.n_tokens * b.k);
}

// With --wire-reduce the backend's outputs are weighted (the forward pass sums
// them unweighted), so the routes it computes itself are weighted here too.
TEST_F(RemoteExpertBackendTest, ReducedFallbackRoutesAreWeighted) {
  MakeCluster(2, 2);
  WireOptions wire;
  wire.reduce = true;
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_, wire);
  EXPECT_TRUE(remote.OutputsWeighted());
  nodes_[0]->set_down(true);
  nodes_[1]->set_down(true);
  Batch b = RandomBatch(4, 2, 3);
  for (size_t i = 0; i < b.weights.size(); ++i) b.weights[i] = 0.25f * static_cast<float>(i + 1);
  std::vector<float> local_out, remote_out;
  RunBoth(b, 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  for (size_t i = 0; i < local_out.size(); ++i) {
    ASSERT_EQ(remote_out[i], local_out[i] * b.weights[i / kEmbd]) << "element " << i;
  }
  EXPECT_EQ(remote.stats().fallback_routes, b.n_tokens * b.k);
}

TEST_F(RemoteExpertBackendTest, AMalformedReplyCountsAsAFailure) {
  // The garbage node answers health checks, so a prompt probe would mark it
  // healthy again before the check below: probe rarely here.
  MakeCluster(3, 2, absl::Hours(1));
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  const Batch b = RandomBatch(6, 2, 21);
  const int victim = cluster_->placement().Primary(0, b.experts[0]);
  nodes_[victim]->set_garbage(true);
  std::vector<float> local_out, remote_out;
  RunBoth(b, 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  EXPECT_EQ(0, std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  EXPECT_EQ(cluster_->counters(victim).failures, 1);
  EXPECT_FALSE(cluster_->healthy(victim));
}

// A node that reports one damaged or missing expert (DataLoss / NotFound)
// loses that expert, not its health: the routes fall back, the loss is
// counted and logged, and the node keeps getting work.
TEST_F(RemoteExpertBackendTest, AnExpertLossKeepsTheNodeHealthy) {
  MakeCluster(3, 1, absl::Hours(1));
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  const Batch b = RandomBatch(6, 2, 33);
  const int victim = cluster_->placement().Primary(0, b.experts[0]);
  int64_t losses = 0;
  for (const absl::Status& loss : {absl::DataLossError("fp layer 0 expert 3: checksum mismatch"),
                                   absl::NotFoundError("node does not hold fp layer 0 expert 3")}) {
    nodes_[victim]->set_lose(loss);
    std::vector<float> local_out, remote_out;
    RunBoth(b, 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
    EXPECT_EQ(0,
              std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
    EXPECT_TRUE(cluster_->healthy(victim)) << loss;
    EXPECT_EQ(cluster_->expert_losses(), ++losses);
    EXPECT_GT(remote.stats().fallback_routes, 0);
  }
  EXPECT_NE(log_.str().find("lost an expert: fp layer 0 expert 3"), std::string::npos)
      << log_.str();
  // Still called: the next layer's call reaches it and succeeds.
  nodes_[victim]->set_lose(absl::OkStatus());
  nodes_[victim]->TakeRequests();
  std::vector<float> local_out, remote_out;
  RunBoth(b, 0, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  EXPECT_EQ(0, std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  EXPECT_FALSE(nodes_[victim]->TakeRequests().empty());
}

TEST_F(RemoteExpertBackendTest, RejectsAnExpertOutOfRange) {
  MakeCluster(2, 1);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  Batch b = RandomBatch(2, 2, 1);
  b.experts[1] = kExperts;
  std::vector<float> out(b.n_tokens * b.k * kEmbd);
  remote.Submit(b.view(0), out.data());
  EXPECT_EQ(remote.Wait().code(), absl::StatusCode::kInvalidArgument);
}

// The experts of `keys` (all of layer `layer` and fingerprint "fp").
std::set<int32_t> ExpertsOf(const google::protobuf::RepeatedPtrField<v1::ExpertKey>& keys,
                            int layer) {
  std::set<int32_t> out;
  for (const v1::ExpertKey& key : keys) {
    EXPECT_EQ(key.layer(), layer);
    EXPECT_EQ(key.model_fingerprint(), "fp");
    out.insert(key.expert());
  }
  EXPECT_EQ(out.size(), static_cast<size_t>(keys.size())) << "duplicate hints";
  return out;
}

// A layer-0 batch routed only to experts whose primary is `node`.
Batch BatchForOneNode(const Placement& placement, int node) {
  std::vector<int32_t> mine;
  for (int e = 0; e < kExperts; ++e) {
    if (placement.Primary(0, e) == node) mine.push_back(e);
  }
  Batch b = RandomBatch(4, 1, 17);
  for (int t = 0; t < b.n_tokens; ++t) b.experts[t] = mine[t % mine.size()];
  return b;
}

// Every expert id, and for each of the 3 nodes the ones it is primary of in
// `layer`.
std::vector<int32_t> AllExperts(const Placement& placement, int layer,
                                std::vector<std::set<int32_t>>* owned) {
  std::vector<int32_t> all(kExperts);
  owned->assign(3, {});
  for (int e = 0; e < kExperts; ++e) {
    all[e] = e;
    (*owned)[placement.Primary(layer, e)].insert(e);
  }
  return all;
}

TEST_F(RemoteExpertBackendTest, HintsRideOnInvolvedNodesAndGoSeparatelyToTheOthers) {
  MakeCluster(3, 1);
  const Placement& placement = cluster_->placement();
  const int involved = placement.Primary(0, 0);
  const Batch b = BatchForOneNode(placement, involved);
  std::vector<std::set<int32_t>> owned;  // hinted layer-1 experts by primary
  const std::vector<int32_t> hints = AllExperts(placement, 1, &owned);

  RemoteBackendStats stats;
  {
    RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                               &pool_);
    remote.Prefetch(1, hints);
    const int32_t bad = kExperts;
    remote.Prefetch(1, {&bad, 1});  // outside the layer's experts: dropped
    std::vector<float> out(b.n_tokens * b.k * kEmbd);
    remote.Submit(b.view(0), out.data());
    ASSERT_TRUE(remote.Wait().ok());
    stats = remote.stats();
  }  // the destructor drains the separate Prefetch calls

  int64_t separate = 0, calls = 0;
  for (int n = 0; n < 3; ++n) {
    SCOPED_TRACE("node " + std::to_string(n));
    const std::vector<v1::ComputeLayerRequest> reqs = nodes_[n]->TakeRequests();
    const std::vector<v1::PrefetchRequest> prefetches = nodes_[n]->TakePrefetches();
    if (n == involved) {
      ASSERT_EQ(reqs.size(), 1u);
      EXPECT_EQ(ExpertsOf(reqs[0].prefetch(), 1), owned[n]);
      EXPECT_TRUE(prefetches.empty());
      continue;
    }
    EXPECT_TRUE(reqs.empty());
    if (owned[n].empty()) {
      EXPECT_TRUE(prefetches.empty());
      continue;
    }
    ASSERT_EQ(prefetches.size(), 1u);
    EXPECT_EQ(ExpertsOf(prefetches[0].experts(), 1), owned[n]);
    separate += static_cast<int64_t>(owned[n].size());
    ++calls;
  }
  EXPECT_GT(separate, 0) << "the placement left no uninvolved owner to test";
  EXPECT_EQ(stats.hints_riding, static_cast<int64_t>(owned[involved].size()));
  EXPECT_EQ(stats.hints_separate, separate);
  EXPECT_EQ(stats.prefetch_calls, calls);
  EXPECT_EQ(stats.hints_dropped, 1);
  EXPECT_EQ(stats.round_trips, 1);
}

// With balanced replicas, a hint goes where the layer would compute its
// expert: hinted experts that share their owners are split between them, and
// the layer's batch of those experts then goes to the same nodes.
TEST_F(RemoteExpertBackendTest, BalancedHintsGoWhereTheExpertWillBeComputed) {
  MakeCluster(3, 2);
  const Placement& placement = cluster_->placement();
  // Two layer-1 experts with the same owners, in the same order.
  int32_t e1 = -1, e2 = -1;
  for (int32_t a = 0; a < kExperts && e2 < 0; ++a) {
    for (int32_t b = a + 1; b < kExperts && e2 < 0; ++b) {
      absl::Span<const int> oa = placement.Owners(1, a), ob = placement.Owners(1, b);
      if (std::equal(oa.begin(), oa.end(), ob.begin())) e1 = a, e2 = b;
    }
  }
  ASSERT_GE(e2, 0) << "the placement has no two experts with the same owners";
  std::map<int32_t, int> hinted_at;
  {
    RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                               &pool_);
    const int32_t pair[2] = {e1, e2};
    remote.Prefetch(1, pair);
    const Batch b0 = RandomBatch(1, 2, 5);
    std::vector<float> out(b0.n_tokens * b0.k * kEmbd);
    remote.Submit(b0.view(0), out.data());
    ASSERT_TRUE(remote.Wait().ok());
  }  // the destructor drains the separate Prefetch calls
  for (int n = 0; n < 3; ++n) {
    for (const v1::ComputeLayerRequest& r : nodes_[n]->TakeRequests()) {
      for (int32_t e : ExpertsOf(r.prefetch(), 1)) hinted_at[e] = n;
    }
    for (const v1::PrefetchRequest& r : nodes_[n]->TakePrefetches()) {
      for (int32_t e : ExpertsOf(r.experts(), 1)) hinted_at[e] = n;
    }
  }
  ASSERT_EQ(hinted_at.size(), 2u);
  EXPECT_NE(hinted_at[e1], hinted_at[e2]);

  // Layer 1's batch: one token routed to both.
  Batch b1 = RandomBatch(1, 2, 6);
  b1.experts = {e1, e2};
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  std::vector<float> local_out, remote_out;
  RunBoth(b1, 1, ops::NumericPath::kFast, &remote, &local_out, &remote_out);
  EXPECT_EQ(0, std::memcmp(local_out.data(), remote_out.data(), local_out.size() * sizeof(float)));
  for (int n = 0; n < 3; ++n) {
    for (const v1::ComputeLayerRequest& r : nodes_[n]->TakeRequests()) {
      for (const v1::Route& route : r.routes()) EXPECT_EQ(hinted_at[route.expert()], n);
    }
  }
}

// A hint for the first layer with experts goes at once, in separate calls,
// even to a node involved in the next Submit: no Submit comes before its
// layer to carry it. One for a later layer given after the last layer's
// Submit (the next step's layer 1, predicted at its layer 0) waits for the
// next Submit and rides on it.
TEST_F(RemoteExpertBackendTest, HintsForTheNextStepGoAtOnce) {
  MakeCluster(3, 1);
  const Placement& placement = cluster_->placement();
  const int involved = placement.Primary(0, 0);
  const Batch b = BatchForOneNode(placement, involved);
  std::vector<std::set<int32_t>> owned;  // hinted layer-0 experts by primary
  const std::vector<int32_t> hints = AllExperts(placement, 0, &owned);
  auto sent_by_now = [&](int round) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (int n = 0; n < 3; ++n) {
      std::set<int32_t> got;
      // The separate calls go out on the nodes' prefetch threads.
      for (int tries = 0; tries < 2000 && got.size() < owned[n].size(); ++tries) {
        for (const v1::PrefetchRequest& r : nodes_[n]->TakePrefetches()) {
          for (int32_t e : ExpertsOf(r.experts(), 0)) got.insert(e);
        }
        if (got.size() < owned[n].size()) absl::SleepFor(absl::Milliseconds(1));
      }
      EXPECT_EQ(got, owned[n]) << "node " << n;
    }
  };
  // Two backends: each node's one outstanding separate call is per backend.
  for (int round = 0; round < 2; ++round) {
    RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                               &pool_);
    std::vector<float> out(b.n_tokens * b.k * kEmbd);
    if (round == 1) {  // after layer 0: the hints are the next step's
      remote.Submit(b.view(0), out.data());
      ASSERT_TRUE(remote.Wait().ok());
    }
    remote.Prefetch(0, hints);
    sent_by_now(round);
    remote.Submit(b.view(0), out.data());
    ASSERT_TRUE(remote.Wait().ok());
    const RemoteBackendStats stats = remote.stats();
    EXPECT_EQ(stats.hints_separate, kExperts);
    EXPECT_EQ(stats.hints_riding, 0);
    EXPECT_EQ(stats.hints_dropped, 0);
    for (int n = 0; n < 3; ++n) {
      for (const v1::ComputeLayerRequest& r : nodes_[n]->TakeRequests()) {
        EXPECT_EQ(r.prefetch_size(), 0) << "a hint for the submitted layer rode on its request";
      }
    }
  }
  // After layer 1 (the last), the next step's hint for layer 1 rides on its
  // layer 0's Submit.
  const Batch b1 = RandomBatch(4, 1, 23);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  std::vector<float> out(b.n_tokens * b.k * kEmbd);
  remote.Submit(b1.view(1), out.data());
  ASSERT_TRUE(remote.Wait().ok());
  for (int n = 0; n < 3; ++n) nodes_[n]->TakeRequests();
  const int32_t hint = 0;
  remote.Prefetch(1, {&hint, 1});
  EXPECT_EQ(remote.stats().hints_separate, 0) << "sent before the next Submit";
  remote.Submit(b.view(0), out.data());
  ASSERT_TRUE(remote.Wait().ok());
  const RemoteBackendStats stats = remote.stats();
  EXPECT_EQ(stats.hints_riding + stats.hints_separate, 1);
  EXPECT_EQ(stats.hints_dropped, 0);
}

TEST_F(RemoteExpertBackendTest, AtMostOnePrefetchCallPerNodeIsOutstanding) {
  MakeCluster(3, 1);
  const Placement& placement = cluster_->placement();
  const int involved = placement.Primary(0, 0);
  const Batch b = BatchForOneNode(placement, involved);
  int other = -1;
  std::vector<int32_t> hints;
  for (int e = 0; e < kExperts && other < 0; ++e) {
    if (placement.Primary(1, e) != involved) other = placement.Primary(1, e);
  }
  ASSERT_GE(other, 0);
  for (int e = 0; e < kExperts; ++e) {
    if (placement.Primary(1, e) == other) hints.push_back(e);
  }
  const int64_t n = static_cast<int64_t>(hints.size());
  nodes_[other]->set_hold_prefetch(true);
  RemoteBackendStats stats;
  {
    RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                               &pool_);
    std::vector<float> out(b.n_tokens * b.k * kEmbd);
    // The first call stays outstanding; Submit and Wait do not wait for it.
    for (int i = 0; i < 3; ++i) {
      remote.Prefetch(1, hints);
      remote.Submit(b.view(0), out.data());
      ASSERT_TRUE(remote.Wait().ok());
    }
    stats = remote.stats();
    nodes_[other]->set_hold_prefetch(false);
  }
  EXPECT_EQ(stats.prefetch_calls, 1);
  EXPECT_EQ(stats.hints_separate, n);
  EXPECT_EQ(stats.hints_dropped, 2 * n);
  EXPECT_EQ(stats.hints_riding, 0);
  EXPECT_EQ(nodes_[other]->TakePrefetches().size(), 1u);
}

}  // namespace
}  // namespace colibri::coordinator
