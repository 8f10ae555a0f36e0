// One generation on the scheduler (as `run` drives it) with the MTP drafter
// gives exactly what plain decoding gives (tokens, log-probabilities, every
// logits row, the prompt's included), greedy
// and seeded with penalties, on the tiny deepseek2 model with a NextN block
// (tests/support/tiny_nextn_model.h): with random weights, where drafts are
// hardly ever accepted, and on the echo model, whose block is built to
// predict the main model, where they are (asserted).
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/generation/generation_scheduler.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/sampling/sampler.h"
#include "model/speculative/drafter.h"
#include "tests/support/recording_job.h"
#include "tests/support/tiny_nextn_model.h"

namespace colibri::coordinator {
namespace {

using testing::TinyNextnModel;

struct Loaded {
  std::string path;
  std::unique_ptr<arch::Model> model;
  std::unique_ptr<ThreadPool> pool;
};

Loaded Make(const testing::TinyNextnOptions& options, const std::string& name) {
  Loaded s;
  s.path = ::testing::TempDir() + "/" + name + ".gguf";
  EXPECT_TRUE(TinyNextnModel(options).WriteFile(s.path).ok());
  auto model = arch::Model::Open(s.path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return s;
  s.model = std::move(*model);
  s.pool = std::make_unique<ThreadPool>(2);
  return s;
}

using Outcome = testing::RecordingJob;

std::shared_ptr<Outcome> RunOnce(Loaded& s, const std::vector<int32_t>& prompt,
                                 const sampling::SamplingOptions& sampling,
                                 const GenerationOptions& options,
                                 const SpeculationOptions& speculation) {
  GenerationScheduler::Options scheduler;
  scheduler.batch_size = 8;  // the prompt in chunks
  scheduler.speculation = speculation;
  GenerationSpec spec;
  spec.prompt_ids = prompt;
  spec.sampling = sampling;
  spec.generation = options;
  auto job = testing::RunAlone(scheduler, *s.model, nullptr, s.pool.get(), std::move(spec));
  EXPECT_TRUE(job->status.ok()) << job->status;
  return job;
}

sampling::SamplingOptions Greedy() {
  sampling::SamplingOptions s;
  s.temperature = 0;
  return s;
}

sampling::SamplingOptions Seeded() {
  sampling::SamplingOptions s;
  s.temperature = 0.7f;
  s.top_k = 20;
  s.repeat_penalty = 1.05f;
  s.penalty_last_n = 16;
  s.seed = 1234;
  return s;
}

// Returns the drafts accepted over the runs.
int64_t ExpectMtpSameAsPlain(Loaded& s) {
  const std::vector<int32_t> prompt = {1, 7, 3, 30, 12, 5, 9, 22, 17, 4, 2};
  int64_t accepted = 0;
  for (bool seeded : {false, true}) {
    for (int draft_max : {1, 3, 6}) {
      SCOPED_TRACE(absl::StrCat(seeded ? "seeded" : "greedy", " draft_max ", draft_max));
      GenerationOptions options;
      options.max_tokens = 30;
      options.ignore_eos = true;
      options.decode_text = false;
      options.evaluate_every_token = true;
      options.all_prompt_logits = true;
      const auto plain = RunOnce(s, prompt, seeded ? Seeded() : Greedy(), options, {});
      SpeculationOptions mtp;
      mtp.draft = DraftKind::kMtp;
      mtp.draft_max = draft_max;
      mtp.adaptive = false;
      const auto spec = RunOnce(s, prompt, seeded ? Seeded() : Greedy(), options, mtp);
      testing::ExpectSameGeneration(*plain, *spec);
      EXPECT_GT(spec->result.speculation.drafted, 0);
      accepted += spec->result.speculation.accepted;
      std::cerr << (seeded ? "seeded" : "greedy") << " draft_max " << draft_max << ": "
                << spec->result.speculation.accepted << " of " << spec->result.speculation.drafted
                << " drafts accepted\n";
    }
  }
  return accepted;
}

TEST(MtpGenerationTest, RandomWeightsGiveThePlainOutput) {
  Loaded s = Make({}, "mtp_gen_random");
  ASSERT_NE(s.model, nullptr);
  ExpectMtpSameAsPlain(s);
}

TEST(MtpGenerationTest, EchoModelIsAcceptedAndGivesThePlainOutput) {
  testing::TinyNextnOptions echo;
  echo.echo = true;
  Loaded s = Make(echo, "mtp_gen_echo");
  ASSERT_NE(s.model, nullptr);
  EXPECT_GT(ExpectMtpSameAsPlain(s), 0);
}

// A drafter that runs a model spends time in Propose; that time belongs to
// the verify step whose drafts it made (it weighs in the adaptive length).
class SlowDrafter : public speculative::Drafter {
 public:
  void Accept(absl::Span<const int32_t> tokens) override {
    if (!tokens.empty()) last_ = tokens.back();
  }
  void Propose(int max_tokens, std::vector<int32_t>* draft) override {
    absl::SleepFor(absl::Milliseconds(20));
    draft->assign(static_cast<size_t>(max_tokens), last_);
  }
  bool ProposeIsCostly() const override { return true; }

 private:
  int32_t last_ = 0;
};

TEST(MtpGenerationTest, TheDraftersTimeCountsInTheVerifySteps) {
  Loaded s = Make({}, "mtp_gen_slow");
  ASSERT_NE(s.model, nullptr);
  GenerationOptions options;
  options.max_tokens = 6;
  options.ignore_eos = true;
  options.decode_text = false;
  SpeculationOptions slow;
  slow.draft_max = 2;
  slow.adaptive = false;
  slow.make_drafter = [] { return std::make_unique<SlowDrafter>(); };
  const auto out = RunOnce(s, {1, 2, 3}, Greedy(), options, slow);
  const SpeculationStats& stats = out->result.speculation;
  ASSERT_GT(stats.verify_steps, 0);
  // Each verify step slept 20 ms in Propose (the tiny model's own forward
  // takes well under that, so without the drafter's time this fails).
  EXPECT_GE(stats.verify_seconds, 0.02 * static_cast<double>(stats.verify_steps));
}

}  // namespace
}  // namespace colibri::coordinator
