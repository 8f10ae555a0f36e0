// Generate with the MTP drafter gives exactly what plain decoding gives
// (tokens, log-probabilities, every logits row, final cache length), greedy
// and seeded with penalties, on the tiny deepseek2 model with a NextN block
// (tests/support/tiny_nextn_model.h): with random weights, where drafts are
// hardly ever accepted, and on the echo model, whose block is built to
// predict the main model, where they are (asserted).
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/generation.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "model/sampling/sampler.h"
#include "model/speculative/mtp_drafter.h"
#include "tests/support/tiny_nextn_model.h"

namespace colibri::coordinator {
namespace {

using testing::TinyNextnModel;

struct Outcome {
  GenerationResult result;
  std::vector<GeneratedToken> tokens;
  std::vector<float> logits;  // every reported row
  int n_past = 0;
};

struct Loaded {
  std::string path;
  std::unique_ptr<arch::Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<moe::LocalExpertBackend> backend;
  std::unique_ptr<arch::Session> session;
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
  s.backend = std::make_unique<moe::LocalExpertBackend>(
      &s.model->experts(), s.model->config().n_expert, ops::NumericPath::kFast, s.pool.get());
  arch::SessionOptions so;
  so.n_batch = 8;  // the prompt in chunks
  auto session = arch::Session::Create(*s.model, s.backend.get(), s.pool.get(), so);
  EXPECT_TRUE(session.ok()) << session.status();
  if (session.ok()) s.session = std::move(*session);
  return s;
}

Outcome RunOnce(Loaded& s, const std::vector<int32_t>& prompt,
                const sampling::SamplingOptions& sampling, const GenerationOptions& options) {
  Outcome out;
  s.session->Reset();
  auto sampler = sampling::Sampler::Create(sampling, s.model->config().n_vocab);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  GenerationCallbacks callbacks;
  callbacks.on_token = [&](const GeneratedToken& t) {
    out.tokens.push_back(t);
    return true;
  };
  callbacks.on_logits = [&](absl::Span<const float> rows) {
    out.logits.insert(out.logits.end(), rows.begin(), rows.end());
    return absl::OkStatus();
  };
  auto result = Generate(*s.session, **sampler, nullptr, prompt, options, callbacks);
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) out.result = std::move(*result);
  out.n_past = s.session->n_past();
  return out;
}

void ExpectSame(const Outcome& plain, const Outcome& spec) {
  EXPECT_EQ(plain.result.tokens, spec.result.tokens);
  EXPECT_EQ(plain.result.finish_reason, spec.result.finish_reason);
  EXPECT_EQ(plain.n_past, spec.n_past);
  ASSERT_EQ(plain.tokens.size(), spec.tokens.size());
  for (size_t i = 0; i < plain.tokens.size(); ++i) {
    EXPECT_EQ(plain.tokens[i].id, spec.tokens[i].id) << i;
    EXPECT_EQ(std::memcmp(&plain.tokens[i].logprob, &spec.tokens[i].logprob, sizeof(float)), 0)
        << i;
  }
  ASSERT_EQ(plain.logits.size(), spec.logits.size());
  EXPECT_EQ(std::memcmp(plain.logits.data(), spec.logits.data(), plain.logits.size() * 4), 0);
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
  speculative::MtpOptions mo;
  mo.n_ctx = s.session->n_ctx();
  mo.n_batch = 8;
  auto mtp = speculative::MtpModule::Open(s.path, s.pool.get(), mo);
  EXPECT_TRUE(mtp.ok()) << mtp.status();
  if (!mtp.ok()) return 0;
  speculative::MtpDrafter drafter(*s.session, **mtp);
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
      const Outcome plain = RunOnce(s, prompt, seeded ? Seeded() : Greedy(), options);
      options.speculation.draft = DraftKind::kMtp;
      options.speculation.draft_max = draft_max;
      options.speculation.adaptive = false;
      options.speculation.make_drafter = [&]() -> std::unique_ptr<speculative::Drafter> {
        drafter.Restart();
        return std::make_unique<speculative::BorrowedDrafter>(&drafter);
      };
      const Outcome spec = RunOnce(s, prompt, seeded ? Seeded() : Greedy(), options);
      ExpectSame(plain, spec);
      EXPECT_GT(spec.result.speculation.drafted, 0);
      accepted += spec.result.speculation.accepted;
      std::cerr << (seeded ? "seeded" : "greedy") << " draft_max " << draft_max << ": "
                << spec.result.speculation.accepted << " of " << spec.result.speculation.drafted
                << " drafts accepted\n";
    }
  }
  return accepted;
}

TEST(MtpGenerationTest, RandomWeightsGiveThePlainOutput) {
  Loaded s = Make({}, "mtp_gen_random");
  ASSERT_NE(s.session, nullptr);
  ExpectMtpSameAsPlain(s);
}

TEST(MtpGenerationTest, EchoModelIsAcceptedAndGivesThePlainOutput) {
  testing::TinyNextnOptions echo;
  echo.echo = true;
  Loaded s = Make(echo, "mtp_gen_echo");
  ASSERT_NE(s.session, nullptr);
  EXPECT_GT(ExpectMtpSameAsPlain(s), 0);
}

Outcome Turn(Loaded& s, const std::vector<int32_t>& prompt,
             const sampling::SamplingOptions& sampling, const GenerationOptions& options) {
  Outcome out;
  auto sampler = sampling::Sampler::Create(sampling, s.model->config().n_vocab);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  GenerationCallbacks callbacks;
  callbacks.on_token = [&](const GeneratedToken& t) {
    out.tokens.push_back(t);
    return true;
  };
  auto result = Generate(*s.session, **sampler, nullptr, prompt, options, callbacks);
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) out.result = std::move(*result);
  out.n_past = s.session->n_past();
  return out;
}

// A conversation: the second generation continues the session where the
// first one's fed tokens end. The drafter catches up from there and drafts
// (before, it gave up after position 0), and every turn equals plain
// decoding.
TEST(MtpGenerationTest, AContinuedConversationDraftsAndGivesThePlainOutput) {
  for (bool echo : {false, true}) {
    SCOPED_TRACE(echo ? "echo" : "random");
    testing::TinyNextnOptions model_options;
    model_options.echo = echo;
    Loaded s = Make(model_options, echo ? "mtp_turns_echo" : "mtp_turns_random");
    ASSERT_NE(s.session, nullptr);
    speculative::MtpOptions mo;
    mo.n_ctx = s.session->n_ctx();
    mo.n_batch = 8;
    auto mtp = speculative::MtpModule::Open(s.path, s.pool.get(), mo);
    ASSERT_TRUE(mtp.ok()) << mtp.status();
    speculative::MtpDrafter drafter(*s.session, **mtp);
    const std::vector<std::vector<int32_t>> turns = {{1, 7, 3, 30, 12}, {5, 9, 22}, {17, 4}};
    for (bool seeded : {false, true}) {
      SCOPED_TRACE(seeded ? "seeded" : "greedy");
      GenerationOptions options;
      options.max_tokens = 12;
      options.ignore_eos = true;
      options.decode_text = false;
      std::vector<Outcome> plain;
      s.session->Reset();
      for (const auto& prompt : turns) {
        plain.push_back(Turn(s, prompt, seeded ? Seeded() : Greedy(), options));
      }
      options.speculation.draft = DraftKind::kMtp;
      options.speculation.draft_max = 3;
      options.speculation.adaptive = false;
      options.speculation.make_drafter = [&]() -> std::unique_ptr<speculative::Drafter> {
        drafter.Restart();
        return std::make_unique<speculative::BorrowedDrafter>(&drafter);
      };
      s.session->Reset();
      int64_t accepted_later = 0;
      for (size_t t = 0; t < turns.size(); ++t) {
        SCOPED_TRACE(::testing::Message() << "turn " << t);
        const Outcome spec = Turn(s, turns[t], seeded ? Seeded() : Greedy(), options);
        EXPECT_EQ(plain[t].result.tokens, spec.result.tokens);
        EXPECT_EQ(plain[t].n_past, spec.n_past);
        ASSERT_EQ(plain[t].tokens.size(), spec.tokens.size());
        for (size_t i = 0; i < spec.tokens.size(); ++i) {
          EXPECT_EQ(std::memcmp(&plain[t].tokens[i].logprob, &spec.tokens[i].logprob, 4), 0);
        }
        EXPECT_GT(spec.result.speculation.drafted, 0);
        if (t > 0) accepted_later += spec.result.speculation.accepted;
      }
      if (echo) {
        EXPECT_GT(accepted_later, 0);
      }
    }
  }
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
  ASSERT_NE(s.session, nullptr);
  GenerationOptions options;
  options.max_tokens = 6;
  options.ignore_eos = true;
  options.decode_text = false;
  options.speculation.draft_max = 2;
  options.speculation.adaptive = false;
  options.speculation.make_drafter = [] { return std::make_unique<SlowDrafter>(); };
  const Outcome out = RunOnce(s, {1, 2, 3}, Greedy(), options);
  const SpeculationStats& stats = out.result.speculation;
  ASSERT_GT(stats.verify_steps, 0);
  // Each verify step slept 20 ms in Propose (the tiny model's own forward
  // takes well under that, so without the drafter's time this fails).
  EXPECT_GE(stats.verify_seconds, 0.02 * static_cast<double>(stats.verify_steps));
}

}  // namespace
}  // namespace colibri::coordinator
