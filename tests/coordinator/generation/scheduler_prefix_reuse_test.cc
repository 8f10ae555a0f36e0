// Prefix reuse inside GenerationScheduler (serve's core), on the demo model
// without gRPC: a generation whose prompt starts with what an earlier one
// evaluated (its prompt and its answer) takes those KV rows from the prefix
// cache and gives exactly the tokens, log-probabilities and logits it gives
// without reuse: one after another, several at once sharing a prefix, with
// speculative decoding, with half-float KV, under a budget that evicts, and
// never across numeric paths; and with the disk tier, from the disk after a
// restart (a new scheduler on the same directory), where damaged or foreign
// files are a clean miss.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/serve_metrics.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/speculative/drafter.h"
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

constexpr int kBlock = 8;

// Drafts that are always wrong (a control token the demo model does not
// pick after text): the rows after a chunk's first are rejected drafts.
class WrongDrafter : public speculative::Drafter {
 public:
  void Accept(absl::Span<const int32_t>) override {}
  void Propose(int max_tokens, std::vector<int32_t>* draft) override {
    draft->assign(max_tokens, 3);
  }
};

class SchedulerPrefixReuseTest : public testing::DemoModelTest {
 protected:
  // A scheduler whose prefix cache holds `cache_bytes` (0: no reuse).
  std::unique_ptr<GenerationScheduler> NewScheduler(int64_t cache_bytes, int sessions = 1,
                                                    ServeMetrics* metrics = nullptr,
                                                    DraftKind draft = DraftKind::kNone,
                                                    bool wrong_drafts = false,
                                                    arch::KvType kv_type = arch::KvType::kF32) {
    GenerationScheduler::Options options;
    options.kv_type = kv_type;
    options.sessions = sessions;
    options.batch_size = 16;  // prompts take several chunks
    options.prefix_cache_bytes = cache_bytes;
    options.prefix_block_tokens = kBlock;
    options.metrics = metrics;
    if (cache_bytes > 0) options.prefix_cache_dir = disk_dir_;
    options.log = &log_;
    options.speculation.draft = draft;
    options.speculation.draft_max = 6;
    options.speculation.adaptive = false;  // drafts even when they keep failing
    if (wrong_drafts) {
      options.speculation.make_drafter = [] { return std::make_unique<WrongDrafter>(); };
    }
    auto s = GenerationScheduler::Create(options, *model_, tokenizer_.get(), nullptr, pool_.get());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::vector<int32_t> Encode(const std::string& text, bool add_special = true) {
    tokenizer::EncodeOptions enc;
    enc.add_special = add_special;
    auto ids = tokenizer_->Encode(text, enc);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  GenerationSpec Spec(std::vector<int32_t> prompt, int max_tokens = 16) {
    GenerationSpec spec;
    spec.prompt_ids = std::move(prompt);
    spec.sampling.temperature = 0;
    spec.generation.max_tokens = max_tokens;
    spec.generation.logprobs = true;
    spec.generation.top_logprobs = 2;
    return spec;
  }

  static std::shared_ptr<RecordingJob> Run(GenerationScheduler& scheduler, GenerationSpec spec) {
    return RunTogether(scheduler, {std::move(spec)})[0];
  }

  // The spec on a scheduler without reuse.
  std::shared_ptr<RecordingJob> Reference(const GenerationSpec& spec,
                                          arch::KvType kv_type = arch::KvType::kF32) {
    std::unique_ptr<GenerationScheduler> plain =
        NewScheduler(0, 1, nullptr, DraftKind::kNone, false, kv_type);
    return Run(*plain, spec);
  }

  // Sets the disk tier's directory of every later NewScheduler, empty.
  void UseDisk() {
    disk_dir_ = ::testing::TempDir() + "/scheduler_prefix_reuse_test-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(disk_dir_);
  }

  // Runs turn 1 on a scheduler (kv_type) with the disk tier, and returns it
  // once that scheduler is gone (its writes done).
  std::shared_ptr<RecordingJob> Turn1BeforeARestart(arch::KvType kv_type = arch::KvType::kF32) {
    UseDisk();
    std::unique_ptr<GenerationScheduler> s =
        NewScheduler(64 << 20, 1, nullptr, DraftKind::kNone, false, kv_type);
    if (s == nullptr) return nullptr;
    auto first = Run(*s, Spec(Turn1()));
    EXPECT_TRUE(first->status.ok()) << first->status;
    EXPECT_NE(s->prefix_disk(), nullptr);
    return first;
  }

  // Turn 2 after turn 1 on a new scheduler (kv_type, into *s) on the same
  // directory: expects what a scheduler without reuse gives and returns it.
  std::shared_ptr<RecordingJob> Turn2AfterARestart(const RecordingJob& first, arch::KvType kv_type,
                                                   std::unique_ptr<GenerationScheduler>* s) {
    *s = NewScheduler(64 << 20, 1, nullptr, DraftKind::kNone, false, kv_type);
    if (*s == nullptr) return nullptr;
    const GenerationSpec turn2 = Spec(Turn2(first));
    auto second = Run(**s, turn2);
    testing::ExpectSameGeneration(*Reference(turn2, kv_type), *second);
    return second;
  }

  // The block files in the disk tier's directory.
  std::vector<std::string> DiskFiles() {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(disk_dir_)) {
      if (e.path().extension() == ".kvb") files.push_back(e.path().string());
    }
    return files;
  }

  // Turn 1's prompt, ~40 tokens.
  std::vector<int32_t> Turn1() {
    return Encode(
        "In the beginning God created the heaven and the earth. And the earth was without "
        "form, and void; and darkness was upon the face of the deep.");
  }
  // Turn 2's prompt: turn 1's prompt, its answer, then more text.
  std::vector<int32_t> Turn2(const RecordingJob& turn1) {
    std::vector<int32_t> p = Turn1();
    p.insert(p.end(), turn1.result.tokens.begin(), turn1.result.tokens.end());
    const std::vector<int32_t> tail = Encode(" And God said, Let there be light:", false);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  }

  std::string disk_dir_;  // the disk tier's, "" for none
  std::ostringstream log_;
};

TEST_F(SchedulerPrefixReuseTest, ASecondTurnReusesThePromptAndAnswerBitwise) {
  ServeMetrics metrics;
  std::unique_ptr<GenerationScheduler> s = NewScheduler(64 << 20, 1, &metrics);
  ASSERT_NE(s, nullptr);
  metrics.SetSources(s.get(), nullptr);
  const GenerationSpec turn1 = Spec(Turn1());
  const auto first = Run(*s, turn1);
  ASSERT_TRUE(first->status.ok()) << first->status;
  EXPECT_EQ(first->outcome.cached_prompt_tokens, 0);
  testing::ExpectSameGeneration(*Reference(turn1), *first);
  EXPECT_GT(s->prefix_cache().blocks, 0);

  const GenerationSpec turn2 = Spec(Turn2(*first));
  const auto second = Run(*s, turn2);
  testing::ExpectSameGeneration(*Reference(turn2), *second);
  // Every whole block of prompt and answer but the last answer token
  // (sampled, never evaluated).
  const int held = static_cast<int>(turn1.prompt_ids.size() + first->result.tokens.size()) - 1;
  EXPECT_EQ(second->outcome.cached_prompt_tokens, held / kBlock * kBlock);
  EXPECT_GE(second->outcome.cached_prompt_tokens, 0.9 * turn1.prompt_ids.size());
  EXPECT_EQ(second->outcome.prompt_tokens, static_cast<int>(turn2.prompt_ids.size()));

  // The same prompt again: all of it but the block of its last token.
  const auto again = Run(*s, turn2);
  testing::ExpectSameGeneration(*second, *again);
  const int n = static_cast<int>(turn2.prompt_ids.size());
  EXPECT_EQ(again->outcome.cached_prompt_tokens, (n - 1) / kBlock * kBlock);

  const std::string scraped = metrics.Render();
  EXPECT_EQ(testing::MetricSample(scraped, "colibri_prompt_tokens_cached_total"),
            second->outcome.cached_prompt_tokens + again->outcome.cached_prompt_tokens);
  EXPECT_GT(testing::MetricSample(scraped, "colibri_prefix_cache_bytes"), 0);
}

TEST_F(SchedulerPrefixReuseTest, ConcurrentGenerationsSharingAPrefixGiveWhatEachGivesAlone) {
  std::unique_ptr<GenerationScheduler> s = NewScheduler(64 << 20, 3);
  ASSERT_NE(s, nullptr);
  const auto first = Run(*s, Spec(Turn1()));
  ASSERT_TRUE(first->status.ok());
  std::vector<GenerationSpec> specs;
  for (const char* tail : {" And God said,", " And the Spirit of God moved", " Then"}) {
    std::vector<int32_t> p = Turn1();
    const std::vector<int32_t> more = Encode(tail, false);
    p.insert(p.end(), more.begin(), more.end());
    specs.push_back(Spec(p, 12));
  }
  specs[1].sampling.temperature = 0.8f;
  specs[1].sampling.seed = 77;
  specs.push_back(specs[0]);  // two identical requests at once
  const auto together = RunTogether(*s, specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "generation " << i);
    testing::ExpectSameGeneration(*Reference(specs[i]), *together[i]);
    EXPECT_GE(together[i]->outcome.cached_prompt_tokens,
              static_cast<int>(Turn1().size()) / kBlock * kBlock);
  }
}

TEST_F(SchedulerPrefixReuseTest, SpeculativeDecodingCachesOnlyAcceptedRows) {
  // Generations that end inside a chunk of drafts (at a stop string) leave
  // rows of drafts past their last token: those rows must not be cached as
  // the answer's. n-gram drafts on a repetitive text are accepted and
  // rejected; wrong drafts always rejected.
  const std::string verse = "And God said, Let there be light: and there was light. ";
  const GenerationSpec plain = Spec(Encode(verse + verse + "And God"), 24);
  const std::string text = Reference(plain)->result.text;
  ASSERT_GT(text.size(), 40u);
  std::vector<GenerationSpec> turns1;
  for (size_t at = 2; at < 40; at += 3) {
    turns1.push_back(plain);
    turns1.back().generation.stop = {text.substr(at, 3)};
  }
  for (int max_tokens = 1; max_tokens <= 12; ++max_tokens) {
    turns1.push_back(Spec(plain.prompt_ids, max_tokens));
  }
  const std::vector<int32_t> more = Encode(" and there was light. And God saw the light,", false);
  ASSERT_GE(more.size(), static_cast<size_t>(kBlock));
  for (bool wrong : {false, true}) {
    SCOPED_TRACE(wrong ? "wrong drafts" : "n-gram drafts");
    std::unique_ptr<GenerationScheduler> s =
        NewScheduler(64 << 20, 1, nullptr, DraftKind::kNgram, wrong);
    ASSERT_NE(s, nullptr);
    for (const GenerationSpec& turn1 : turns1) {
      SCOPED_TRACE(::testing::Message()
                   << "max_tokens " << turn1.generation.max_tokens << " stop "
                   << (turn1.generation.stop.empty() ? "" : turn1.generation.stop[0]));
      const auto first = Run(*s, turn1);
      ASSERT_TRUE(first->status.ok());
      // The answer's last token and a block beyond it are in turn 2's reach.
      std::vector<int32_t> p = turn1.prompt_ids;
      p.insert(p.end(), first->result.tokens.begin(), first->result.tokens.end());
      p.insert(p.end(), more.begin(), more.end());
      const GenerationSpec turn2 = Spec(p, 3);
      const auto second = Run(*s, turn2);
      testing::ExpectSameGeneration(*Reference(turn2), *second);
      EXPECT_GT(second->outcome.cached_prompt_tokens, 0);
    }
  }
}

TEST_F(SchedulerPrefixReuseTest, ASmallBudgetEvictsAndStaysCorrect) {
  // Two blocks' rows (f32 keys and values of every layer).
  const arch::ModelConfig& c = model_->config();
  const int64_t block_bytes = static_cast<int64_t>(kBlock) * c.n_layer * (c.kv_dim() + c.v_dim()) *
                              static_cast<int64_t>(sizeof(float));
  std::unique_ptr<GenerationScheduler> s = NewScheduler(2 * block_bytes);
  ASSERT_NE(s, nullptr);
  const auto first = Run(*s, Spec(Turn1()));
  ASSERT_TRUE(first->status.ok());
  PrefixCache::Stats stats = s->prefix_cache();
  EXPECT_EQ(stats.blocks, 2);
  EXPECT_EQ(stats.bytes, 2 * block_bytes);
  EXPECT_GT(stats.evicted_blocks, 0);
  // Leaves go first: the two blocks left are the prefix's first two.
  const GenerationSpec turn2 = Spec(Turn2(*first));
  const auto second = Run(*s, turn2);
  testing::ExpectSameGeneration(*Reference(turn2), *second);
  EXPECT_EQ(second->outcome.cached_prompt_tokens, 2 * kBlock);
  EXPECT_LE(s->prefix_cache().bytes, 2 * block_bytes);
}

TEST_F(SchedulerPrefixReuseTest, RowsOfOneNumericPathAreNotReusedByTheOther) {
  std::unique_ptr<GenerationScheduler> s = NewScheduler(64 << 20);
  ASSERT_NE(s, nullptr);
  const auto fast = Run(*s, Spec(Turn1()));
  ASSERT_TRUE(fast->status.ok());
  GenerationSpec exact = Spec(Turn2(*fast));
  exact.path = ops::NumericPath::kExact;
  const auto on_exact = Run(*s, exact);
  EXPECT_EQ(on_exact->outcome.cached_prompt_tokens, 0);
  testing::ExpectSameGeneration(*Reference(exact), *on_exact);
  // The exact path's own rows are reused by the exact path.
  const auto again = Run(*s, exact);
  EXPECT_GT(again->outcome.cached_prompt_tokens, 0);
  testing::ExpectSameGeneration(*on_exact, *again);
}

TEST_F(SchedulerPrefixReuseTest, HalfFloatRowsAreReusedBitwise) {
  std::unique_ptr<GenerationScheduler> s =
      NewScheduler(64 << 20, 1, nullptr, DraftKind::kNone, false, arch::KvType::kF16);
  ASSERT_NE(s, nullptr);
  const auto first = Run(*s, Spec(Turn1()));
  ASSERT_TRUE(first->status.ok());
  const GenerationSpec turn2 = Spec(Turn2(*first));
  const auto second = Run(*s, turn2);
  EXPECT_GE(second->outcome.cached_prompt_tokens, 0.9 * Turn1().size());
  testing::ExpectSameGeneration(*Reference(turn2, arch::KvType::kF16), *second);
}

TEST_F(SchedulerPrefixReuseTest, Q8_0RowsAreReusedBitwise) {
  std::unique_ptr<GenerationScheduler> s =
      NewScheduler(64 << 20, 1, nullptr, DraftKind::kNone, false, arch::KvType::kQ8_0);
  ASSERT_NE(s, nullptr);
  const auto first = Run(*s, Spec(Turn1()));
  ASSERT_TRUE(first->status.ok()) << first->status;
  EXPECT_FALSE(first->result.tokens.empty());
  const GenerationSpec turn2 = Spec(Turn2(*first));
  const auto second = Run(*s, turn2);
  EXPECT_GE(second->outcome.cached_prompt_tokens, 0.9 * Turn1().size());
  testing::ExpectSameGeneration(*Reference(turn2, arch::KvType::kQ8_0), *second);
}

TEST_F(SchedulerPrefixReuseTest, AllPromptLogitsEvaluateTheWholePrompt) {
  std::unique_ptr<GenerationScheduler> s = NewScheduler(64 << 20);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(Run(*s, Spec(Turn1()))->status.ok());
  GenerationSpec all = Spec(Turn1(), 2);
  all.generation.all_prompt_logits = true;
  const auto job = Run(*s, all);
  EXPECT_EQ(job->outcome.cached_prompt_tokens, 0);
  testing::ExpectSameGeneration(*Reference(all), *job);
}

TEST_F(SchedulerPrefixReuseTest, AfterARestartTheDiskGivesThePrefixBitwise) {
  const auto first = Turn1BeforeARestart();
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(DiskFiles().empty());
  std::unique_ptr<GenerationScheduler> s;
  const auto second = Turn2AfterARestart(*first, arch::KvType::kF32, &s);
  ASSERT_NE(second, nullptr);
  const int held = static_cast<int>(Turn1().size() + first->result.tokens.size()) - 1;
  EXPECT_EQ(second->outcome.cached_prompt_tokens, held / kBlock * kBlock);
  EXPECT_GE(second->outcome.cached_prompt_tokens, 0.9 * Turn1().size());
  EXPECT_EQ(s->prefix_disk()->stats().loaded_blocks, held / kBlock);
  EXPECT_EQ(s->prefix_disk()->stats().rejected_files, 0);
}

TEST_F(SchedulerPrefixReuseTest, AfterARestartHalfFloatRowsComeBackBitwise) {
  const auto first = Turn1BeforeARestart(arch::KvType::kF16);
  ASSERT_NE(first, nullptr);
  std::unique_ptr<GenerationScheduler> s;
  const auto second = Turn2AfterARestart(*first, arch::KvType::kF16, &s);
  ASSERT_NE(second, nullptr);
  EXPECT_GE(second->outcome.cached_prompt_tokens, 0.9 * Turn1().size());
}

TEST_F(SchedulerPrefixReuseTest, AfterARestartQ8_0RowsComeBackBitwise) {
  const auto first = Turn1BeforeARestart(arch::KvType::kQ8_0);
  ASSERT_NE(first, nullptr);
  std::unique_ptr<GenerationScheduler> s;
  const auto second = Turn2AfterARestart(*first, arch::KvType::kQ8_0, &s);
  ASSERT_NE(second, nullptr);
  EXPECT_GE(second->outcome.cached_prompt_tokens, 0.9 * Turn1().size());
  EXPECT_EQ(s->prefix_disk()->stats().rejected_files, 0);
}

TEST_F(SchedulerPrefixReuseTest, AfterARestartQ8_0RowsAreNotUsedAsHalves) {
  const auto first = Turn1BeforeARestart(arch::KvType::kQ8_0);
  ASSERT_NE(first, nullptr);
  const size_t files = DiskFiles().size();
  std::unique_ptr<GenerationScheduler> s;
  const auto second = Turn2AfterARestart(*first, arch::KvType::kF16, &s);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->outcome.cached_prompt_tokens, 0);
  EXPECT_EQ(s->prefix_disk()->stats().rejected_files, static_cast<int64_t>(files));
  EXPECT_TRUE(absl::StrContains(log_.str(), "another KV type (q8_0, this one is f16)"))
      << log_.str();
}

TEST_F(SchedulerPrefixReuseTest, AfterARestartDamagedRowsAreACleanMiss) {
  const auto first = Turn1BeforeARestart();
  ASSERT_NE(first, nullptr);
  const std::vector<std::string> files = DiskFiles();
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {  // a byte of each file's rows
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x04);
    f.seekp(-100, std::ios::end);
    f.put(c);
  }
  std::unique_ptr<GenerationScheduler> s;
  const auto second = Turn2AfterARestart(*first, arch::KvType::kF32, &s);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->outcome.cached_prompt_tokens, 0);
  EXPECT_TRUE(absl::StrContains(log_.str(), "rows checksum mismatch; removed")) << log_.str();
}

TEST_F(SchedulerPrefixReuseTest, AfterARestartAnotherKvTypesRowsAreNotUsed) {
  const auto first = Turn1BeforeARestart(arch::KvType::kF16);
  ASSERT_NE(first, nullptr);
  const size_t files = DiskFiles().size();
  std::unique_ptr<GenerationScheduler> s;
  const auto second = Turn2AfterARestart(*first, arch::KvType::kF32, &s);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->outcome.cached_prompt_tokens, 0);
  EXPECT_EQ(s->prefix_disk()->stats().rejected_files, static_cast<int64_t>(files));
  EXPECT_TRUE(absl::StrContains(log_.str(), "another KV type (f16")) << log_.str();
}

}  // namespace
}  // namespace colibri::coordinator
