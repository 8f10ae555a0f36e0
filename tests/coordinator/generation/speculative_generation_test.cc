// Speculative decoding changes nothing but the speed: on the fixture models
// and the demo model, one generation alone on the GenerationScheduler (as
// `run` drives it) with the n-gram drafter gives the same tokens, text,
// log-probabilities, logits rows (every prompt position's too) and finish
// reason as plain decoding, greedy and seeded (with penalties), with stop
// strings, a full context and every max_tokens. Drafts must actually be verified and accepted (else
// the comparison would prove nothing): by the n-gram drafter on the demo model with a prompt that
// repeats, by an oracle drafter on the fixtures. It relies on the kernels being batch-invariant,
// which the first test checks.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/generation/generation_scheduler.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "model/sampling/sampler.h"
#include "model/speculative/drafter.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/demo_model.h"
#include "tests/support/golden.h"
#include "tests/support/recording_job.h"

namespace colibri::coordinator {
namespace {

using testing::kDemoModel;

std::vector<std::string> FixtureModels() {
  std::vector<std::string> models = testing::AllGoldenModels();
  models.push_back("gpt-oss-tiny-mxfp4");  // sliding-window layers
  return models;
}

std::string FixturePath(const std::string& name) {
  return testing::FixturesDir() + "/models/" + name + ".gguf";
}

bool BitwiseEqual(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// A model with its local experts, tokenizer (null if it has none) and pool.
struct Loaded {
  std::unique_ptr<arch::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<moe::LocalExpertBackend> backend;
};

Loaded Load(const std::string& path, ops::NumericPath numeric) {
  Loaded l;
  auto model = arch::Model::Open(path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return l;
  l.model = std::move(*model);
  auto tok = tokenizer::Tokenizer::FromGguf(l.model->file());
  if (tok.ok()) l.tokenizer = std::move(*tok);
  l.pool = std::make_unique<ThreadPool>(2);
  l.backend = std::make_unique<moe::LocalExpertBackend>(
      &l.model->experts(), l.model->config().n_expert, numeric, l.pool.get());
  return l;
}

std::unique_ptr<arch::Session> NewSession(const Loaded& l, ops::NumericPath numeric,
                                          int n_batch = 64, int n_ctx = 512) {
  arch::SessionOptions options;
  options.path = numeric;
  options.n_batch = n_batch;
  options.n_ctx = n_ctx;
  auto session = arch::Session::Create(*l.model, l.backend.get(), l.pool.get(), options);
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? std::move(*session) : nullptr;
}

TEST(SpeculativeGenerationTest, ATokenHasBitwiseTheSameLogitsAloneAndInABatch) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  for (const std::string& name : FixtureModels()) {
    for (ops::NumericPath numeric : {ops::NumericPath::kFast, ops::NumericPath::kExact}) {
      SCOPED_TRACE(name + (numeric == ops::NumericPath::kFast ? " fast" : " exact"));
      Loaded l = Load(FixturePath(name), numeric);
      ASSERT_NE(l.model, nullptr);
      const int n_vocab = l.model->config().n_vocab;
      const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7};
      const std::vector<int32_t> more = {11, 12, 13, 14, 15};
      std::vector<float> batch, one, logits;
      auto a = NewSession(l, numeric);
      ASSERT_TRUE(a->Evaluate(prompt, false, &logits).ok());
      ASSERT_TRUE(a->Evaluate(more, true, &batch).ok());
      auto b = NewSession(l, numeric);
      ASSERT_TRUE(b->Evaluate(prompt, false, &logits).ok());
      for (size_t i = 0; i < more.size(); ++i) {
        ASSERT_TRUE(b->Evaluate({&more[i], 1}, false, &one).ok());
        EXPECT_TRUE(BitwiseEqual(one.data(), batch.data() + i * n_vocab, n_vocab))
            << "position " << i;
      }
    }
  }
}

// How the scheduler of a comparison is made: its batch and context.
struct Shape {
  int n_batch = 64;
  int n_ctx = 512;
};

std::shared_ptr<testing::RecordingJob> RunOnce(const Loaded& l, const Shape& shape,
                                               const std::vector<int32_t>& prompt,
                                               const sampling::SamplingOptions& sampling,
                                               const GenerationOptions& options,
                                               const SpeculationOptions& speculation) {
  GenerationScheduler::Options scheduler;
  scheduler.batch_size = shape.n_batch;
  scheduler.ctx_size = shape.n_ctx;
  scheduler.pipeline_halves = arch::PipelineHalves::kOff;
  scheduler.speculation = speculation;
  GenerationSpec spec;
  spec.prompt_ids = prompt;
  spec.sampling = sampling;
  spec.generation = options;
  auto job =
      testing::RunAlone(scheduler, *l.model, l.tokenizer.get(), l.pool.get(), std::move(spec));
  EXPECT_TRUE(job->status.ok()) << job->status;
  return job;
}

using Outcome = testing::RecordingJob;

void ExpectSame(const Outcome& plain, const Outcome& spec) {
  testing::ExpectSameGeneration(plain, spec);
  // One time per token fed back, whether it came from a draft or not: every
  // generated token but (at most) the last.
  EXPECT_EQ(plain.result.token_seconds.size(), spec.result.token_seconds.size());
  EXPECT_LE(spec.result.token_seconds.size(), spec.tokens.size());
  EXPECT_GE(spec.result.token_seconds.size() + 1, spec.tokens.size());
  for (float t : spec.result.token_seconds) EXPECT_GE(t, 0.0f);
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
  s.top_p = 0.95f;
  s.repeat_penalty = 1.05f;
  s.presence_penalty = 0.1f;
  s.frequency_penalty = 0.05f;
  s.penalty_last_n = 16;
  s.seed = 1234;
  return s;
}

// Proposes what a reference run (plain decoding) generated next, spoiled on
// every third proposal at a varying place, so that full, partial and empty
// acceptances all occur. The fixture models have random weights and never
// repeat themselves, so this is how they get drafts worth verifying.
class OracleDrafter : public speculative::Drafter {
 public:
  OracleDrafter(std::vector<int32_t> reference, size_t prompt_size, int32_t n_vocab)
      : reference_(std::move(reference)), prompt_size_(prompt_size), n_vocab_(n_vocab) {}

  void Accept(absl::Span<const int32_t> tokens) override { seen_ += tokens.size(); }

  void Propose(int max_tokens, std::vector<int32_t>* draft) override {
    draft->clear();
    const size_t generated = seen_ - prompt_size_;
    ++calls_;
    for (int j = 0; j < max_tokens && generated + j < reference_.size(); ++j) {
      int32_t t = reference_[generated + j];
      if (calls_ % 3 == 1 && j == calls_ % max_tokens) t = (t + 1) % n_vocab_;
      draft->push_back(t);
    }
  }

 private:
  const std::vector<int32_t> reference_;
  const size_t prompt_size_;
  const int32_t n_vocab_;
  size_t seen_ = 0;
  int calls_ = 0;
};

enum class Drafting { kNgram, kOracle };

// A prompt that says the same thing twice, so the continuation tends to
// repeat it too.
std::vector<int32_t> Repeating(const std::vector<int32_t>& tokens) {
  std::vector<int32_t> out = tokens;
  out.insert(out.end(), tokens.begin(), tokens.end());
  return out;
}

// Plain vs speculative for the given sampling and options; returns the
// speculative run's counters.
SpeculationStats Compare(const Loaded& l, const Shape& shape, const std::vector<int32_t>& prompt,
                         const sampling::SamplingOptions& sampling,
                         const GenerationOptions& options, int draft_max, bool adaptive,
                         Drafting drafting = Drafting::kNgram) {
  const auto plain_job = RunOnce(l, shape, prompt, sampling, options, {});
  const Outcome& plain = *plain_job;
  SpeculationOptions speculation;
  speculation.draft = DraftKind::kNgram;
  speculation.draft_max = draft_max;
  speculation.adaptive = adaptive;
  if (drafting == Drafting::kOracle) {
    const int32_t n_vocab = l.model->config().n_vocab;
    speculation.make_drafter = [&plain, &prompt, n_vocab] {
      return std::make_unique<OracleDrafter>(plain.result.tokens, prompt.size(), n_vocab);
    };
  }
  const auto spec_job = RunOnce(l, shape, prompt, sampling, options, speculation);
  const Outcome& spec = *spec_job;
  ExpectSame(plain, spec);
  EXPECT_EQ(plain.result.speculation.verify_steps, 0);
  const SpeculationStats& s = spec.result.speculation;
  EXPECT_LE(s.accepted, s.drafted);
  EXPECT_LE(static_cast<size_t>(s.accepted), spec.result.tokens.size());
  return s;
}

TEST(SpeculativeGenerationTest, FixtureModelsGiveTheSameOutputWithVerifiedDrafts) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  for (const std::string& name : FixtureModels()) {
    SCOPED_TRACE(name);
    Loaded l = Load(FixturePath(name), ops::NumericPath::kFast);
    ASSERT_NE(l.model, nullptr);
    testing::GoldenCase c;
    std::string error;
    ASSERT_TRUE(testing::LoadGoldenCase(name == "gpt-oss-tiny-mxfp4" ? "qwen3moe-tiny-f32" : name,
                                        "english", &c, &error))
        << error;
    std::vector<int32_t> prompt = c.prompt_tokens;
    for (int32_t& t : prompt) t %= l.model->config().n_vocab;
    GenerationOptions options;
    options.max_tokens = 24;
    options.ignore_eos = true;
    options.logprobs = true;
    options.top_logprobs = 3;
    for (bool seeded : {false, true}) {
      SCOPED_TRACE(seeded ? "seeded" : "greedy");
      const sampling::SamplingOptions sampling = seeded ? Seeded() : Greedy();
      const SpeculationStats oracle =
          Compare(l, {}, prompt, sampling, options, 5, false, Drafting::kOracle);
      EXPECT_GT(oracle.verify_steps, 0);
      EXPECT_GT(oracle.accepted, 0);
      EXPECT_LT(oracle.accepted, oracle.drafted);
      Compare(l, {}, Repeating(prompt), sampling, options, 4, true);
    }
  }
}

TEST(SpeculativeGenerationTest, EveryMaxTokensAndLogitsRowStayTheSame) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  Loaded l = Load(FixturePath("qwen3moe-tiny-f32"), ops::NumericPath::kFast);
  ASSERT_NE(l.model, nullptr);
  const std::vector<int32_t> prompt = Repeating({5, 6, 7, 8, 9, 10, 11, 12});
  GenerationOptions options;
  options.ignore_eos = true;
  int64_t accepted = 0;
  // A batch of 5 takes the 16-token prompt in four chunks.
  const Shape chunked{5, 512};
  for (bool every : {false, true}) {
    options.evaluate_every_token = every;
    options.all_prompt_logits = every;
    for (int max_tokens = 0; max_tokens <= 14; ++max_tokens) {
      SCOPED_TRACE(::testing::Message() << "max_tokens " << max_tokens << " every " << every);
      options.max_tokens = max_tokens;
      accepted +=
          Compare(l, chunked, prompt, Greedy(), options, 5, false, Drafting::kOracle).accepted;
      accepted += Compare(l, {}, prompt, Seeded(), options, 3, false, Drafting::kOracle).accepted;
    }
  }
  EXPECT_GT(accepted, 0);
}

// Every prompt position's logits are reported whatever the chunks the
// prompt is evaluated in, then one row per token fed back: the same rows with
// a batch of 5 (four chunks) as with one chunk.
TEST(SpeculativeGenerationTest, EveryPromptPositionsLogitsInEveryChunking) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  Loaded l = Load(FixturePath("qwen3moe-tiny-f32"), ops::NumericPath::kFast);
  ASSERT_NE(l.model, nullptr);
  const std::vector<int32_t> prompt = Repeating({5, 6, 7, 8, 9, 10, 11, 12});
  GenerationOptions options;
  options.max_tokens = 6;
  options.ignore_eos = true;
  options.all_prompt_logits = true;
  options.evaluate_every_token = true;
  const auto whole = RunOnce(l, {64, 512}, prompt, Greedy(), options, {});
  const auto chunked = RunOnce(l, {5, 512}, prompt, Greedy(), options, {});
  const size_t n_vocab = static_cast<size_t>(l.model->config().n_vocab);
  EXPECT_EQ(whole->logits.size(), (prompt.size() + 6) * n_vocab);
  testing::ExpectSameGeneration(*whole, *chunked);
}

TEST(SpeculativeGenerationTest, AFullContextEndsAtTheSameToken) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  Loaded l = Load(FixturePath("qwen3moe-tiny-f32"), ops::NumericPath::kFast);
  ASSERT_NE(l.model, nullptr);
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11, 12};
  GenerationOptions options;
  options.max_tokens = 40;
  options.ignore_eos = true;
  const Shape small{64, /*n_ctx=*/20};
  const SpeculationStats s =
      Compare(l, small, prompt, Greedy(), options, 8, false, Drafting::kOracle);
  EXPECT_GT(s.accepted, 0);
  // 20 positions: the 8 of the prompt, 12 tokens fed back, and the last one
  // sampled when the context was full.
  const auto alone = RunOnce(l, small, prompt, Greedy(), options, {});
  EXPECT_EQ(alone->result.finish_reason, FinishReason::kContextFull);
  EXPECT_EQ(alone->result.tokens.size(), 13u);
}

TEST(SpeculativeGenerationTest, ASlidingWindowCacheThatCannotDropDecodesPlainly) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  Loaded l = Load(FixturePath("gpt-oss-tiny-mxfp4"), ops::NumericPath::kFast);
  ASSERT_NE(l.model, nullptr);
  ASSERT_GT(l.model->config().sliding_window, 0);
  const int window = l.model->config().sliding_window;
  // n_batch 1: the ring holds the window only, so no position can be dropped;
  // a long context makes the ring matter.
  auto session = NewSession(l, ops::NumericPath::kFast, /*n_batch=*/1, /*n_ctx=*/window * 4);
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->max_truncate(), 0);
  std::vector<int32_t> prompt;
  for (int i = 0; i < window + 8; ++i) prompt.push_back(3 + i % 7);
  GenerationOptions options;
  options.max_tokens = 24;
  options.ignore_eos = true;
  const SpeculationStats s =
      Compare(l, {1, window * 4}, prompt, Greedy(), options, 4, false, Drafting::kOracle);
  EXPECT_EQ(s.verify_steps, 0);
  // With room in the ring, drafts are verified and the output is the same.
  auto roomy = NewSession(l, ops::NumericPath::kFast, /*n_batch=*/16, /*n_ctx=*/window * 4);
  EXPECT_EQ(roomy->max_truncate(), 15);
  EXPECT_GT(
      Compare(l, {16, window * 4}, prompt, Greedy(), options, 4, false, Drafting::kOracle).accepted,
      0);
}

TEST(SpeculativeGenerationTest, DemoModelKeepsStopStringsAndEndOfGeneration) {
  Loaded l = Load(kDemoModel, ops::NumericPath::kFast);
  ASSERT_NE(l.model, nullptr);
  ASSERT_NE(l.tokenizer, nullptr);
  tokenizer::EncodeOptions enc;
  enc.add_special = true;
  const std::string verse =
      "And God said, Let there be light: and there was light. And God saw the light, that it "
      "was good: and God divided the light from the darkness. ";
  auto repeat = l.tokenizer->Encode(verse + verse + "And God said,", enc);
  ASSERT_TRUE(repeat.ok());
  auto free_text = l.tokenizer->Encode("The king of Babylon", enc);
  ASSERT_TRUE(free_text.ok());

  GenerationOptions options;
  options.max_tokens = 48;
  options.logprobs = true;
  options.top_logprobs = 2;
  int64_t accepted = 0;
  for (const sampling::SamplingOptions& sampling : {Greedy(), Seeded()}) {
    accepted += Compare(l, {}, *repeat, sampling, options, 8, false).accepted;
    Compare(l, {}, *repeat, sampling, options, 8, true);
    Compare(l, {}, *free_text, sampling, options, 4, false);
  }
  EXPECT_GT(accepted, 0);

  // Stop strings taken from the middle of the plain output: the speculative
  // run must stop at the same token, inside what was a draft.
  const auto plain_job = RunOnce(l, {}, *repeat, Greedy(), options, {});
  const Outcome& plain = *plain_job;
  ASSERT_GT(plain.result.text.size(), 30u);
  for (size_t at : {size_t{5}, size_t{17}, size_t{29}}) {
    GenerationOptions stop = options;
    stop.stop = {plain.result.text.substr(at, 4)};
    SCOPED_TRACE("stop '" + stop.stop[0] + "'");
    Compare(l, {}, *repeat, Greedy(), stop, 8, false);
  }

  // End of generation inside a draft: a prompt whose repeats end with the
  // end-of-generation token; the run ends there with or without drafts.
  const int32_t eos = l.tokenizer->eos_id();
  if (eos >= 0) {
    std::vector<int32_t> with_eos = *repeat;
    auto line = l.tokenizer->Encode(" and there was light.", {});
    ASSERT_TRUE(line.ok());
    for (int r = 0; r < 3; ++r) {
      with_eos.insert(with_eos.end(), line->begin(), line->end());
      with_eos.push_back(eos);
    }
    with_eos.insert(with_eos.end(), line->begin(), line->end());
    Compare(l, {}, with_eos, Greedy(), options, 8, false);
    options.evaluate_every_token = true;
    Compare(l, {}, with_eos, Greedy(), options, 8, false);
  }
}

}  // namespace
}  // namespace colibri::coordinator
