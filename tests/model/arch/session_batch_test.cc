// Batched evaluation in arch::Session (EvaluateBatch over several sequences):
// every sequence's logits are bitwise those of the same tokens run alone in a
// single-sequence session, whatever else shares the forward pass, however its
// prompt is chunked, when it joins mid-way and when its slot is reused; and
// malformed batches are refused without evaluating anything. The same holds
// when each batch is split into two pipelined halves (with one backend channel
// or two, both in flight at once), and KV slots take memory only once used.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "model/ops/matmul.h"
#include "tests/support/golden.h"
#include "tests/support/kernel_sets.h"

namespace colibri {
namespace {

constexpr int kDecodeSteps = 5;

// An ExpertBackend over the model's own experts that counts how many batches
// are in flight at once over it and its SecondChannel() (when it has one).
class CountingBackend : public moe::ExpertBackend {
 public:
  CountingBackend(const arch::Model& model, ops::NumericPath path, ThreadPool* pool,
                  bool second_channel, CountingBackend* first = nullptr)
      : inner_(&model.experts(), model.config().n_expert, path, pool),
        first_(first != nullptr ? first : this) {
    if (second_channel) {
      second_ = std::make_unique<CountingBackend>(model, path, pool, false, this);
    }
  }
  void Submit(const moe::ExpertBatch& batch, float* out) override {
    ++first_->submits_;
    ++first_->in_flight_;
    first_->most_in_flight_ = std::max(first_->most_in_flight_, first_->in_flight_);
    inner_.Submit(batch, out);
  }
  absl::Status Wait() override {
    --first_->in_flight_;
    const absl::Status status = inner_.Wait();
    if (++first_->waits_ == first_->fail_wait_) return absl::UnavailableError("wait failed");
    return status;
  }
  moe::ExpertBackend* SecondChannel() override { return second_.get(); }
  void Prefetch(int layer, absl::Span<const int32_t> experts) override {
    (void)experts;
    ++first_->hint_calls_[layer];
  }
  int submits() const { return submits_; }
  // Prefetch calls for `layer`, over both channels.
  int hint_calls(int layer) const {
    auto it = hint_calls_.find(layer);
    return it == hint_calls_.end() ? 0 : it->second;
  }
  int most_in_flight() const { return most_in_flight_; }
  int in_flight() const { return in_flight_; }
  // The n-th Wait from now (over both channels) fails; 0: none.
  void FailWait(int n) { fail_wait_ = n > 0 ? waits_ + n : 0; }

 private:
  moe::LocalExpertBackend inner_;
  CountingBackend* const first_;
  std::unique_ptr<CountingBackend> second_;
  int submits_ = 0;
  int in_flight_ = 0;
  int most_in_flight_ = 0;
  int waits_ = 0;
  int fail_wait_ = 0;
  std::map<int, int> hint_calls_;
};

testing::GoldenCase LoadCase(const std::string& model, const std::string& prompt) {
  testing::GoldenCase c;
  std::string error;
  EXPECT_TRUE(testing::LoadGoldenCase(model, prompt, &c, &error)) << error;
  return c;
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The logits a plain session gives: the prompt's (every position when
// all_prompt, else the last) and then one row per fed golden token.
std::vector<std::vector<float>> RunAlone(const arch::Model& model, const testing::GoldenCase& c,
                                         ops::NumericPath path, bool all_prompt, ThreadPool* pool,
                                         arch::KvType kv_type = arch::KvType::kF32) {
  moe::LocalExpertBackend backend(&model.experts(), model.config().n_expert, path, pool);
  arch::SessionOptions options;
  options.path = path;
  options.n_ctx = 1024;
  options.kv_type = kv_type;
  auto session = arch::Session::Create(model, &backend, pool, options);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  std::vector<std::vector<float>> rows(1);
  EXPECT_TRUE((*session)->Evaluate(c.prompt_tokens, all_prompt, &rows[0]).ok());
  for (int g = 0; g < kDecodeSteps; ++g) {
    rows.emplace_back();
    EXPECT_TRUE((*session)->Evaluate({&c.greedy_tokens[g], 1}, false, &rows.back()).ok());
  }
  return rows;
}

// One generation driven through EvaluateBatch, as a scheduler would: its
// prompt in chunks under the step's token budget, then one token a step.
struct Sequence {
  const testing::GoldenCase* c = nullptr;
  int seq = 0;
  bool all_prompt = false;
  int join_step = 0;
  int prompt_done = 0;
  int fed = 0;                       // golden tokens fed after the prompt
  std::vector<float> prompt_logits;  // accumulated over the prompt's chunks
  std::vector<float> step_logits;
  std::vector<std::vector<float>> rows;
  bool done() const { return fed == kDecodeSteps && rows.size() == kDecodeSteps + 1; }
};

void RunBatched(arch::Session& session, std::vector<Sequence>& seqs, int budget) {
  for (int step = 0; step < 1000; ++step) {
    std::vector<arch::SequenceChunk> chunks;
    std::vector<Sequence*> in_step;
    int left = budget;
    // Decoding sequences first (one token each), then prompt chunks.
    for (Sequence& s : seqs) {
      if (step < s.join_step || s.done()) continue;
      const int n_prompt = static_cast<int>(s.c->prompt_tokens.size());
      if (s.prompt_done == n_prompt && left > 0) {
        chunks.push_back({s.seq, {&s.c->greedy_tokens[s.fed], 1}, false, &s.step_logits});
        in_step.push_back(&s);
        --left;
      }
    }
    for (Sequence& s : seqs) {
      if (step < s.join_step) continue;
      const int n_prompt = static_cast<int>(s.c->prompt_tokens.size());
      if (s.prompt_done == n_prompt || left == 0) continue;
      const int take = std::min(left, n_prompt - s.prompt_done);
      chunks.push_back({s.seq, absl::MakeConstSpan(s.c->prompt_tokens).subspan(s.prompt_done, take),
                        s.all_prompt, &s.step_logits});
      in_step.push_back(&s);
      left -= take;
    }
    if (chunks.empty()) return;
    const absl::Status status = session.EvaluateBatch(chunks);
    ASSERT_TRUE(status.ok()) << status;
    for (size_t j = 0; j < chunks.size(); ++j) {
      Sequence& s = *in_step[j];
      const int n_prompt = static_cast<int>(s.c->prompt_tokens.size());
      if (s.prompt_done < n_prompt) {
        s.prompt_done += static_cast<int>(chunks[j].tokens.size());
        if (s.all_prompt) {
          s.prompt_logits.insert(s.prompt_logits.end(), s.step_logits.begin(), s.step_logits.end());
        } else {
          s.prompt_logits = s.step_logits;
        }
        if (s.prompt_done == n_prompt) s.rows.push_back(s.prompt_logits);
      } else {
        ++s.fed;
        s.rows.push_back(s.step_logits);
      }
    }
  }
  FAIL() << "the sequences did not finish";
}

// Three sequences batched as a scheduler would (joining mid-way, chunked
// prompts, reused slots) give every sequence's logits bitwise as alone; with
// `halves` pipelining set as given, on a backend with or without a second
// channel; with a KV cache of kv_type (models whose rows it cannot hold are
// skipped); with expert prediction at prefetch_depth in the batched session
// only (0: off).
void CheckBatchedLogitsAreThoseAlone(arch::PipelineHalves halves, bool second_channel,
                                     const std::vector<ops::NumericPath>& paths,
                                     arch::KvType kv_type = arch::KvType::kF32,
                                     int prefetch_depth = 0) {
  ThreadPool pool(2);
  for (const std::string& name : testing::AllGoldenModels()) {
    auto model = arch::Model::Open(testing::FixturesDir() + "/models/" + name + ".gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    if (!arch::KvCache::CheckType((*model)->config(), kv_type).ok()) continue;
    const testing::GoldenCase english = LoadCase(name, "english");
    const testing::GoldenCase code = LoadCase(name, "code_unicode");
    const testing::GoldenCase lng = LoadCase(name, "long");
    for (const testing::GoldenCase* c : {&english, &code, &lng}) {
      ASSERT_GE(c->greedy_tokens.size(), static_cast<size_t>(kDecodeSteps));
    }
    for (ops::NumericPath path : paths) {
      SCOPED_TRACE(name + (path == ops::NumericPath::kExact ? " exact" : " fast"));
      const auto english_alone = RunAlone(**model, english, path, false, &pool, kv_type);
      const auto code_alone = RunAlone(**model, code, path, false, &pool, kv_type);
      const auto long_alone = RunAlone(**model, lng, path, true, &pool, kv_type);

      CountingBackend backend(**model, path, &pool, second_channel);
      arch::SessionOptions options;
      options.path = path;
      options.n_ctx = 1024;
      options.kv_type = kv_type;
      options.n_batch = 8;  // long prompts take several steps, shared with the others
      options.n_seq = 3;
      options.pipeline_halves = halves;
      options.prefetch.depth = prefetch_depth;
      auto session = arch::Session::Create(**model, &backend, &pool, options);
      ASSERT_TRUE(session.ok()) << session.status();
      ASSERT_EQ((*session)->n_seq(), 3);
      ASSERT_EQ((*session)->n_batch(), 8);

      // The long prompt (all its logits) and english start together; code
      // joins mid-way in slot 2.
      std::vector<Sequence> seqs(3);
      seqs[0].c = &english;
      seqs[0].seq = 0;
      seqs[1].c = &lng;
      seqs[1].seq = 1;
      seqs[1].all_prompt = true;
      seqs[2].c = &code;
      seqs[2].seq = 2;
      seqs[2].join_step = 3;
      RunBatched(**session, seqs, 8);
      ASSERT_EQ(seqs[0].rows.size(), english_alone.size());
      ASSERT_EQ(seqs[1].rows.size(), long_alone.size());
      ASSERT_EQ(seqs[2].rows.size(), code_alone.size());
      for (size_t r = 0; r < english_alone.size(); ++r) {
        EXPECT_TRUE(Bitwise(seqs[0].rows[r], english_alone[r])) << "english row " << r;
        EXPECT_TRUE(Bitwise(seqs[1].rows[r], long_alone[r])) << "long row " << r;
        EXPECT_TRUE(Bitwise(seqs[2].rows[r], code_alone[r])) << "code row " << r;
      }
      EXPECT_EQ((*session)->n_past(1), static_cast<int>(lng.prompt_tokens.size()) + kDecodeSteps);

      // A freed slot is reused from position 0 while another sequence keeps
      // its cache: slot 0 runs code now, batched with slot 1's english.
      (*session)->Reset(0);
      (*session)->Reset(1);
      std::vector<Sequence> again(2);
      again[0].c = &code;
      again[0].seq = 0;
      again[1].c = &english;
      again[1].seq = 1;
      again[1].join_step = 1;
      RunBatched(**session, again, 5);
      for (size_t r = 0; r < code_alone.size(); ++r) {
        EXPECT_TRUE(Bitwise(again[0].rows[r], code_alone[r])) << "reused code row " << r;
        EXPECT_TRUE(Bitwise(again[1].rows[r], english_alone[r])) << "reused english row " << r;
      }
      // Forced on, batches of two or more sequences were split; both halves
      // were in flight at once exactly when there was a second channel.
      const int64_t split = (*session)->stats().split_batches;
      if (halves == arch::PipelineHalves::kOn) {
        EXPECT_GT(split, 0);
        EXPECT_EQ(backend.most_in_flight(), second_channel ? 2 : 1);
      } else {
        EXPECT_EQ(split, 0);
        EXPECT_EQ(backend.most_in_flight(), 1);
      }
      EXPECT_GT(backend.submits(), 0);
      if (prefetch_depth > 0) {
        // Every MoE layer of every step (of each half) was predicted, the
        // first from the rows' input.
        const arch::ModelConfig& mc = (*model)->config();
        const int64_t moe_layers = mc.n_layer - mc.n_layer_dense_lead;
        const int64_t passes = (*session)->stats().evaluate_calls + split;
        EXPECT_EQ((*session)->stats().predictor[0].layers, passes * moe_layers);
        EXPECT_EQ(backend.hint_calls(mc.n_layer_dense_lead), passes);
      }
    }
  }
}

// Batch invariance across chunking: a prompt evaluated as one chunk (its
// attention runs in blocks of rows of one head, Session::AttentionPrompt)
// gives every position's logits bitwise as the same tokens fed one at a time
// (blocks of the query heads sharing a KV head, AttentionGrouped, or
// AttendOne per head on sliding-window layers), on every golden model
// (including sliding-window and sink layers), with both KV cache types.
TEST(SessionBatchTest, PromptLogitsDoNotDependOnChunking) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  ThreadPool pool(2);
  // Five threads split decode's groups of query heads per KV head into
  // smaller blocks (Session::AttentionGrouped), so that each thread has one.
  ThreadPool five(5);
  for (const std::string& name : testing::AllGoldenModels()) {
    const testing::GoldenCase c = LoadCase(name, "long");
    auto model = arch::Model::Open(c.model_path);
    ASSERT_TRUE(model.ok()) << model.status();
    const int64_t n_vocab = (*model)->config().n_vocab;
    const int n = static_cast<int>(c.prompt_tokens.size());
    ASSERT_GT(n, 20) << name;
    for (arch::KvType kv : {arch::KvType::kF32, arch::KvType::kF16, arch::KvType::kQ8_0}) {
      SCOPED_TRACE(std::string("KV cache ") + arch::KvTypeName(kv));
      if (!arch::KvCache::CheckType((*model)->config(), kv).ok()) continue;  // MLA rows of 80, 112
      const ops::NumericPath path = ops::NumericPath::kFast;
      std::vector<std::vector<float>> by_chunk;
      for (int chunk : {n, 1, -1}) {
        ThreadPool* threads = chunk < 0 ? &five : &pool;
        chunk = std::max(chunk, 1);
        moe::LocalExpertBackend backend(&(*model)->experts(), (*model)->config().n_expert, path,
                                        threads);
        arch::SessionOptions options;
        options.path = path;
        options.n_ctx = 1024;
        options.kv_type = kv;
        auto session = arch::Session::Create(**model, &backend, threads, options);
        ASSERT_TRUE(session.ok()) << session.status();
        std::vector<float> all, logits;
        for (int first = 0; first < n; first += chunk) {
          const int len = std::min(chunk, n - first);
          ASSERT_TRUE((*session)
                          ->Evaluate({c.prompt_tokens.data() + first, static_cast<size_t>(len)},
                                     /*all_logits=*/true, &logits)
                          .ok());
          all.insert(all.end(), logits.begin(), logits.end());
        }
        ASSERT_EQ(all.size(), static_cast<size_t>(n * n_vocab));
        by_chunk.push_back(std::move(all));
      }
      for (size_t k = 1; k < by_chunk.size(); ++k) {
        for (int pos = 0; pos < n; ++pos) {
          ASSERT_EQ(std::memcmp(by_chunk[0].data() + pos * n_vocab,
                                by_chunk[k].data() + pos * n_vocab, n_vocab * sizeof(float)),
                    0)
              << name << (path == ops::NumericPath::kFast ? " fast" : " exact")
              << ": one chunk vs one token at a time differ at position " << pos;
        }
      }
    }
  }
}

// For every golden model, a session with a KV cache of `type` against one
// with floats: slots of bytes_per_128 / 128 of the float slot's, logits that
// differ (the cache is used), and four decode steps with finite logits. A
// model whose rows the type cannot hold is refused at Create (InvalidArgument
// naming the dimension). Counts the models compared, refused, and with MLA
// among those compared.
struct KvComparison {
  int compared = 0, refused = 0, mla = 0;
};
KvComparison CompareWithTheFloatCache(arch::KvType type, int bytes_per_128) {
  KvComparison count;
  ThreadPool pool(2);
  for (const std::string& name : testing::AllGoldenModels()) {
    SCOPED_TRACE(name);
    const testing::GoldenCase c = LoadCase(name, "long");
    auto model = arch::Model::Open(c.model_path);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) continue;
    const arch::ModelConfig& config = (*model)->config();
    moe::LocalExpertBackend backend(&(*model)->experts(), config.n_expert, ops::NumericPath::kFast,
                                    &pool);
    arch::SessionOptions options;
    options.n_ctx = 1024;
    options.kv_type = type;
    if (!arch::KvCache::CheckType(config, type).ok()) {
      auto session = arch::Session::Create(**model, &backend, &pool, options);
      EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(session.status().message().find(" is "), std::string::npos) << session.status();
      ++count.refused;
      continue;
    }
    std::vector<std::vector<float>> logits(2);
    int64_t slot_bytes[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      options.kv_type = k == 0 ? arch::KvType::kF32 : type;
      auto session = arch::Session::Create(**model, &backend, &pool, options);
      EXPECT_TRUE(session.ok()) << session.status();
      if (!session.ok()) return count;
      EXPECT_TRUE((*session)->Evaluate(c.prompt_tokens, /*all_logits=*/true, &logits[k]).ok());
      std::vector<float> step;
      for (int g = 0; g < 4; ++g) {
        EXPECT_TRUE((*session)->Evaluate({&c.greedy_tokens[g], 1}, false, &step).ok());
        for (float x : step) EXPECT_TRUE(std::isfinite(x));
      }
      slot_bytes[k] = (*session)->kv_bytes_allocated();
    }
    EXPECT_EQ(slot_bytes[1] * 128, slot_bytes[0] * bytes_per_128);
    // How close: decode_golden_test and colibri_kv_type_bench.
    EXPECT_FALSE(logits[0] == logits[1]) << "the cache changed no logit: is it used?";
    ++count.compared;
    count.mla += config.attention == arch::AttentionKind::kMla;
  }
  return count;
}

// A KV cache of half floats: slots of half the bytes for every family
// (deepseek2's latent cache too).
TEST(SessionBatchTest, AHalfFloatKvCacheHalvesTheSlots) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  const KvComparison count = CompareWithTheFloatCache(arch::KvType::kF16, 64);
  EXPECT_GT(count.compared, 0);
  EXPECT_EQ(count.refused, 0);
  EXPECT_GT(count.mla, 0) << "no latent-attention model among the golden models";
}

// A q8_0 KV cache: 34 bytes per 128 of floats; the deepseek2 fixtures, whose
// latent rows (80, 112) are not multiples of 32, are refused.
TEST(SessionBatchTest, AQ8_0CacheTakes34Of128BytesAndDecodes) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  const KvComparison count = CompareWithTheFloatCache(arch::KvType::kQ8_0, 34);
  EXPECT_GE(count.compared, 4);
  EXPECT_GE(count.refused, 1);
}

// Every kernel set this machine runs (portable, AVX2, AVX-512) gives a prompt
// and the tokens decoded after it bitwise the same logits on every golden
// model, with either KV cache type: the prompt and decode tiles, the
// activation quantization and the attention kernels all agree with the
// portable ones to the bit.
TEST(SessionBatchTest, EveryKernelSetGivesBitwiseTheSameLogits) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  std::vector<ops::KernelSetChoice> sets;
  for (ops::KernelSetChoice set : ops::kEveryKernelSet) {
    if (ops::ForceKernelSetForTesting(set)) sets.push_back(set);
  }
  // Back to the automatic choice however the test ends.
  struct AutoKernelSet {
    ~AutoKernelSet() { ops::ForceKernelSetForTesting(ops::KernelSetChoice::kAuto); }
  } restore;
  if (sets.size() < 2) GTEST_SKIP() << "only one kernel set runs here";
  ThreadPool pool(2);
  for (const std::string& name : testing::AllGoldenModels()) {
    const testing::GoldenCase c = LoadCase(name, "long");
    auto model = arch::Model::Open(c.model_path);
    ASSERT_TRUE(model.ok()) << model.status();
    for (arch::KvType kv : {arch::KvType::kF32, arch::KvType::kF16, arch::KvType::kQ8_0}) {
      if (!arch::KvCache::CheckType((*model)->config(), kv).ok()) continue;
      std::vector<float> first;
      for (ops::KernelSetChoice set : sets) {
        SCOPED_TRACE(name + ", KV " + arch::KvTypeName(kv) + ", kernel set " +
                     testing::KernelSetChoiceName(set));
        ASSERT_TRUE(ops::ForceKernelSetForTesting(set));
        moe::LocalExpertBackend backend(&(*model)->experts(), (*model)->config().n_expert,
                                        ops::NumericPath::kFast, &pool);
        arch::SessionOptions options;
        options.path = ops::NumericPath::kFast;
        options.n_ctx = 1024;
        options.kv_type = kv;
        auto session = arch::Session::Create(**model, &backend, &pool, options);
        ASSERT_TRUE(session.ok()) << session.status();
        // The prompt (the prompt tiles), then tokens one at a time (decode's).
        std::vector<float> logits, step;
        ASSERT_TRUE((*session)->Evaluate(c.prompt_tokens, /*all_logits=*/true, &logits).ok());
        for (int g = 0; g < 4; ++g) {
          ASSERT_TRUE((*session)->Evaluate({&c.greedy_tokens[g], 1}, false, &step).ok());
          logits.insert(logits.end(), step.begin(), step.end());
        }
        if (first.empty()) {
          first = std::move(logits);
        } else {
          EXPECT_TRUE(Bitwise(first, logits)) << "differs from the portable kernels' logits";
        }
      }
    }
  }
}

TEST(SessionBatchTest, LogitsAreBitwiseThoseOfTheSequenceAlone) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  // kAuto does not split with 3 sequences (fewer than kMinPipelineSequences).
  CheckBatchedLogitsAreThoseAlone(arch::PipelineHalves::kAuto, /*second_channel=*/true,
                                  {ops::NumericPath::kExact, ops::NumericPath::kFast});
}

TEST(SessionBatchTest, LogitsAreBitwiseThoseOfTheSequenceAloneWithAQ8_0Cache) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  CheckBatchedLogitsAreThoseAlone(arch::PipelineHalves::kAuto, /*second_channel=*/true,
                                  {ops::NumericPath::kFast}, arch::KvType::kQ8_0);
}

TEST(SessionBatchTest, TwoPipelinedHalvesGiveTheSameLogits) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  // One path each for these two (CI time): the split is the same on both.
  CheckBatchedLogitsAreThoseAlone(arch::PipelineHalves::kOn, /*second_channel=*/true,
                                  {ops::NumericPath::kFast});
}

TEST(SessionBatchTest, TwoPipelinedHalvesWithExpertPredictionGiveTheSameLogits) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  CheckBatchedLogitsAreThoseAlone(arch::PipelineHalves::kOn, /*second_channel=*/true,
                                  {ops::NumericPath::kFast}, arch::KvType::kF32,
                                  /*prefetch_depth=*/1);
}

TEST(SessionBatchTest, TwoPipelinedHalvesOnOneChannelGiveTheSameLogits) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  CheckBatchedLogitsAreThoseAlone(arch::PipelineHalves::kOn, /*second_channel=*/false,
                                  {ops::NumericPath::kExact});
}

// One sequence's prompt alone in a step, forced on: the chunk is split at its
// middle row, the later positions attending to the earlier ones' keys and
// values from the other half; every position's logits are bitwise those of
// the plain session (every family: sliding windows, MLA, dense layers).
TEST(SessionBatchTest, APromptChunkSplitAcrossTheHalvesGivesTheSameLogits) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  ThreadPool pool(2);
  for (const std::string& name : testing::AllGoldenModels()) {
    SCOPED_TRACE(name);
    auto model = arch::Model::Open(testing::FixturesDir() + "/models/" + name + ".gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    const testing::GoldenCase lng = LoadCase(name, "long");
    const std::vector<std::vector<float>> alone =
        RunAlone(**model, lng, ops::NumericPath::kFast, /*all_prompt=*/true, &pool);
    ASSERT_FALSE(alone.empty());

    CountingBackend backend(**model, ops::NumericPath::kFast, &pool, /*second_channel=*/true);
    arch::SessionOptions options;
    options.n_ctx = 1024;
    options.pipeline_halves = arch::PipelineHalves::kOn;
    auto session = arch::Session::Create(**model, &backend, &pool, options);
    ASSERT_TRUE(session.ok()) << session.status();
    std::vector<float> logits;
    const arch::SequenceChunk prompt = {0, lng.prompt_tokens, /*all_logits=*/true, &logits};
    ASSERT_TRUE((*session)->EvaluateBatch({&prompt, 1}).ok());
    EXPECT_EQ((*session)->stats().split_batches, 1);
    EXPECT_EQ(backend.most_in_flight(), 2);
    EXPECT_TRUE(Bitwise(logits, alone[0])) << "prompt logits differ";
    // Decoding on from the split prompt's cache gives the same rows too.
    for (int g = 0; g < kDecodeSteps; ++g) {
      const arch::SequenceChunk next = {0, {&lng.greedy_tokens[g], 1}, false, &logits};
      ASSERT_TRUE((*session)->EvaluateBatch({&next, 1}).ok());
      EXPECT_TRUE(Bitwise(logits, alone[g + 1])) << "decode row " << g;
    }
  }
}

// Speculative verification in a batch: chunks of a token and its drafts ask
// for every position's logits, beside a prompt chunk that asks for none and
// one that asks for its last; each row is bitwise the logits of the same
// position alone, and a rejected draft truncated from the cache leaves no
// trace.
TEST(SessionBatchTest, DraftChunksGetEveryPositionsLogitsAsAlone) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  ThreadPool pool(2);
  for (const std::string& name : testing::AllGoldenModels()) {
    SCOPED_TRACE(name);
    auto model = arch::Model::Open(testing::FixturesDir() + "/models/" + name + ".gguf");
    ASSERT_TRUE(model.ok()) << model.status();
    const int n_vocab = (*model)->config().n_vocab;
    const testing::GoldenCase english = LoadCase(name, "english");
    const testing::GoldenCase code = LoadCase(name, "code_unicode");
    const ops::NumericPath path = ops::NumericPath::kFast;
    const auto english_alone = RunAlone(**model, english, path, false, &pool);
    const auto code_alone = RunAlone(**model, code, path, false, &pool);
    ASSERT_EQ(english_alone.size(), static_cast<size_t>(kDecodeSteps + 1));
    ASSERT_EQ(code_alone.size(), static_cast<size_t>(kDecodeSteps + 1));

    moe::LocalExpertBackend backend(&(*model)->experts(), (*model)->config().n_expert, path, &pool);
    arch::SessionOptions options;
    options.path = path;
    options.n_ctx = 1024;
    options.n_batch = 256;
    options.n_seq = 2;
    auto session = arch::Session::Create(**model, &backend, &pool, options);
    ASSERT_TRUE(session.ok()) << session.status();
    arch::Session& s = **session;
    const std::vector<int32_t>& e = english.greedy_tokens;
    const std::vector<int32_t>& c = code.greedy_tokens;
    const int n_english = static_cast<int>(english.prompt_tokens.size());
    const int n_code = static_cast<int>(code.prompt_tokens.size());
    ASSERT_GE(n_code, 2);

    // English's prompt (its last logits); code's prompt but its last token
    // (no logits: the vector stays untouched).
    std::vector<float> english_logits, code_logits = {-1.0f};
    const auto code_head = absl::MakeConstSpan(code.prompt_tokens).first(n_code - 1);
    ASSERT_TRUE(s.EvaluateBatch({{0, english.prompt_tokens, false, &english_logits},
                                 {1, code_head, false, nullptr}})
                    .ok());
    EXPECT_TRUE(Bitwise(english_logits, english_alone[0]));
    EXPECT_EQ(code_logits, std::vector<float>{-1.0f});

    // English verifies two right drafts and a wrong one; code ends its
    // prompt (last-token logits only).
    const int32_t wrong = (e[2] + 1) % n_vocab;
    const std::vector<int32_t> verify = {e[0], e[1], wrong};
    ASSERT_TRUE(s.EvaluateBatch({{0, verify, true, &english_logits},
                                 {1, {&code.prompt_tokens[n_code - 1], 1}, false, &code_logits}})
                    .ok());
    ASSERT_EQ(english_logits.size(), 3u * n_vocab);
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> row(english_logits.begin() + r * n_vocab,
                                   english_logits.begin() + (r + 1) * n_vocab);
      EXPECT_TRUE(Bitwise(row, english_alone[r + 1])) << "english draft row " << r;
    }
    EXPECT_TRUE(Bitwise(code_logits, code_alone[0]));
    s.Truncate(0, n_english + 2);  // the wrong draft goes
    ASSERT_EQ(s.n_past(0), n_english + 2);

    // Both verify drafts in the same step.
    const std::vector<int32_t> english_next = {e[2], e[3]}, code_next = {c[0], c[1], c[2]};
    ASSERT_TRUE(s.EvaluateBatch(
                     {{1, code_next, true, &code_logits}, {0, english_next, true, &english_logits}})
                    .ok());
    ASSERT_EQ(english_logits.size(), 2u * n_vocab);
    ASSERT_EQ(code_logits.size(), 3u * n_vocab);
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> row(english_logits.begin() + r * n_vocab,
                                   english_logits.begin() + (r + 1) * n_vocab);
      EXPECT_TRUE(Bitwise(row, english_alone[r + 3])) << "english row " << r + 3;
    }
    for (int r = 0; r < 3; ++r) {
      const std::vector<float> row(code_logits.begin() + r * n_vocab,
                                   code_logits.begin() + (r + 1) * n_vocab);
      EXPECT_TRUE(Bitwise(row, code_alone[r + 1])) << "code row " << r + 1;
    }
  }
}

TEST(SessionBatchTest, MalformedBatchesAreRefusedAndEvaluateNothing) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  auto model = arch::Model::Open(testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  moe::LocalExpertBackend backend(&(*model)->experts(), (*model)->config().n_expert,
                                  ops::NumericPath::kFast, nullptr);
  arch::SessionOptions options;
  options.n_ctx = 16;
  options.n_batch = 4;
  options.n_seq = 0;
  EXPECT_EQ(arch::Session::Create(**model, &backend, nullptr, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.n_seq = 2;
  auto session = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session.ok()) << session.status();
  arch::Session& s = **session;

  const std::vector<int32_t> two = {1, 2}, three = {1, 2, 3}, bad = {1, -1};
  std::vector<float> logits;
  EXPECT_EQ(s.EvaluateBatch({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.EvaluateBatch({{2, two, false, &logits}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.EvaluateBatch({{-1, two, false, &logits}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.EvaluateBatch({{0, two, false, nullptr}, {0, two, false, nullptr}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.EvaluateBatch({{0, two, false, nullptr}, {1, three, false, nullptr}}).code(),
            absl::StatusCode::kInvalidArgument);  // 5 tokens > n_batch 4
  EXPECT_EQ(s.EvaluateBatch({{0, {}, false, nullptr}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.EvaluateBatch({{1, bad, false, nullptr}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.n_past(0), 0);
  EXPECT_EQ(s.n_past(1), 0);

  // Sequence 1 fills its context; sequence 0 is unaffected.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(s.EvaluateBatch({{1, {1, 2, 3, 4}, false, nullptr}}).ok());
  }
  EXPECT_EQ(s.n_past(1), 16);
  const absl::Status full = s.EvaluateBatch({{0, two, false, &logits}, {1, {5}, false, nullptr}});
  EXPECT_EQ(full.code(), absl::StatusCode::kOutOfRange) << full;
  EXPECT_NE(full.message().find("sequence 1"), std::string::npos) << full;
  EXPECT_EQ(s.n_past(0), 0);
  ASSERT_TRUE(s.EvaluateBatch({{0, two, false, &logits}}).ok());
  EXPECT_EQ(s.n_past(0), 2);
  EXPECT_EQ(logits.size(), static_cast<size_t>((*model)->config().n_vocab));
}

// A backend failure in the middle of a split batch: the error is returned
// once both halves' batches completed, nothing is evaluated, and the
// sequences go on as if the call had not been made.
TEST(SessionBatchTest, AFailureInOneHalfEvaluatesNothing) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  auto model = arch::Model::Open(testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> a = {1, 2, 3}, b = {4, 5};
  std::vector<float> a_first, b_first, a_again, b_again;
  {
    CountingBackend backend(**model, ops::NumericPath::kFast, nullptr, true);
    arch::SessionOptions options;
    options.n_ctx = 64;
    options.n_seq = 2;
    options.pipeline_halves = arch::PipelineHalves::kOff;
    auto session = arch::Session::Create(**model, &backend, nullptr, options);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->EvaluateBatch({{0, a, false, &a_first}, {1, b, false, &b_first}}).ok());
  }
  for (int fail : {1, 2, 3}) {
    SCOPED_TRACE(fail);
    CountingBackend backend(**model, ops::NumericPath::kFast, nullptr, true);
    arch::SessionOptions options;
    options.n_ctx = 64;
    options.n_seq = 2;
    options.pipeline_halves = arch::PipelineHalves::kOn;
    auto session = arch::Session::Create(**model, &backend, nullptr, options);
    ASSERT_TRUE(session.ok()) << session.status();
    backend.FailWait(fail);
    const absl::Status status =
        (*session)->EvaluateBatch({{0, a, false, &a_again}, {1, b, false, &b_again}});
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_EQ(backend.in_flight(), 0);
    EXPECT_EQ(backend.most_in_flight(), 2);
    EXPECT_EQ((*session)->n_past(0), 0);
    EXPECT_EQ((*session)->n_past(1), 0);
    backend.FailWait(0);
    ASSERT_TRUE((*session)->EvaluateBatch({{0, a, false, &a_again}, {1, b, false, &b_again}}).ok());
    EXPECT_TRUE(Bitwise(a_again, a_first));
    EXPECT_TRUE(Bitwise(b_again, b_first));
    EXPECT_EQ((*session)->stats().split_batches, 1);
  }
}

// Resident set of this process, in bytes (0 when /proc is not there).
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(SessionBatchTest, KvSlotsTakeMemoryOnlyOnceUsed) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  auto model = arch::Model::Open(testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const arch::ModelConfig& c = (*model)->config();
  ASSERT_EQ(c.sliding_window, 0);
  moe::LocalExpertBackend backend(&(*model)->experts(), c.n_expert, ops::NumericPath::kFast,
                                  nullptr);
  arch::SessionOptions options;
  options.n_ctx = 0;  // the default: min(context_length, 4096)
  options.n_batch = 16;
  options.n_seq = 64;
  const int n_ctx = arch::Session::ContextSize(c, 0);
  const int64_t slot_bytes =
      static_cast<int64_t>(c.n_layer) * n_ctx * (c.kv_dim() + c.v_dim()) * sizeof(float);

  // 64 slots allocated at creation would be resident now; the rest of the
  // session (mostly the [n_seq][n_vocab] logits) is about a quarter of that.
  const int64_t rss_before = ResidentBytes();
  auto session = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session.ok()) << session.status();
  arch::Session& s = **session;
  ASSERT_EQ(s.n_ctx(), n_ctx);
  EXPECT_EQ(s.kv_bytes_allocated(), 0);
  if (rss_before > 0) {
    EXPECT_LT(ResidentBytes() - rss_before, 64 * slot_bytes / 2);
  }

  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7};
  std::vector<float> first, again, other;
  ASSERT_TRUE(s.EvaluateBatch({{5, prompt, false, &first}}).ok());
  EXPECT_EQ(s.kv_bytes_allocated(), slot_bytes);
  ASSERT_TRUE(s.EvaluateBatch({{9, prompt, false, &other}, {5, {8}, false, nullptr}}).ok());
  EXPECT_EQ(s.kv_bytes_allocated(), 2 * slot_bytes);
  s.Reset(9);  // kept for reuse
  EXPECT_EQ(s.kv_bytes_allocated(), 2 * slot_bytes);
  s.Release(5);
  s.Release(63);  // never used: nothing to free
  EXPECT_EQ(s.n_past(5), 0);
  EXPECT_EQ(s.kv_bytes_allocated(), slot_bytes);

  // A released slot is allocated again, and gives the same logits.
  ASSERT_TRUE(s.EvaluateBatch({{5, prompt, false, &again}}).ok());
  EXPECT_EQ(s.kv_bytes_allocated(), 2 * slot_bytes);
  EXPECT_TRUE(Bitwise(first, again));
  EXPECT_TRUE(Bitwise(first, other));
  s.Release(5);
  s.Release(9);
  EXPECT_EQ(s.kv_bytes_allocated(), 0);
}

TEST(SessionBatchTest, KvRowsAreCommittedAheadInChunksUntilReleased) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  auto model = arch::Model::Open(testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const arch::ModelConfig& c = (*model)->config();
  moe::LocalExpertBackend backend(&(*model)->experts(), c.n_expert, ops::NumericPath::kFast,
                                  nullptr);
  arch::SessionOptions options;
  options.n_ctx = 200;
  options.n_batch = 64;
  options.n_seq = 2;
  auto session = arch::Session::Create(**model, &backend, nullptr, options);
  ASSERT_TRUE(session.ok()) << session.status();
  arch::Session& s = **session;
  EXPECT_EQ(s.kv_positions_committed(1), 0);

  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + i);
  ASSERT_TRUE(s.EvaluateBatch({{1, prompt, false, nullptr}}).ok());
  if (s.kv_positions_committed(1) == 0) GTEST_SKIP() << "the kernel has no MADV_POPULATE_WRITE";
  EXPECT_EQ(s.kv_positions_committed(1), 40 + 64);
  EXPECT_EQ(s.kv_positions_committed(0), 0);
  // Decode steps inside the committed rows commit nothing more.
  for (int32_t t = 0; t < 64; ++t) {
    ASSERT_TRUE(s.EvaluateBatch({{1, {t + 3}, false, nullptr}}).ok());
  }
  EXPECT_EQ(s.kv_positions_committed(1), 40 + 64);
  // The first past them commits the next 64 positions, never past n_ctx.
  ASSERT_TRUE(s.EvaluateBatch({{1, {7}, false, nullptr}}).ok());
  EXPECT_EQ(s.kv_positions_committed(1), 105 + 64);
  std::vector<int32_t> chunk(64, 9);
  ASSERT_TRUE(s.EvaluateBatch({{1, chunk, false, nullptr}}).ok());
  EXPECT_EQ(s.kv_positions_committed(1), 169);  // every row written was committed
  ASSERT_TRUE(s.EvaluateBatch({{1, {5}, false, nullptr}}).ok());
  EXPECT_EQ(s.kv_positions_committed(1), 200);
  // Reset keeps the slot and its committed rows; Release frees both.
  s.Reset(1);
  EXPECT_EQ(s.kv_positions_committed(1), 200);
  s.Release(1);
  EXPECT_EQ(s.kv_positions_committed(1), 0);
  ASSERT_TRUE(s.EvaluateBatch({{1, {1, 2, 3}, false, nullptr}}).ok());
  EXPECT_EQ(s.kv_positions_committed(1), 3 + 64);
}

}  // namespace
}  // namespace colibri
