#include "model/grammar/grammar_compose.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "model/grammar/json_schema_compiler.h"
#include "nlohmann/json.hpp"
#include "tests/model/grammar/grammar_test_util.h"

namespace colibri::grammar {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const CompiledGrammar> Schema(const json& schema) {
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = CompileJsonSchema(schema, {});
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  const testing::Verdicts v = testing::Check(g, testing::SmallVocabulary(), text);
  EXPECT_EQ(v.reference, v.dfa) << text;
  EXPECT_EQ(v.reference, v.tokens) << text;
  return v.reference;
}

// A literal wrapper around one of two schemas: each alternative takes only
// its own arguments, and nothing outside the wrapper passes.
TEST(GrammarComposeTest, LiteralsAroundSchemasAsAlternatives) {
  auto add = Schema({{"type", "object"},
                     {"properties", {{"a", {{"type", "integer"}}}}},
                     {"required", {"a"}},
                     {"additionalProperties", false}});
  auto say = Schema({{"type", "object"},
                     {"properties", {{"s", {{"enum", {"hi", "yo"}}}}}},
                     {"required", {"s"}},
                     {"additionalProperties", false}});
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = ComposeGrammar(
      {{GrammarPart::Literal("<c>add "), GrammarPart::Of(add), GrammarPart::Literal("</c>")},
       {GrammarPart::Literal("<c>say "), GrammarPart::Of(say), GrammarPart::Literal("</c>")}},
      {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Accepts(*g, "<c>add {\"a\":12}</c>"));
  EXPECT_TRUE(Accepts(*g, "<c>say {\"s\":\"yo\"}</c>"));
  EXPECT_FALSE(Accepts(*g, "<c>add {\"s\":\"yo\"}</c>"));
  EXPECT_FALSE(Accepts(*g, "<c>say {\"a\":1}</c>"));
  EXPECT_FALSE(Accepts(*g, "<c>add {\"a\":12}"));
  EXPECT_FALSE(Accepts(*g, "{\"a\":12}</c>"));
  EXPECT_FALSE(Accepts(*g, "<c>add {\"a\":12}</c><c>add {\"a\":1}</c>"));
}

// Repetitions: between min and max copies, the separator between them, each
// copy choosing its alternative again.
TEST(GrammarComposeTest, RepeatsWithSeparatorWithinBounds) {
  auto value = Schema({{"enum", {1, 2}}});
  ComposeOptions options;
  options.min_repeats = 2;
  options.max_repeats = 3;
  options.separator = ",";
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = ComposeGrammar(
      {{GrammarPart::Literal("["), GrammarPart::Of(value), GrammarPart::Literal("]")}}, options);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(Accepts(*g, "[1]"));
  EXPECT_TRUE(Accepts(*g, "[1],[2]"));
  EXPECT_TRUE(Accepts(*g, "[2],[2],[1]"));
  EXPECT_FALSE(Accepts(*g, "[2],[2],[1],[1]"));
  EXPECT_FALSE(Accepts(*g, "[1][2]"));
  EXPECT_FALSE(Accepts(*g, "[1],[3]"));
}

TEST(GrammarComposeTest, RefusesBadShapesAndBudgets) {
  EXPECT_EQ(ComposeGrammar({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  ComposeOptions zero;
  zero.min_repeats = 0;
  EXPECT_EQ(ComposeGrammar({{GrammarPart::Literal("x")}}, zero).status().code(),
            absl::StatusCode::kInvalidArgument);
  ComposeOptions small;
  small.max_nfa_states = 8;
  auto object = Schema({{"type", "object"}});
  EXPECT_EQ(ComposeGrammar({{GrammarPart::Of(object)}}, small).status().code(),
            absl::StatusCode::kResourceExhausted);
}


// A text piece: any UTF-8 text of a bounded number of code points, without
// the excluded strings (a tag closing the text, anywhere in it).
TEST(GrammarComposeTest, TextPiecesCountCodePointsAndLeaveOutExcludedStrings) {
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g = ComposeGrammar(
      {{GrammarPart::Literal("<v>"), GrammarPart::Text(1, 3, {"</v>", "</c>"}),
        GrammarPart::Literal("</v>")}},
      {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Accepts(*g, "<v>a</v>"));
  EXPECT_TRUE(Accepts(*g, "<v>a<b</v>"));
  EXPECT_TRUE(Accepts(*g, "<v><</v>"));
  EXPECT_TRUE(Accepts(*g, "<v>\xc3\xa9\xe2\x82\xac!</v>"));  // 3 code points, 6 bytes
  EXPECT_FALSE(Accepts(*g, "<v></v>"));
  EXPECT_FALSE(Accepts(*g, "<v>abcd</v>"));
  EXPECT_FALSE(Accepts(*g, "<v>\xff</v>"));
  EXPECT_FALSE(Accepts(*g, "<v></v></v>"));

  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> unbounded =
      ComposeGrammar({{GrammarPart::Text(0, -1, {"</v>", "</c>"}), GrammarPart::Literal("</v>")}},
                     {});
  ASSERT_TRUE(unbounded.ok()) << unbounded.status();
  EXPECT_TRUE(Accepts(*unbounded, "</v>"));
  EXPECT_TRUE(Accepts(*unbounded, "x < y </ z <//v> </w></v>"));
  EXPECT_FALSE(Accepts(*unbounded, "a</c>b</v>"));
  EXPECT_FALSE(Accepts(*unbounded, "<</v>x</v>"));

  // A grammar's words that hold an excluded string are left out.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> json_value = ComposeGrammar(
      {{GrammarPart::Of(Schema({{"type", "string"}, {"maxLength", 6}}), {"</v>"})}}, {});
  ASSERT_TRUE(json_value.ok()) << json_value.status();
  EXPECT_TRUE(Accepts(*json_value, "\"a</b>\""));
  EXPECT_FALSE(Accepts(*json_value, "\"a</v>\""));

  EXPECT_FALSE(ComposeGrammar({{GrammarPart::Text(2, 1, {})}}, {}).ok());
  EXPECT_FALSE(ComposeGrammar({{GrammarPart::Text(0, 1, {""})}}, {}).ok());
}

// An object's keys in any order are kept through the exclusion (key-set stack
// moves pair with the excluded text's states); a value nesting free JSON
// (calls and returns on the stack) is refused rather than loosened.
TEST(GrammarComposeTest, ExclusionsKeepAnyOrderObjectsAndRefuseFreeValues) {
  auto object = Schema({{"type", "object"},
                        {"properties",
                         {{"a", {{"type", "string"}, {"maxLength", 6}}},
                          {"b", {{"type", "integer"}}}}},
                        {"required", {"a", "b"}},
                        {"additionalProperties", false}});
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g =
      ComposeGrammar({{GrammarPart::Of(object, {"</v>"}), GrammarPart::Literal("</v>")}}, {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Accepts(*g, "{\"a\":\"x\",\"b\":1}</v>"));
  EXPECT_TRUE(Accepts(*g, "{\"b\":1,\"a\":\"x<y\"}</v>"));
  EXPECT_FALSE(Accepts(*g, "{\"b\":1,\"a\":\"x</v>\"}</v>"));
  EXPECT_FALSE(Accepts(*g, "{\"b\":1,\"b\":2,\"a\":\"x\"}</v>"));  // a key twice
  EXPECT_FALSE(Accepts(*g, "{\"b\":1}</v>"));                       // a required key missing

  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> free =
      ComposeGrammar({{GrammarPart::Of(Schema(json::object()), {"</v>"})}}, {});
  ASSERT_FALSE(free.ok());
  EXPECT_NE(free.status().message().find("unconstrained schema"), std::string::npos)
      << free.status();
}

}  // namespace
}  // namespace colibri::grammar
