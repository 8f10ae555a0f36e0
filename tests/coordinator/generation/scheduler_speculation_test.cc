// Speculative decoding inside GenerationScheduler (serve's core), driven
// without gRPC on the demo model (trained, so n-gram drafts are accepted):
// generations running together with drafting on give exactly the tokens,
// pieces, log-probabilities and finish reasons that each gives alone on a
// plain scheduler with one session, greedy and seeded with penalties, with
// stop strings and end of generation met inside a draft and every small
// max_tokens; and drafts were accepted and rejected (the /metrics counters).
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/serve_metrics.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/demo_model.h"
#include "tests/support/demo_model_fixture.h"
#include "tests/support/metrics_text.h"
#include "tests/support/recording_job.h"

namespace colibri::coordinator {
namespace {

using testing::kDemoModel;

using testing::RecordingJob;
using testing::RunTogether;

class SchedulerSpeculationTest : public testing::DemoModelTest {
 protected:
  std::unique_ptr<GenerationScheduler> NewScheduler(int sessions, int batch_size,
                                                    const SpeculationOptions& speculation,
                                                    ServeMetrics* metrics) {
    GenerationScheduler::Options options;
    options.sessions = sessions;
    options.batch_size = batch_size;
    options.speculation = speculation;
    options.metrics = metrics;
    auto s = GenerationScheduler::Create(options, *model_, tokenizer_.get(), nullptr, pool_.get());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::vector<int32_t> Encode(const std::string& text) {
    tokenizer::EncodeOptions enc;
    enc.add_special = true;
    auto ids = tokenizer_->Encode(text, enc);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }
};

TEST_F(SchedulerSpeculationTest, DraftingGenerationsTogetherGiveWhatEachGivesAlone) {
  const std::string verse =
      "And God said, Let there be light: and there was light. And God saw the light, that it "
      "was good: and God divided the light from the darkness. ";
  const std::vector<int32_t> repeat = Encode(verse + verse + "And God said,");
  GenerationSpec greedy;
  greedy.prompt_ids = repeat;
  greedy.sampling.temperature = 0;
  greedy.generation.max_tokens = 40;
  greedy.generation.logprobs = true;
  greedy.generation.top_logprobs = 2;
  GenerationSpec seeded = greedy;
  seeded.sampling.temperature = 0.7f;
  seeded.sampling.top_k = 20;
  seeded.sampling.repeat_penalty = 1.05f;
  seeded.sampling.frequency_penalty = 0.05f;
  seeded.sampling.seed = 1234;
  GenerationSpec other = greedy;
  other.prompt_ids = Encode("The king of Babylon");

  // Plain, one at a time: the reference, and the text to take stop strings
  // from.
  SpeculationOptions none;
  std::unique_ptr<GenerationScheduler> plain = NewScheduler(1, 64, none, nullptr);
  ASSERT_NE(plain, nullptr);
  const auto greedy_plain = RunTogether(*plain, {greedy});
  ASSERT_TRUE(greedy_plain[0]->status.ok());
  const std::string text = greedy_plain[0]->result.text;
  ASSERT_GT(text.size(), 30u);

  std::vector<GenerationSpec> specs = {greedy, seeded, other};
  for (size_t at : {size_t{5}, size_t{17}, size_t{29}}) {
    GenerationSpec stop = greedy;
    stop.generation.stop = {text.substr(at, 4)};
    specs.push_back(stop);
  }
  for (int max_tokens : {1, 2, 3, 5}) {
    GenerationSpec short_one = greedy;
    short_one.generation.max_tokens = max_tokens;
    specs.push_back(short_one);
  }
  // End of generation inside a draft: the prompt's repeats end with it.
  const int32_t eos = tokenizer_->eos_id();
  if (eos >= 0) {
    GenerationSpec ending = greedy;
    auto line = tokenizer_->Encode(" and there was light.", {});
    ASSERT_TRUE(line.ok());
    for (int r = 0; r < 3; ++r) {
      ending.prompt_ids.insert(ending.prompt_ids.end(), line->begin(), line->end());
      ending.prompt_ids.push_back(eos);
    }
    ending.prompt_ids.insert(ending.prompt_ids.end(), line->begin(), line->end());
    specs.push_back(ending);
  }
  std::vector<std::shared_ptr<RecordingJob>> alone;
  for (const GenerationSpec& spec : specs) alone.push_back(RunTogether(*plain, {spec})[0]);
  plain.reset();

  for (bool adaptive : {false, true}) {
    SCOPED_TRACE(adaptive ? "adaptive" : "fixed");
    SpeculationOptions ngram;
    ngram.draft = DraftKind::kNgram;
    ngram.draft_max = 8;
    ngram.adaptive = adaptive;
    ServeMetrics metrics;
    // 4 sessions for 12 generations: they queue, join and leave; a budget
    // of 24 tokens chunks the prompts and limits the drafts.
    std::unique_ptr<GenerationScheduler> spec = NewScheduler(4, 24, ngram, &metrics);
    ASSERT_NE(spec, nullptr);
    const auto together = RunTogether(*spec, specs);
    for (size_t i = 0; i < specs.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "generation " << i);
      testing::ExpectSameGeneration(*alone[i], *together[i]);
    }
    const std::string scraped = metrics.Render();
    if (!adaptive) {  // the adaptive length may rightly find drafting does not pay
      EXPECT_GT(testing::MetricSample(scraped, "colibri_draft_tokens_total{outcome=\"accepted\"}"),
                0);
      EXPECT_GT(testing::MetricSample(scraped, "colibri_draft_tokens_total{outcome=\"rejected\"}"),
                0);
    }
    EXPECT_EQ(spec->active_generations(), 0);
  }
}

TEST_F(SchedulerSpeculationTest, AnOutOfRangeDraftMaxIsRefused) {
  for (int draft_max : {0, kMaxDraftTokens + 1}) {
    GenerationScheduler::Options options;
    options.speculation.draft = DraftKind::kNgram;
    options.speculation.draft_max = draft_max;
    auto s = GenerationScheduler::Create(options, *model_, tokenizer_.get(), nullptr, pool_.get());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << draft_max;
  }
}

}  // namespace
}  // namespace colibri::coordinator
