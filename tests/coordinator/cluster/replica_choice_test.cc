// ChooseFastestReplicas: work goes to the copy expected to answer first, is
// shared among copies of about the same speed, avoids a slow node whenever a
// faster copy exists, and only usable nodes are chosen.
#include "coordinator/cluster/replica_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/cluster/node_latency.h"
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

// A generation's decode layers through three nodes whose replies carry a busy
// host's noise, the choice made from the LatencyEstimators those replies feed,
// as Cluster does. network_seconds[node]: the node's typical fixed part of a
// call. Returns [node]: the work each was given over the run.
std::vector<int64_t> SimulatedLoad(const Placement& p, ReplicaChoice choice,
                                   const std::vector<double>& network_seconds, uint32_t seed) {
  constexpr int kLayersRun = 512;  // 64 tokens x 8 layers
  constexpr int kTopK = 4;
  constexpr double kSecondsPerWork = 4e-6;  // as loopback nodes report
  std::mt19937 rng(seed);
  auto uniform = [&] { return static_cast<double>(rng()) / 4294967296.0; };
  // A multiplier about 1, spread by exp(+-sigma x sqrt(3)).
  auto jitter = [&](double sigma) { return std::exp(sigma * (uniform() - 0.5) * std::sqrt(12.0)); };
  absl::Time now = absl::UnixEpoch();
  std::vector<LatencyEstimator> latency(3);
  // Node n answers a call of `work` units (none when 0).
  auto reply = [&](int n, int64_t work) {
    if (work == 0) return;
    const double node = kSecondsPerWork * static_cast<double>(work) * jitter(0.3);
    // The scheduler's hiccups: now and then a reply is several times late.
    const double hiccup = uniform() < 0.03 ? 0.002 + 0.003 * uniform() : 0.0;
    const double network = network_seconds[n] * jitter(0.4) + hiccup;
    latency[n].Observe(now, work, network + node, node);
  };
  // The prompt's layers reach every node.
  for (int layer = 0; layer < 8; ++layer) {
    now += absl::Microseconds(500);
    for (int n = 0; n < 3; ++n) reply(n, ExpertWork(8));
  }
  std::vector<int64_t> total(3, 0);
  for (int layer = 0; layer < kLayersRun; ++layer) {
    std::vector<int64_t> work(kExperts, 0);
    for (int k = 0; k < kTopK;) {
      const int e = static_cast<int>(rng() % kExperts);
      if (work[e] > 0) continue;
      work[e] = ExpertWork(1);
      ++k;
    }
    std::vector<NodeSpeed> speed;
    for (const LatencyEstimator& l : latency) speed.push_back(SpeedOf(l.estimate()));
    const std::vector<bool> usable = {true, true, true};
    const std::vector<int> chosen = choice == ReplicaChoice::kFastest
                                        ? ChooseFastestReplicas(p, 0, work, speed, usable)
                                        : placement::BalanceReplicas(p, 0, work, usable);
    const std::vector<int64_t> load = Load(p, chosen, work);
    now += absl::Microseconds(500);
    for (int n = 0; n < 3; ++n) {
      total[n] += load[n];
      reply(n, load[n]);
    }
  }
  return total;
}

double BusiestOverMean(const std::vector<int64_t>& load) {
  int64_t max = 0;
  int64_t sum = 0;
  for (int64_t l : load) {
    max = std::max(max, l);
    sum += l;
  }
  return static_cast<double>(max) / (static_cast<double>(sum) / static_cast<double>(load.size()));
}

TEST(ReplicaChoiceTest, EquallyFastNodesWithNoisyEstimatesShareTheWorkLikeBalance) {
  const Placement p = ThreeNodesTwoCopies();
  const std::vector<double> network = {0.0002, 0.0002, 0.0002};
  for (uint32_t seed : {1u, 2u, 3u}) {
    const double fastest =
        BusiestOverMean(SimulatedLoad(p, ReplicaChoice::kFastest, network, seed));
    const double balance =
        BusiestOverMean(SimulatedLoad(p, ReplicaChoice::kBalance, network, seed));
    EXPECT_LE(fastest, balance + 0.1) << "seed " << seed << ": balance " << balance;
  }
}

TEST(ReplicaChoiceTest, ASlowNodeAmidTheSameNoiseGetsNothing) {
  const Placement p = ThreeNodesTwoCopies();
  // Node 1 behind a 20 ms link.
  const std::vector<double> network = {0.0002, 0.040, 0.0002};
  for (uint32_t seed : {1u, 2u, 3u}) {
    EXPECT_EQ(SimulatedLoad(p, ReplicaChoice::kFastest, network, seed)[1], 0) << "seed " << seed;
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

// One-token layers are ties between idle copies: the node that has answered
// the least work so far wins them, so an expert's load spreads over its copies
// across steps; without node_work the earlier copy in Owners order wins.
TEST(ReplicaChoiceTest, TiesGoToTheNodeWithTheLeastWorkSoFar) {
  const Placement p = ThreeNodesTwoCopies();
  std::vector<int64_t> work(kExperts, 0);
  work[5] = ExpertWork(1);
  const std::vector<NodeSpeed> speed(3, NodeSpeed{0.0005, 1e-5});
  const std::vector<bool> usable = {true, true, true};
  EXPECT_EQ(ChooseFastestReplicas(p, 0, work, speed, usable)[5], 0);
  std::vector<int64_t> node_work(3, 100);
  node_work[p.Owners(0, 5)[1]] = 10;
  EXPECT_EQ(ChooseFastestReplicas(p, 0, work, speed, usable, node_work)[5], 1);
  // Extra copies take part like the others.
  int third = 0;
  while (third == p.Owners(0, 5)[0] || third == p.Owners(0, 5)[1]) ++third;
  const Placement q = *p.WithExtraCopies({{0, 5, third}});
  node_work.assign(3, 100);
  node_work[third] = 10;
  EXPECT_EQ(ChooseFastestReplicas(q, 0, work, speed, usable, node_work)[5], 2);
}

}  // namespace
}  // namespace colibri::coordinator
