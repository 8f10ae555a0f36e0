// Token masks: every mask equals the brute-force answer (each token's bytes fed
// to the automaton), on a small vocabulary and on Qwen3's 151k one; end of
// generation, refused tokens, forced bytes and the automaton's bound.
#include "model/grammar/grammar_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/model/grammar/grammar_test_util.h"
#include "tests/support/paths.h"

namespace colibri::grammar {
namespace {

std::shared_ptr<const CompiledGrammar> MustCompile(const std::string& schema) {
  auto grammar = CompileJsonSchemaText(schema, SchemaCompileOptions());
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  return grammar.ok() ? *grammar : nullptr;
}

// The mask at every prefix of `text` against token-by-token CanAccept.
void ExpectMasksMatchBruteForce(const std::shared_ptr<const CompiledGrammar>& grammar,
                                const std::shared_ptr<const TokenTrie>& trie,
                                const std::string& text) {
  GrammarMatcher matcher(grammar, trie, MatcherOptions());
  GrammarMatcher probe(grammar, trie, MatcherOptions());
  for (size_t at = 0; at <= text.size(); ++at) {
    absl::StatusOr<const TokenBitmask*> mask = matcher.ComputeMask();
    ASSERT_TRUE(mask.ok()) << mask.status();
    size_t mismatches = 0;
    for (int32_t id = 0; id < trie->n_vocab(); ++id) {
      probe.Reset();
      ASSERT_TRUE(probe.AcceptBytes(text.substr(0, at)).ok());
      bool expected = false;
      if (trie->IsEndOfGeneration(id)) {
        expected = probe.IsAccepting();
      } else if (!trie->piece(id).empty()) {
        expected = probe.CanAccept(trie->piece(id));
      }
      if ((*mask)->Allowed(id) != expected && ++mismatches <= 3) {
        ADD_FAILURE() << "after \"" << text.substr(0, at) << "\": token " << id << " \""
                      << trie->piece(id) << "\" expected " << expected;
      }
    }
    ASSERT_EQ(mismatches, 0u);
    if (at < text.size()) {
      ASSERT_TRUE(matcher.AcceptBytes(text.substr(at, 1)).ok()) << at;
    }
  }
}

const char* const kSchemas[][2] = {
    {R"({"type":"object","properties":{"name":{"type":"string"},"tag":{"type":"string","maxLength":4},"n":{"type":"integer","minimum":-5,"maximum":300}},"required":["name"]})",
     "{\"name\":\"a\\\"\xC3\xA9 the\",\"tag\":\"ab\",\"n\":-5,\"x\":[true]}"},
    {R"({"enum":["alpha","beta",12,null]})", "\"beta\""},
    {R"({"type":"array","items":{"type":"string","format":"date"},"maxItems":2})",
     "[\"2024-01-31\",\"1999-12-01\"]"},
    {R"({"type":"string","pattern":"^[a-c]+x*$"})", "\"abcxx\""},
    {R"({"properties":{"ab":{"type":"integer"},"a":{"properties":{"x":{}},"required":["x"]}},"required":["a","ab"]})",
     R"({"a":{"q":1,"x":[[2]]},"abc":null,"ab":12})"},
    {R"({"properties":{"ab":{"type":"integer"},"a":{"type":"boolean"}},"required":["a"],"additionalProperties":false})",
     R"({"ab":12,"a":true})"},
};

TEST(GrammarMatcherTest, MasksMatchBruteForceOnSmallVocabulary) {
  const auto trie = testing::SmallVocabulary();
  for (const auto& [schema, text] : kSchemas) {
    SCOPED_TRACE(schema);
    ExpectMasksMatchBruteForce(MustCompile(schema), trie, text);
  }
}

TEST(GrammarMatcherTest, MasksMatchBruteForceOnQwen3Vocabulary) {
  const std::string fixtures = colibri::testing::FixturesDir();
  if (fixtures.empty()) GTEST_SKIP() << "fixtures not found";
  auto file = gguf::GgufFile::Open(fixtures + "/vocab/ggml-vocab-qwen3.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto tokenizer = tokenizer::Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::shared_ptr<const TokenTrie> trie = TokenTrie::Build(**tokenizer);
  for (const auto& [schema, text] : kSchemas) {
    SCOPED_TRACE(schema);
    ExpectMasksMatchBruteForce(MustCompile(schema), trie, text);
  }
}

TEST(GrammarMatcherTest, EndOfGenerationOnlyWhenComplete) {
  const auto trie = testing::SmallVocabulary();
  const int32_t eog = trie->end_of_generation()[0];
  GrammarMatcher matcher(MustCompile(R"({"type":"integer"})"), trie, MatcherOptions());
  auto mask = matcher.ComputeMask();
  ASSERT_TRUE(mask.ok());
  EXPECT_FALSE((*mask)->Allowed(eog));
  EXPECT_EQ(matcher.AcceptToken(eog).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(matcher.AcceptBytes("12").ok());
  mask = matcher.ComputeMask();
  ASSERT_TRUE(mask.ok());
  EXPECT_TRUE((*mask)->Allowed(eog));
  ASSERT_TRUE(matcher.AcceptToken(eog).ok());
  EXPECT_TRUE(matcher.IsFinished());
  EXPECT_EQ(matcher.ComputeMask().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(matcher.AcceptToken('1').code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GrammarMatcherTest, RefusedTokenChangesNothing) {
  const auto trie = testing::SmallVocabulary();
  GrammarMatcher matcher(MustCompile(R"({"type":"boolean"})"), trie, MatcherOptions());
  ASSERT_TRUE(matcher.AcceptBytes("tr").ok());
  EXPECT_EQ(matcher.AcceptToken('x').code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(matcher.AcceptBytes("ux").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(matcher.AcceptBytes("ue").ok());
  EXPECT_TRUE(matcher.IsAccepting());
  // A control token has no bytes to accept.
  EXPECT_EQ(matcher.AcceptToken(trie->n_vocab() - 2).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GrammarMatcherTest, ForcedBytes) {
  const auto trie = testing::SmallVocabulary();
  GrammarMatcher matcher(
      MustCompile(R"({"type":"object","properties":{"name":{"enum":["alpha","alpine"]}},"required":["name"],"additionalProperties":false})"),
      trie, MatcherOptions());
  EXPECT_EQ(matcher.ForcedBytes(100), "{\"name\":\"alp");
  EXPECT_EQ(matcher.ForcedBytes(3), "{\"n");
  ASSERT_TRUE(matcher.AcceptBytes("{\"name\":\"alpi").ok());
  EXPECT_EQ(matcher.ForcedBytes(100), "ne\"}");
  ASSERT_TRUE(matcher.AcceptBytes("ne\"}").ok());
  EXPECT_EQ(matcher.ForcedBytes(100), "");  // complete: may end here
}

TEST(GrammarMatcherTest, AutomatonBoundIsAnError) {
  const auto trie = testing::SmallVocabulary();
  MatcherOptions tiny;
  tiny.max_dfa_states = 4;
  GrammarMatcher matcher(MustCompile(R"({"type":"string","format":"date-time"})"), trie, tiny);
  EXPECT_EQ(matcher.AcceptBytes("\"2024-01-01T").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(matcher.ComputeMask().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(TokenTrieTest, PlainText) {
  EXPECT_TRUE(IsPlainStringText("hello world"));
  EXPECT_TRUE(IsPlainStringText("\xC3\xA9t\xC3"));  // ends inside a character
  EXPECT_TRUE(IsPlainStringText("\xE4\xB8"));
  EXPECT_FALSE(IsPlainStringText("a\"b"));
  EXPECT_FALSE(IsPlainStringText("a\\b"));
  EXPECT_FALSE(IsPlainStringText("a\nb"));
  EXPECT_FALSE(IsPlainStringText("\xA9"));           // starts inside a character
  EXPECT_FALSE(IsPlainStringText("\xC0\xAF"));       // overlong
  EXPECT_FALSE(IsPlainStringText("\xED\xA0\x80"));   // surrogate
  EXPECT_FALSE(IsPlainStringText("\xC3\xA9\xA9"));   // stray continuation
}

}  // namespace
}  // namespace colibri::grammar

namespace colibri::grammar {
namespace {

// Masks of positions that differ only in the keys written are shared; the
// tokens that complete or close a key must still see this object's keys.
TEST(GrammarMatcherTest, KeySetsDecideKeysAndCloseWithSharedMasks) {
  const auto trie = testing::SmallVocabulary();
  for (const char* extra : {"false", "true"}) {
    const std::string schema =
        std::string(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":)") +
        extra + "}";
    GrammarMatcher matcher(MustCompile(schema.c_str()), trie, MatcherOptions());
    ASSERT_TRUE(matcher.AcceptBytes(R"({"a":1,"b":2})").ok()) << extra;
    EXPECT_TRUE(matcher.IsAccepting());
    for (const char* first : {R"({"b":2)", R"({"a":1)"}) {
      matcher.Reset();
      ASSERT_TRUE(matcher.AcceptBytes(first).ok()) << extra << first;
      absl::StatusOr<const TokenBitmask*> mask = matcher.ComputeMask();
      ASSERT_TRUE(mask.ok()) << mask.status();
      EXPECT_FALSE((*mask)->Allowed('}')) << extra << first << ": a required key is missing";
      EXPECT_TRUE((*mask)->Allowed(',')) << extra << first;
      ASSERT_TRUE(matcher.AcceptBytes(",\"").ok());
      mask = matcher.ComputeMask();
      ASSERT_TRUE(mask.ok()) << mask.status();
      const char seen = first[2];
      const char other = seen == 'a' ? 'b' : 'a';
      EXPECT_TRUE((*mask)->Allowed(other)) << extra << first;
      EXPECT_FALSE(matcher.CanAccept(std::string(1, seen) + "\":")) << extra << first;
      // With other keys allowed, a seen name may go on as another key.
      EXPECT_EQ((*mask)->Allowed(seen), std::string(extra) == "true") << extra << first;
    }
  }
}

}  // namespace
}  // namespace colibri::grammar
