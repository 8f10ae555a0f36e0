// Constrained decoding inside GenerationScheduler on the demo model: at
// temperature 1.0 and several seeds, every constrained generation's text is
// an instance of its schema (checked here by hand, not by the grammar), ends
// with finish reason stop, and takes no n-gram drafts (nor grammar drafts
// when they are off); max_tokens cuts an unbounded instance to a prefix the
// grammar takes; an unconstrained generation batched with constrained ones
// gives bitwise what it gives alone.
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coordinator/generation/generation_scheduler.h"
#include "gtest/gtest.h"
#include "model/grammar/grammar_matcher.h"
#include "model/grammar/json_schema_compiler.h"
#include "model/grammar/token_trie.h"
#include "nlohmann/json.hpp"
#include "tests/support/demo_model_fixture.h"
#include "tests/support/recording_job.h"

namespace colibri::coordinator {
namespace {

using nlohmann::json;
using testing::RecordingJob;
using testing::RunAlone;
using testing::RunTogether;

// Every string and array is bounded, so every generation completes.
constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 8},
    "color": {"enum": ["red", "green", "blue"]},
    "count": {"type": "integer", "minimum": 0, "maximum": 99},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "color", "count", "tags", "ok"],
  "additionalProperties": false
})";

size_t Utf8Chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// Empty when `text` is an instance of kSchema, else what is wrong.
std::string Violation(const std::string& text) {
  const json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return "not JSON";
  if (!v.is_object()) return "not an object";
  const std::set<std::string> keys = {"name", "color", "count", "tags", "ok"};
  for (const auto& [key, value] : v.items()) {
    if (keys.count(key) == 0) return "extra key " + key;
  }
  for (const std::string& key : keys) {
    if (!v.contains(key)) return "missing " + key;
  }
  if (!v["name"].is_string() || Utf8Chars(v["name"].get<std::string>()) > 8) return "name";
  if (!v["color"].is_string()) return "color";
  const std::string color = v["color"].get<std::string>();
  if (color != "red" && color != "green" && color != "blue") return "color " + color;
  if (!v["count"].is_number_integer()) return "count";
  const int64_t count = v["count"].get<int64_t>();
  if (count < 0 || count > 99) return "count out of range";
  if (!v["tags"].is_array() || v["tags"].size() > 3) return "tags";
  for (const json& tag : v["tags"]) {
    if (!tag.is_string() || Utf8Chars(tag.get<std::string>()) > 4) return "tag";
  }
  if (!v["ok"].is_boolean()) return "ok";
  return "";
}

class SchedulerConstraintTest : public testing::DemoModelTest {
 protected:
  GenerationSpec Constrained(uint64_t seed) {
    auto grammar = grammar::CompileJsonSchemaText(kSchema, {});
    EXPECT_TRUE(grammar.ok()) << grammar.status();
    GenerationSpec spec;
    spec.text = "The answer, as JSON:";
    spec.sampling.temperature = 1.0f;
    spec.sampling.seed = seed;
    spec.generation.max_tokens = 300;
    spec.constraint = grammar.ok() ? *grammar : nullptr;
    return spec;
  }
};

TEST_F(SchedulerConstraintTest, OutputIsAnInstanceOfTheSchemaAtTemperatureOne) {
  GenerationScheduler::Options options;
  options.sessions = 4;
  options.build_token_trie_at_start = true;  // as serve does; the other tests build it on demand
  auto scheduler =
      GenerationScheduler::Create(options, *model_, tokenizer_.get(), nullptr, pool_.get());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  std::vector<GenerationSpec> specs;
  for (uint64_t seed = 1; seed <= 8; ++seed) specs.push_back(Constrained(seed));
  const auto jobs = RunTogether(**scheduler, specs);
  std::set<std::string> distinct;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const RecordingJob& job = *jobs[i];
    ASSERT_TRUE(job.status.ok()) << "seed " << i + 1 << ": " << job.status;
    EXPECT_EQ(job.result.finish_reason, FinishReason::kStop) << job.result.text;
    EXPECT_EQ(Violation(job.result.text), "") << "seed " << i + 1 << ": " << job.result.text;
    distinct.insert(job.result.text);
  }
  // Temperature 1.0 samples: the seeds do not all give one answer.
  EXPECT_GT(distinct.size(), 1u);
}

TEST_F(SchedulerConstraintTest, MaxTokensCutsAnUnboundedInstanceToAValidPrefix) {
  auto grammar = grammar::CompileJsonSchemaText(R"({"type": "array", "items": {"type": "string"}})", {});
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  GenerationScheduler::Options options;
  options.sessions = 3;
  auto scheduler =
      GenerationScheduler::Create(options, *model_, tokenizer_.get(), nullptr, pool_.get());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  std::vector<GenerationSpec> specs;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    GenerationSpec spec = Constrained(seed);
    spec.constraint = *grammar;
    spec.generation.max_tokens = 24;
    specs.push_back(spec);
  }
  std::shared_ptr<const grammar::TokenTrie> trie = grammar::TokenTrie::Build(*tokenizer_);
  for (const auto& job : RunTogether(**scheduler, specs)) {
    ASSERT_TRUE(job->status.ok()) << job->status;
    const std::string& text = job->result.text;
    if (job->result.finish_reason == FinishReason::kStop) {
      EXPECT_TRUE(json::parse(text, nullptr, false).is_array()) << text;
      continue;
    }
    EXPECT_EQ(job->result.finish_reason, FinishReason::kLength) << text;
    EXPECT_EQ(job->result.tokens.size(), 24u);
    // A prefix of some instance: the grammar takes its bytes.
    grammar::GrammarMatcher matcher(*grammar, trie, {});
    EXPECT_TRUE(matcher.AcceptBytes(text).ok()) << text;
    EXPECT_EQ(text.substr(0, 1), "[") << text;
  }
}

TEST_F(SchedulerConstraintTest, WithoutGrammarDraftsAConstrainedGenerationTakesNoDrafts) {
  GenerationScheduler::Options options;
  options.speculation.draft = DraftKind::kNgram;
  options.speculation.grammar_drafts = false;
  const auto job = RunAlone(options, *model_, tokenizer_.get(), pool_.get(), Constrained(7));
  ASSERT_TRUE(job->status.ok()) << job->status;
  EXPECT_EQ(Violation(job->result.text), "") << job->result.text;
  EXPECT_EQ(job->result.speculation.drafted, 0);
}

TEST_F(SchedulerConstraintTest, UnconstrainedGenerationIsBitwiseUnchanged) {
  GenerationSpec free;
  free.text = "In the beginning";
  free.sampling.temperature = 1.0f;
  free.sampling.seed = 42;
  free.generation.max_tokens = 40;
  free.generation.logprobs = true;
  free.generation.top_logprobs = 3;
  GenerationScheduler::Options one;
  const auto alone = RunAlone(one, *model_, tokenizer_.get(), pool_.get(), free);

  GenerationScheduler::Options options;
  options.sessions = 3;
  auto scheduler =
      GenerationScheduler::Create(options, *model_, tokenizer_.get(), nullptr, pool_.get());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const auto jobs = RunTogether(**scheduler, {Constrained(3), free, Constrained(4)});
  testing::ExpectSameGeneration(*alone, *jobs[1]);
  EXPECT_EQ(Violation(jobs[0]->result.text), "") << jobs[0]->result.text;
}

TEST_F(SchedulerConstraintTest, ConstrainedLogprobsAreOfTheMaskedDistribution) {
  GenerationSpec spec = Constrained(5);
  spec.generation.logprobs = true;
  spec.generation.top_logprobs = 5;
  GenerationScheduler::Options options;
  const auto job = RunAlone(options, *model_, tokenizer_.get(), pool_.get(), spec);
  ASSERT_TRUE(job->status.ok()) << job->status;
  ASSERT_FALSE(job->tokens.empty());
  // The first token opens the object: every alternative with a probability
  // does too, whatever the model prefers.
  EXPECT_EQ(job->result.text.substr(0, 1), "{");
  int finite = 0;
  for (const TokenLogprob& top : job->tokens[0].top_logprobs) {
    if (!std::isfinite(top.logprob)) continue;
    ++finite;
    EXPECT_EQ(tokenizer_->TokenToPiece(top.id, false).substr(0, 1), "{") << top.id;
  }
  EXPECT_GT(finite, 0);
}

}  // namespace
}  // namespace colibri::coordinator
