// Grammar-forced drafts and shared grammar masks inside GenerationScheduler,
// on the demo model: a constrained generation gives bitwise the same tokens,
// log-probabilities and logits with grammar drafts as without them (several
// seeds, temperature 0 and 1, alone and batched with unconstrained
// generations, which stay bitwise what they give alone); drafts are accepted
// and it takes fewer steps; a second generation of the same schema (compiled
// again) computes no mask of its own.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/token_constraint.h"
#include "gtest/gtest.h"
#include "model/grammar/json_schema_compiler.h"
#include "tests/support/demo_model_fixture.h"
#include "tests/support/recording_job.h"

namespace colibri::coordinator {
namespace {

using testing::ExpectSameGeneration;
using testing::RecordingJob;
using testing::RunAlone;
using testing::RunTogether;

// Long keys and enum values: much of every instance is forced text.
constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "temperature_in_celsius": {"type": "integer", "minimum": -50, "maximum": 60},
    "weather_description": {"enum": ["partly cloudy with light rain", "clear skies"]},
    "station": {"type": "string", "maxLength": 4}
  },
  "required": ["temperature_in_celsius", "weather_description", "station"],
  "additionalProperties": false
})";

class SchedulerGrammarDraftsTest : public colibri::testing::DemoModelTest {
 protected:
  static std::shared_ptr<const grammar::CompiledGrammar> Compile() {
    auto grammar = grammar::CompileJsonSchemaText(kSchema, {});
    EXPECT_TRUE(grammar.ok()) << grammar.status();
    return grammar.ok() ? *grammar : nullptr;
  }

  static GenerationSpec Constrained(uint64_t seed, float temperature) {
    GenerationSpec spec;
    spec.text = "The weather report, as JSON:";
    spec.sampling.temperature = temperature;
    spec.sampling.seed = seed;
    spec.generation.max_tokens = 100;
    spec.generation.logprobs = true;
    spec.generation.top_logprobs = 3;
    spec.constraint = Compile();
    return spec;
  }

  static GenerationScheduler::Options WithDrafts(bool grammar_drafts, int sessions = 1) {
    GenerationScheduler::Options options;
    options.sessions = sessions;
    options.speculation.grammar_drafts = grammar_drafts;
    // Every forced token is drafted, so the verifier sees many drafts.
    options.speculation.adaptive = false;
    return options;
  }

  std::shared_ptr<RecordingJob> Alone(const GenerationScheduler::Options& options,
                                      const GenerationSpec& spec) {
    return RunAlone(options, *model_, tokenizer_.get(), pool_.get(), spec);
  }
};

TEST_F(SchedulerGrammarDraftsTest, SameOutputWithAndWithoutGrammarDrafts) {
  for (const float temperature : {0.0f, 1.0f}) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(::testing::Message() << "temperature " << temperature << " seed " << seed);
      const GenerationSpec spec = Constrained(seed, temperature);
      const auto plain = Alone(WithDrafts(false), spec);
      const auto drafted = Alone(WithDrafts(true), spec);
      ExpectSameGeneration(*plain, *drafted);
      EXPECT_EQ(plain->result.finish_reason, FinishReason::kStop) << plain->result.text;
      EXPECT_EQ(plain->result.speculation.drafted, 0);
      EXPECT_GT(drafted->result.speculation.drafted, 0) << drafted->result.text;
    }
  }
}

TEST_F(SchedulerGrammarDraftsTest, AdaptiveDraftsGiveTheSameOutput) {
  GenerationScheduler::Options adaptive = WithDrafts(true);
  adaptive.speculation.adaptive = true;
  for (uint64_t seed = 5; seed <= 6; ++seed) {
    const GenerationSpec spec = Constrained(seed, 1.0f);
    ExpectSameGeneration(*Alone(WithDrafts(false), spec), *Alone(adaptive, spec));
  }
}

TEST_F(SchedulerGrammarDraftsTest, BatchedWithUnconstrainedGenerationsAllStayTheSame) {
  GenerationSpec free;
  free.text = "In the beginning";
  free.sampling.temperature = 1.0f;
  free.sampling.seed = 42;
  free.generation.max_tokens = 40;
  free.generation.logprobs = true;
  free.generation.top_logprobs = 3;
  GenerationSpec greedy = free;
  greedy.text = "And God said";
  greedy.sampling.temperature = 0.0f;
  const std::vector<GenerationSpec> specs = {Constrained(1, 1.0f), free, Constrained(2, 0.0f),
                                             greedy};

  auto scheduler = GenerationScheduler::Create(WithDrafts(true, 4), *model_, tokenizer_.get(),
                                               nullptr, pool_.get());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const auto jobs = RunTogether(**scheduler, specs);
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "generation " << i);
    ExpectSameGeneration(*Alone(WithDrafts(false), specs[i]), *jobs[i]);
  }
  EXPECT_GT(jobs[0]->result.speculation.accepted, 0);
  EXPECT_GT(jobs[2]->result.speculation.accepted, 0);
  EXPECT_EQ(jobs[1]->result.speculation.drafted, 0);  // no drafter of its own
}

TEST_F(SchedulerGrammarDraftsTest, DraftsTakeFewerSteps) {
  const GenerationSpec spec = Constrained(3, 0.0f);
  const auto plain = Alone(WithDrafts(false), spec);
  const auto drafted = Alone(WithDrafts(true), spec);
  ASSERT_TRUE(plain->status.ok()) << plain->status;
  ASSERT_TRUE(drafted->status.ok()) << drafted->status;
  const SpeculationStats& p = plain->result.speculation;
  const SpeculationStats& d = drafted->result.speculation;
  EXPECT_GT(d.accepted, 0);
  EXPECT_LT(d.plain_steps + d.verify_steps, p.plain_steps + p.verify_steps);
  EXPECT_LT(drafted->outcome.steps.evaluate_calls, plain->outcome.steps.evaluate_calls);
}

TEST_F(SchedulerGrammarDraftsTest, SecondGenerationOfAGrammarReusesItsMasks) {
  auto scheduler = GenerationScheduler::Create(WithDrafts(true), *model_, tokenizer_.get(), nullptr,
                                               pool_.get());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  // Each spec compiles the schema again: the cache goes by content.
  const auto first = RunTogether(**scheduler, {Constrained(7, 0.0f)});
  const auto second = RunTogether(**scheduler, {Constrained(7, 0.0f)});
  ASSERT_TRUE(first[0]->status.ok()) << first[0]->status;
  ASSERT_TRUE(second[0]->status.ok()) << second[0]->status;
  EXPECT_EQ(first[0]->result.tokens, second[0]->result.tokens);
  EXPECT_GT(first[0]->outcome.grammar_masks_computed, 0);
  EXPECT_EQ(second[0]->outcome.grammar_masks_computed, 0);
  const GrammarCache::Stats stats = (*scheduler)->grammar_cache();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.grammars, 1);
}

TEST(GrammarCacheTest, DifferentGrammarsGetDifferentMatchers) {
  auto a = grammar::CompileJsonSchemaText(R"({"type": "boolean"})", {});
  auto b = grammar::CompileJsonSchemaText(R"({"type": "integer"})", {});
  auto a2 = grammar::CompileJsonSchemaText(R"({"type": "boolean"})", {});
  ASSERT_TRUE(a.ok() && b.ok() && a2.ok());
  EXPECT_TRUE(SameGrammar(**a, **a2));
  EXPECT_FALSE(SameGrammar(**a, **b));
  std::shared_ptr<const grammar::TokenTrie> trie =
      grammar::TokenTrie::FromPieces({"true", "false", "1", "2", "-"}, {});
  GrammarCache cache(trie, /*capacity=*/1);
  const std::shared_ptr<SharedGrammar> sa = cache.For(*a);
  EXPECT_EQ(cache.For(*a2), sa);
  EXPECT_NE(cache.For(*b), sa);
  // Capacity 1: a was dropped for b, and comes back as a new matcher.
  EXPECT_NE(cache.For(*a), sa);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().misses, 3);
}

// Grammars whose byte edges agree but whose stack moves or call level bound
// differ (a required key, the free-value depth) are different grammars.
TEST(GrammarCacheTest, StackMovesAndCallLevelTellGrammarsApart) {
  auto required = grammar::CompileJsonSchemaText(
      R"({"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]})", {});
  auto optional = grammar::CompileJsonSchemaText(
      R"({"type":"object","properties":{"a":{"type":"boolean"}}})", {});
  grammar::SchemaCompileOptions shallow;
  shallow.max_any_depth = 1;
  auto deep_any = grammar::CompileJsonSchemaText("{}", {});
  auto shallow_any = grammar::CompileJsonSchemaText("{}", shallow);
  ASSERT_TRUE(required.ok() && optional.ok() && deep_any.ok() && shallow_any.ok());
  EXPECT_FALSE(SameGrammar(**required, **optional));
  EXPECT_FALSE(SameGrammar(**deep_any, **shallow_any));
  std::shared_ptr<const grammar::TokenTrie> trie =
      grammar::TokenTrie::FromPieces({"{", "}", "\"a\":", "true", "[", "]"}, {});
  GrammarCache cache(trie);
  EXPECT_NE(cache.For(*required), cache.For(*optional));
  EXPECT_NE(cache.For(*deep_any), cache.For(*shallow_any));
}

TEST_F(SchedulerGrammarDraftsTest, ForcedTokensSpellAsTheModelLastDid) {
  auto grammar = grammar::CompileJsonSchemaText(R"({"enum": ["partly cloudy"]})", {});
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  std::shared_ptr<const grammar::TokenTrie> trie = grammar::TokenTrie::Build(*tokenizer_);
  GrammarCache cache(trie);
  auto spell = [&](const std::string& text) {
    auto ids = tokenizer_->Encode(text, {});
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  };
  const std::vector<int32_t> tokenizer_spelling = spell("\"partly cloudy\"");
  std::vector<int32_t> drafts;
  TokenConstraint first(cache.For(*grammar), tokenizer_.get());
  first.ForcedTokens(64, &drafts);
  // The whole instance is forced: the tokenizer's spelling of it.
  EXPECT_EQ(drafts, tokenizer_spelling);

  // A generation that samples the text a character at a time...
  std::vector<int32_t> model_spelling;
  for (char c : std::string("\"partly cloudy\"")) {
    const std::vector<int32_t> one = spell(std::string(1, c));
    model_spelling.insert(model_spelling.end(), one.begin(), one.end());
  }
  ASSERT_NE(model_spelling, tokenizer_spelling);
  for (int32_t id : model_spelling) {
    first.ForcedTokens(64, &drafts);
    ASSERT_TRUE(first.Accept(id).ok()) << id;
  }
  EXPECT_TRUE(*first.Complete());
  // ...is how the next generation of the grammar drafts it.
  TokenConstraint second(cache.For(*grammar), tokenizer_.get());
  second.ForcedTokens(64, &drafts);
  EXPECT_EQ(drafts, model_spelling);
  second.ForcedTokens(2, &drafts);
  EXPECT_EQ(drafts.size(), 2u);
}

}  // namespace
}  // namespace colibri::coordinator
