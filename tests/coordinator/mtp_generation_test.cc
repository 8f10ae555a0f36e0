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

}  // namespace
}  // namespace colibri::coordinator
