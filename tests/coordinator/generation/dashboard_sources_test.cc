// What the dashboard draws, as the generation scheduler records it: the
// routes per layer and expert (ExpertUse, a RoutingObserver of the scheduler's backend) and the
// newest forward steps (StepTimeline) — first each on its own, then fed by a
// real generation on the demo model, whose counts follow from the tokens it
// evaluated.
#include <cstdint>
#include <numeric>
#include <vector>

#include "coordinator/generation/expert_use.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/step_timeline.h"
#include "gtest/gtest.h"
#include "tests/support/demo_model_fixture.h"
#include "tests/support/recording_job.h"

namespace colibri::coordinator {
namespace {

TEST(ExpertUseTest, CountsEveryRouteOfEveryLayerAndIgnoresWhatIsOutside) {
  ExpertUse use({4, 0, 3});
  const int32_t layer0[] = {0, 3, 3, 1};  // two tokens, top-2
  use.OnRoutes(0, 2, 2, layer0);
  const int32_t layer2[] = {2, 2, 2};
  use.OnRoutes(2, 3, 1, layer2);
  const int32_t bad[] = {-1, 4, 1};
  use.OnRoutes(0, 3, 1, bad);           // two ids outside layer 0's experts
  use.OnRoutes(1, 1, 1, layer2);        // a dense layer: no experts
  use.OnRoutes(7, 1, 2, layer0);        // no such layer
  const std::vector<std::vector<int64_t>> counts = use.Snapshot();
  ASSERT_EQ(counts.size(), 3u);
  EXPECT_EQ(counts[0], (std::vector<int64_t>{1, 2, 0, 2}));
  EXPECT_TRUE(counts[1].empty());
  EXPECT_EQ(counts[2], (std::vector<int64_t>{0, 0, 3}));
  EXPECT_EQ(use.token_layers(), 2 + 3 + 3);
  EXPECT_EQ(use.ignored(), 2 + 1 + 2);
}

TEST(StepTimelineTest, KeepsTheNewestStepsOldestFirst) {
  StepTimeline timeline(3);
  EXPECT_TRUE(timeline.Recent().empty());
  for (int i = 1; i <= 5; ++i) {
    StepRecord r;
    r.tokens = i;
    timeline.Add(r);
  }
  std::vector<int> tokens;
  for (const StepRecord& r : timeline.Recent()) tokens.push_back(r.tokens);
  EXPECT_EQ(tokens, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(timeline.total(), 5);
  StepTimeline one(0);  // at least one
  one.Add(StepRecord());
  EXPECT_EQ(one.Recent().size(), 1u);
}

class DashboardSourcesTest : public testing::DemoModelTest {};

TEST_F(DashboardSourcesTest, AGenerationRecordsEveryEvaluatedTokensRoutesAndEveryStep) {
  const arch::ModelConfig& c = model_->config();
  std::vector<int> experts_per_layer;
  for (const auto& layer : model_->experts()) {
    experts_per_layer.push_back(static_cast<int>(layer.size()));
  }
  ExpertUse use(experts_per_layer);
  StepTimeline timeline;
  GenerationScheduler::Options options;
  options.batch_size = 16;  // the prompt takes several steps
  options.routing_observers.push_back(&use);
  options.timeline = &timeline;
  GenerationSpec spec;
  tokenizer::EncodeOptions enc;
  enc.add_special = true;
  auto prompt = tokenizer_->Encode(
      "And it came to pass, when the men of the city saw it, that they rose up early", enc);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  spec.prompt_ids = *prompt;
  spec.sampling.temperature = 0;
  spec.generation.max_tokens = 12;
  const auto job = testing::RunAlone(options, *model_, tokenizer_.get(), pool_.get(), spec);
  ASSERT_TRUE(job->status.ok()) << job->status;

  const int64_t evaluated = job->outcome.steps.tokens_evaluated;
  ASSERT_GT(evaluated, static_cast<int64_t>(prompt->size()));
  int moe_layers = 0;
  const std::vector<std::vector<int64_t>> counts = use.Snapshot();
  for (size_t l = 0; l < counts.size(); ++l) {
    if (counts[l].empty()) continue;
    ++moe_layers;
    EXPECT_EQ(std::accumulate(counts[l].begin(), counts[l].end(), int64_t{0}),
              evaluated * c.n_expert_used)
        << "layer " << l;
  }
  ASSERT_GT(moe_layers, 0);
  EXPECT_EQ(use.token_layers(), evaluated * moe_layers);
  EXPECT_EQ(use.ignored(), 0);

  const std::vector<StepRecord> steps = timeline.Recent();
  EXPECT_EQ(static_cast<int64_t>(steps.size()), job->outcome.steps.evaluate_calls);
  int64_t tokens = 0;
  int prompt_steps = 0;
  for (const StepRecord& s : steps) {
    tokens += s.tokens;
    prompt_steps += s.prompt;
    EXPECT_EQ(s.generations, 1);
    EXPECT_GT(s.seconds, 0);
    EXPECT_LE(s.expert_wait_seconds, s.seconds);
    EXPECT_EQ(s.node_compute_seconds, 0);  // no nodes
    EXPECT_EQ(s.node_disk_seconds, 0);
  }
  EXPECT_EQ(tokens, evaluated);
  EXPECT_EQ(prompt_steps, (static_cast<int>(prompt->size()) + 15) / 16);
  EXPECT_TRUE(steps.front().prompt);
  EXPECT_FALSE(steps.back().prompt);
}

}  // namespace
}  // namespace colibri::coordinator
