// serve --draft mtp inside GenerationScheduler, driven without gRPC on the
// tiny deepseek2 model with a NextN block (tests/support/tiny_nextn_model.h):
// generations batched together, each drafting with its own sequence of the
// block, give exactly the tokens, log-probabilities and finish reasons each
// gives alone on a plain scheduler, greedy and seeded with penalties, with
// prompts chunked across steps, short max_tokens and a full context; on the
// echo model (whose block predicts the main model) drafts are accepted. A
// model without the block is refused.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/serve_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/speculative/drafter.h"
#include "tests/support/metrics_text.h"
#include "tests/support/recording_job.h"
#include "tests/support/tiny_nextn_model.h"

namespace colibri::coordinator {
namespace {

using ::testing::HasSubstr;
using testing::TinyNextnModel;

using testing::RecordingJob;
using testing::RunTogether;

std::unique_ptr<arch::Model> Open(const testing::TinyNextnOptions& options,
                                  const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  EXPECT_TRUE(TinyNextnModel(options).WriteFile(path).ok());
  auto model = arch::Model::Open(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

class SchedulerMtpTest : public ::testing::Test {
 protected:
  void SetUp() override { pool_ = std::make_unique<ThreadPool>(2); }

  std::unique_ptr<GenerationScheduler> NewScheduler(const arch::Model& model, int sessions,
                                                    int batch_size,
                                                    const SpeculationOptions& speculation,
                                                    ServeMetrics* metrics) {
    GenerationScheduler::Options options;
    options.sessions = sessions;
    options.batch_size = batch_size;
    options.speculation = speculation;
    options.metrics = metrics;
    auto s = GenerationScheduler::Create(options, model, nullptr, nullptr, pool_.get());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  static std::vector<GenerationSpec> Specs() {
    GenerationSpec greedy;
    greedy.prompt_ids = {1, 7, 3, 30, 12, 5, 9, 22, 17, 4, 2};
    greedy.sampling.temperature = 0;
    greedy.generation.max_tokens = 24;
    greedy.generation.ignore_eos = true;
    greedy.generation.logprobs = true;
    GenerationSpec seeded = greedy;
    seeded.sampling.temperature = 0.7f;
    seeded.sampling.top_k = 20;
    seeded.sampling.repeat_penalty = 1.05f;
    seeded.sampling.penalty_last_n = 16;
    seeded.sampling.seed = 1234;
    std::vector<GenerationSpec> specs = {greedy, seeded};
    GenerationSpec other = greedy;
    other.prompt_ids = {8, 8, 14, 3};
    specs.push_back(other);
    GenerationSpec other_seeded = seeded;
    other_seeded.prompt_ids = {20, 2, 19, 5, 5, 31, 0, 6, 13, 27, 11, 1, 9, 24, 16, 3, 7, 10};
    other_seeded.sampling.seed = 99;
    specs.push_back(other_seeded);
    for (int max_tokens : {1, 2, 3}) {
      GenerationSpec short_one = greedy;
      short_one.generation.max_tokens = max_tokens;
      specs.push_back(short_one);
    }
    GenerationSpec full = seeded;  // runs into the end of the context (64)
    full.generation.max_tokens = 80;
    specs.push_back(full);
    return specs;
  }

  // Runs Specs() alone on a plain scheduler, then together (3 slots for 8
  // generations, so that slots and their block sequences are reused) with MTP
  // drafts; returns the drafts accepted.
  double ExpectMtpSameAsPlain(const arch::Model& model) {
    const std::vector<GenerationSpec> specs = Specs();
    std::vector<std::shared_ptr<RecordingJob>> alone;
    {
      std::unique_ptr<GenerationScheduler> plain = NewScheduler(model, 1, 64, {}, nullptr);
      if (plain == nullptr) return 0;
      for (const GenerationSpec& spec : specs) alone.push_back(RunTogether(*plain, {spec})[0]);
    }
    double accepted = 0;
    for (bool adaptive : {false, true}) {
      for (int draft_max : {1, 4}) {
        SCOPED_TRACE(absl::StrCat(adaptive ? "adaptive" : "fixed", " draft_max ", draft_max));
        SpeculationOptions mtp;
        mtp.draft = DraftKind::kMtp;
        mtp.draft_max = draft_max;
        mtp.adaptive = adaptive;
        ServeMetrics metrics;
        // A budget of 12 tokens chunks the prompts and limits the drafts.
        std::unique_ptr<GenerationScheduler> spec = NewScheduler(model, 3, 12, mtp, &metrics);
        if (spec == nullptr) return 0;
        const auto together = RunTogether(*spec, specs);
        for (size_t i = 0; i < specs.size(); ++i) {
          SCOPED_TRACE(::testing::Message() << "generation " << i);
          testing::ExpectSameGeneration(*alone[i], *together[i]);
        }
        const std::string scraped = metrics.Render();
        const double a =
            testing::MetricSample(scraped, "colibri_draft_tokens_total{outcome=\"accepted\"}");
        const double r =
            testing::MetricSample(scraped, "colibri_draft_tokens_total{outcome=\"rejected\"}");
        if (!adaptive) {
          EXPECT_GT(a + r, 0);  // drafts were evaluated
        }
        accepted += std::max(0.0, a);
        EXPECT_EQ(spec->active_generations(), 0);
      }
    }
    return accepted;
  }

  std::unique_ptr<ThreadPool> pool_;
};

TEST_F(SchedulerMtpTest, RandomWeightsGiveWhatEachGivesAlone) {
  std::unique_ptr<arch::Model> model = Open({}, "sched_mtp_random");
  ASSERT_NE(model, nullptr);
  ExpectMtpSameAsPlain(*model);
}

TEST_F(SchedulerMtpTest, EchoModelAcceptsDraftsAndGivesWhatEachGivesAlone) {
  testing::TinyNextnOptions echo;
  echo.echo = true;
  std::unique_ptr<arch::Model> model = Open(echo, "sched_mtp_echo");
  ASSERT_NE(model, nullptr);
  EXPECT_GT(ExpectMtpSameAsPlain(*model), 0);
}

// A drafter standing for a model (ProposeIsCostly): it counts the drafts it
// was asked for.
class CountingDrafter : public speculative::Drafter {
 public:
  explicit CountingDrafter(std::shared_ptr<int64_t> proposed) : proposed_(std::move(proposed)) {}
  void Accept(absl::Span<const int32_t> tokens) override {
    if (!tokens.empty()) last_ = tokens.back();
  }
  void Propose(int max_tokens, std::vector<int32_t>* draft) override {
    draft->assign(static_cast<size_t>(std::max(0, max_tokens)), last_);
    *proposed_ += static_cast<int64_t>(draft->size());
  }
  bool ProposeIsCostly() const override { return true; }

 private:
  std::shared_ptr<int64_t> proposed_;
  int32_t last_ = 0;
};

// The adaptive plan asks a costly drafter only for the drafts the step then
// evaluates (its time is counted in the step's cost, so it must not run for
// drafts that are dropped): every proposed draft is accepted or rejected.
TEST_F(SchedulerMtpTest, ACostlyDrafterIsAskedOnlyForTheDraftsEvaluated) {
  std::unique_ptr<arch::Model> model = Open({}, "sched_mtp_costly");
  ASSERT_NE(model, nullptr);
  auto proposed = std::make_shared<int64_t>(0);
  SpeculationOptions speculation;
  speculation.draft = DraftKind::kMtp;
  speculation.draft_max = 4;
  speculation.make_drafter = [proposed] { return std::make_unique<CountingDrafter>(proposed); };
  ServeMetrics metrics;
  std::unique_ptr<GenerationScheduler> scheduler =
      NewScheduler(*model, 2, 12, speculation, &metrics);
  ASSERT_NE(scheduler, nullptr);
  std::vector<GenerationSpec> specs = Specs();
  specs.resize(3);
  for (auto& job : RunTogether(*scheduler, specs)) ASSERT_TRUE(job->status.ok()) << job->status;
  scheduler->Stop();
  const std::string scraped = metrics.Render();
  const double evaluated =
      testing::MetricSample(scraped, "colibri_draft_tokens_total{outcome=\"accepted\"}") +
      testing::MetricSample(scraped, "colibri_draft_tokens_total{outcome=\"rejected\"}");
  EXPECT_GT(*proposed, 0);
  EXPECT_EQ(static_cast<double>(*proposed), evaluated);
}

TEST_F(SchedulerMtpTest, AModelWithoutANextnBlockIsRefused) {
  testing::TinyNextnOptions plain;
  plain.n_nextn = 0;
  std::unique_ptr<arch::Model> model = Open(plain, "sched_mtp_none");
  ASSERT_NE(model, nullptr);
  GenerationScheduler::Options options;
  options.speculation.draft = DraftKind::kMtp;
  auto s = GenerationScheduler::Create(options, *model, nullptr, nullptr, pool_.get());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("nextn_predict_layers"));
  EXPECT_THAT(s.status().message(), HasSubstr("--draft mtp"));
}

}  // namespace
}  // namespace colibri::coordinator
