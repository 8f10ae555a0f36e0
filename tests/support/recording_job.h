// A GenerationJob that records everything the scheduler reports, a way to run
// several at once on a scheduler, and one alone on a scheduler of its own (the
// way `run` does).
#ifndef COLIBRI_TESTS_SUPPORT_RECORDING_JOB_H_
#define COLIBRI_TESTS_SUPPORT_RECORDING_JOB_H_

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "coordinator/generation/generation_scheduler.h"
#include "gtest/gtest.h"

namespace colibri::testing {

class RecordingJob : public coordinator::GenerationJob {
 public:
  using GenerationJob::GenerationJob;

  bool OnToken(const coordinator::GeneratedToken& token) override {
    tokens.push_back(token);
    return true;
  }
  absl::Status OnLogits(absl::Span<const float> rows) override {
    logits.insert(logits.end(), rows.begin(), rows.end());
    return absl::OkStatus();
  }
  void OnPromptDone() override { ++prompts_done; }
  void OnFinish(absl::StatusOr<coordinator::GenerationOutcome> outcome) override {
    status = outcome.status();
    if (outcome.ok()) {
      result = outcome->result;
      this->outcome = std::move(*outcome);
    }
    done.Notify();
  }

  std::vector<coordinator::GeneratedToken> tokens;
  std::vector<float> logits;  // every reported row, concatenated
  int prompts_done = 0;
  absl::Status status;
  coordinator::GenerationResult result;
  coordinator::GenerationOutcome outcome;
  absl::Notification done;
};

// Submits every spec to `scheduler` at once and waits for them all.
inline std::vector<std::shared_ptr<RecordingJob>> RunTogether(
    coordinator::GenerationScheduler& scheduler,
    const std::vector<coordinator::GenerationSpec>& specs) {
  std::vector<std::shared_ptr<RecordingJob>> jobs;
  for (const coordinator::GenerationSpec& spec : specs) {
    jobs.push_back(std::make_shared<RecordingJob>(spec));
    EXPECT_TRUE(scheduler.Submit(jobs.back()).ok());
  }
  for (auto& job : jobs) job->done.WaitForNotification();
  return jobs;
}

// Runs `spec` alone on a new scheduler (`options`, local experts; the
// scheduler is stopped before this returns) and returns its finished job.
inline std::shared_ptr<RecordingJob> RunAlone(
    const coordinator::GenerationScheduler::Options& options, const arch::Model& model,
    const tokenizer::Tokenizer* tokenizer, ThreadPool* pool, coordinator::GenerationSpec spec) {
  auto job = std::make_shared<RecordingJob>(std::move(spec));
  auto scheduler =
      coordinator::GenerationScheduler::Create(options, model, tokenizer, nullptr, pool);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  if (!scheduler.ok()) {
    job->status = scheduler.status();
    return job;
  }
  EXPECT_TRUE((*scheduler)->Submit(job).ok());
  job->done.WaitForNotification();
  (*scheduler)->Stop();
  return job;
}

// Expects `got` to have generated exactly what `want` did: both succeeded,
// with the same tokens, text, trailing text and finish reason, every reported
// token's id, text, end of generation and log-probabilities, and every
// reported logits row, floats compared bitwise.
inline void ExpectSameGeneration(const RecordingJob& want, const RecordingJob& got) {
  ASSERT_TRUE(want.status.ok()) << want.status;
  ASSERT_TRUE(got.status.ok()) << got.status;
  const auto same = [](const float& a, const float& b) {
    return std::memcmp(&a, &b, sizeof(float)) == 0;
  };
  EXPECT_EQ(want.result.tokens, got.result.tokens);
  EXPECT_EQ(want.result.text, got.result.text);
  EXPECT_EQ(want.result.trailing_text, got.result.trailing_text);
  EXPECT_EQ(want.result.finish_reason, got.result.finish_reason);
  ASSERT_EQ(want.tokens.size(), got.tokens.size());
  for (size_t i = 0; i < want.tokens.size(); ++i) {
    const coordinator::GeneratedToken& w = want.tokens[i];
    const coordinator::GeneratedToken& g = got.tokens[i];
    EXPECT_EQ(w.id, g.id) << i;
    EXPECT_EQ(w.text, g.text) << i;
    EXPECT_EQ(w.end_of_generation, g.end_of_generation) << i;
    EXPECT_TRUE(same(w.logprob, g.logprob)) << i;
    ASSERT_EQ(w.top_logprobs.size(), g.top_logprobs.size()) << i;
    for (size_t j = 0; j < w.top_logprobs.size(); ++j) {
      EXPECT_EQ(w.top_logprobs[j].id, g.top_logprobs[j].id) << i;
      EXPECT_TRUE(same(w.top_logprobs[j].logprob, g.top_logprobs[j].logprob)) << i;
    }
  }
  ASSERT_EQ(want.logits.size(), got.logits.size());
  EXPECT_EQ(std::memcmp(want.logits.data(), got.logits.data(), want.logits.size() * sizeof(float)),
            0)
      << "the logits differ";
}

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_RECORDING_JOB_H_
