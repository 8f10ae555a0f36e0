// GET /v1/cluster's body (ClusterView) over fake nodes: every node with its
// health, reply times and counters as the cluster holds them, the placement
// as installed, tier figures read in the background (never for an unhealthy
// node), and the routes and steps of its sources.
#include "coordinator/api/cluster_view.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/cluster/remote_expert_backend.h"
#include "coordinator/generation/expert_use.h"
#include "coordinator/generation/step_timeline.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/coordinator/cluster/fake_expert_nodes.h"

namespace colibri::coordinator {
namespace {

using json = nlohmann::json;
using testing::kExperts;
using testing::kLayers;
using testing::RandomBatch;
using testing::RemoteExpertBackendTest;

class ClusterViewTest : public RemoteExpertBackendTest {
 protected:
  // Renders until every healthy node has tier figures (at most ~10 s).
  json RenderWithTiers(ClusterView& view) {
    json j;
    for (int i = 0; i < 1000; ++i) {
      j = json::parse(view.Render());
      bool all = true;
      for (const json& n : j["nodes"]) all = all && (!n["healthy"] || !n["tiers"].is_null());
      if (all) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return j;
  }
};

TEST_F(ClusterViewTest, NodesPlacementRoutesAndStepsAreWhatTheSourcesHold) {
  MakeCluster(3, 2);
  RemoteExpertBackend remote(cluster_.get(), &model_.experts(), kExperts, ops::NumericPath::kFast,
                             &pool_);
  std::vector<float> local_out, remote_out;
  for (int i = 0; i < 6; ++i) {
    RunBoth(RandomBatch(2, 2, 40 + i), i % kLayers, ops::NumericPath::kFast, &remote, &local_out,
            &remote_out);
  }
  ExpertUse use(std::vector<int>(kLayers, kExperts));
  const int32_t routes[] = {1, 1, 2};
  use.OnRoutes(1, 3, 1, routes);
  StepTimeline timeline;
  StepRecord step;
  step.end = now_ - absl::Milliseconds(250);
  step.seconds = 0.010;
  step.tokens = 3;
  step.expert_wait_seconds = 0.006;
  step.node_compute_seconds = 0.002;
  step.node_disk_seconds = 0.001;
  timeline.Add(step);

  ClusterView::Sources sources;
  sources.cluster = cluster_.get();
  sources.expert_use = &use;
  sources.timeline = &timeline;
  ClusterView::Options options;
  options.clock = [this] { return now_; };
  ClusterView view(sources, options);
  const json j = RenderWithTiers(view);

  EXPECT_TRUE(j["model"].is_null());
  ASSERT_EQ(j["nodes"].size(), 3u);
  for (int n = 0; n < 3; ++n) {
    const json& node = j["nodes"][n];
    const NodeCounters c = cluster_->counters(n);
    EXPECT_EQ(node["index"], n);
    EXPECT_EQ(node["address"], cluster_->node(n).address);
    EXPECT_EQ(node["healthy"], true);
    EXPECT_EQ(node["requests"], c.requests);
    EXPECT_EQ(node["bytes_sent"], c.bytes_sent);
    EXPECT_EQ(node["reply_ms"]["samples"], cluster_->latency(n).samples);
    EXPECT_DOUBLE_EQ(node["reply_ms"]["mean"].get<double>(),
                     1e3 * cluster_->latency(n).wait_ewma);
    ASSERT_TRUE(node["tiers"].is_object()) << node.dump();
    EXPECT_EQ(node["tiers"]["hit_rate"], 0.0);  // the fakes report no acquisitions
  }
  const json& owners = j["placement"]["owners"];
  EXPECT_EQ(j["placement"]["replicas"], 2);
  ASSERT_EQ(owners.size(), static_cast<size_t>(kLayers));
  for (int l = 0; l < kLayers; ++l) {
    ASSERT_EQ(owners[l].size(), static_cast<size_t>(kExperts));
    for (int e = 0; e < kExperts; ++e) {
      const absl::Span<const int> want = cluster_->placement().Owners(l, e);
      EXPECT_EQ(owners[l][e].get<std::vector<int>>(), std::vector<int>(want.begin(), want.end()));
    }
  }
  EXPECT_EQ(j["expert_use"]["routes"][1][1], 2);
  EXPECT_EQ(j["expert_use"]["routes"][1][2], 1);
  EXPECT_EQ(j["expert_use"]["token_layers"], 3);
  ASSERT_EQ(j["steps"].size(), 1u);
  const json& s = j["steps"][0];
  EXPECT_DOUBLE_EQ(s["age_ms"].get<double>(), 250);
  EXPECT_NEAR(s["coordinator_ms"].get<double>(), 4, 1e-9);
  EXPECT_NEAR(s["network_ms"].get<double>(), 3, 1e-9);
  EXPECT_NEAR(s["node_compute_ms"].get<double>(), 2, 1e-9);
  EXPECT_NEAR(s["disk_ms"].get<double>(), 1, 1e-9);
}

TEST_F(ClusterViewTest, AnUnhealthyNodeIsNotAskedAndFiguresThatDoNotAddUpAreCut) {
  MakeCluster(2, 1);
  nodes_[1]->set_down(true);
  cluster_->MarkUnhealthy(1, absl::UnavailableError("down"));
  StepTimeline timeline;
  StepRecord step;
  step.end = now_;
  step.seconds = 0.004;
  step.expert_wait_seconds = 0.009;   // more than the step: cut to it
  step.node_compute_seconds = 0.003;
  step.node_disk_seconds = 0.003;     // the wait left after compute: 1 ms
  timeline.Add(step);
  ClusterView::Sources sources;
  sources.cluster = cluster_.get();
  sources.timeline = &timeline;
  ClusterView view(sources);
  const json j = RenderWithTiers(view);
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_TRUE(j["nodes"][0]["tiers"].is_object());
  EXPECT_EQ(j["nodes"][1]["healthy"], false);
  EXPECT_TRUE(j["nodes"][1]["tiers"].is_null());
  const json& s = j["steps"][0];
  EXPECT_NEAR(s["coordinator_ms"].get<double>(), 0, 1e-9);
  EXPECT_NEAR(s["node_compute_ms"].get<double>(), 3, 1e-9);
  EXPECT_NEAR(s["disk_ms"].get<double>(), 1, 1e-9);
  EXPECT_NEAR(s["network_ms"].get<double>(), 0, 1e-9);
  EXPECT_FALSE(j.contains("expert_use"));
  EXPECT_FALSE(j.contains("scheduler"));
}

}  // namespace
}  // namespace colibri::coordinator
