// Per keyword: instances the schema accepts pass and the others fail, on the
// byte-level reference, the lazy DFA and the token path alike.
#include "model/grammar/json_schema_compiler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/grammar/grammar_matcher.h"
#include "tests/model/grammar/grammar_test_util.h"

namespace colibri::grammar {
namespace {

struct KeywordCase {
  const char* name;
  const char* schema;
  std::vector<const char*> valid;    // compact instances that must pass
  std::vector<const char*> invalid;  // texts that must fail
};

std::string CaseName(const ::testing::TestParamInfo<KeywordCase>& info) {
  return info.param.name;
}

class KeywordTest : public ::testing::TestWithParam<KeywordCase> {};

TEST_P(KeywordTest, AcceptsValidAndRejectsInvalid) {
  const KeywordCase& c = GetParam();
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar =
      CompileJsonSchemaText(c.schema, SchemaCompileOptions());
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  const auto trie = testing::SmallVocabulary();
  for (const char* text : c.valid) {
    const testing::Verdicts v = testing::Check(*grammar, trie, text);
    EXPECT_TRUE(v.reference) << text;
    EXPECT_TRUE(v.dfa) << text;
    EXPECT_TRUE(v.tokens) << text;
  }
  for (const char* text : c.invalid) {
    const testing::Verdicts v = testing::Check(*grammar, trie, text);
    EXPECT_FALSE(v.reference) << text;
    EXPECT_FALSE(v.dfa) << text;
    EXPECT_FALSE(v.tokens) << text;
  }
}

const KeywordCase kCases[] = {
    {"TypeNull", R"({"type":"null"})", {"null"}, {"nul", "0", "\"null\"", " null"}},
    {"TypeBoolean", R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"}},
    {"TypeInteger", R"({"type":"integer"})", {"0", "-7", "12", "1234567890123"},
     {"01", "-0", "1.5", "1e3", "+1", "\"1\""}},
    {"TypeNumber", R"({"type":"number"})", {"0", "-7", "1.5", "1e3", "-2.5E-07", "0.0"},
     {"01", ".5", "1.", "1e", "--1", "NaN"}},
    {"TypeString", R"({"type":"string"})",
     {R"("")", R"("abc")", R"("a\"b")", R"("\\")", R"("\n\t")", R"("\u0001")",
      "\"\xC3\xA9\xE4\xB8\xAD\"", "\"\xF0\x9F\x98\x80\""},
     {R"("abc)", R"(abc")", "\"a\nb\"", R"("\x")", R"("\/")", "\"\xC3\"", "\"\xED\xA0\x80\"",
      "\"\xC0\xAF\""}},
    {"TypeList", R"({"type":["string","null"]})", {"null", R"("x")"}, {"1", "true"}},
    {"Nullable", R"({"type":"integer","nullable":true})", {"null", "3"}, {R"("3")"}},
    {"NoTypeAnyValue", R"({})",
     {"null", "1", R"("s")", "[]", "{}", R"({"a":[1,{"b":null}]})", "[[[1]]]"},
     {"{", "[1,]", R"({"a"})", "01", "[1 ]"}},
    {"Enum", R"({"enum":["red","green",3,null,{"a":1}]})",
     {R"("red")", R"("green")", "3", "3.0", "null", R"({"a":1})"}, {R"("blue")", "3.5", R"("Red")"}},
    {"EnumFilteredByType", R"({"type":"string","enum":["a",1]})", {R"("a")"}, {"1"}},
    {"Const", R"({"const":{"k":[1,"x"]}})", {R"({"k":[1,"x"]})"}, {R"({"k":[1]})"}},
    {"Properties",
     R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}})",
     {"{}", R"({"a":1})", R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({"a":1,"zz":[true]})"},
     {R"({"a":"1"})", R"({"b":2})", R"({"a":1,"a":2})", R"({"a":1,})"}},
    {"PropertiesInAnyOrder",
     R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"},"c":{"type":"string"}},"required":["b","c"]})",
     {R"({"c":"x","a":1,"b":true})", R"({"b":true,"c":"x"})", R"({"c":"x","b":false})",
      R"({"zz":1,"c":"x","b":false})", R"({"c":"x","zz":null,"a":2,"b":true})"},
     {R"({"b":true,"b":false,"c":"x"})", R"({"c":"x","b":true,"c":"y"})", R"({"c":"x","a":1})",
      R"({"a":1})", "{}", R"({"c":"x","b":true,"a":1,"a":1})"}},
    {"NestedPropertiesInAnyOrder",
     R"({"type":"object","properties":{"o":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false},"p":{"type":"integer"}},"required":["o","p"],"additionalProperties":false})",
     {R"({"p":3,"o":{"y":1,"x":2}})", R"({"o":{"x":1,"y":2},"p":3})"},
     {R"({"p":3,"o":{"y":1}})", R"({"o":{"y":1,"x":2,"y":3},"p":3})", R"({"o":{"x":1,"y":2}})",
      R"({"p":3,"o":{"x":1,"y":2},"p":4})"}},
    {"Required", R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})",
     {R"({"a":1})", R"({"a":1,"c":2})"}, {"{}", R"({"c":2})"}},
    {"RequiredNotDeclared", R"({"type":"object","required":["x"]})",
     {R"({"x":1})", R"({"x":{"y":[]}})", R"({"x":1,"y":2})"}, {"{}", R"({"y":2})"}},
    {"RequiredNotDeclaredFollowsAdditional",
     R"({"type":"object","required":["x"],"additionalProperties":{"type":"integer"}})",
     {R"({"x":1})"}, {R"({"x":"s"})"}},
    {"AdditionalPropertiesFalse",
     R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false})",
     {"{}", R"({"a":2})"}, {R"({"b":2})", R"({"a":2,"b":2})"}},
    {"AdditionalPropertiesSchema",
     R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
     {R"({"b":true})", R"({"a":1,"ab":false,"":true})"},
     {R"({"b":1})", R"({"a":true})", R"({"a":1,"a":true})"}},
    {"UnevaluatedPropertiesFalse", R"({"properties":{"a":{}},"unevaluatedProperties":false})",
     {R"({"a":1})"}, {R"({"b":1})"}},
    {"Items", R"({"type":"array","items":{"type":"integer"}})", {"[]", "[1]", "[1,2,3]"},
     {"[1,]", R"([1,"2"])", "[,1]"}},
    {"MinMaxItems", R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})",
     {"[1]", "[1,2]"}, {"[]", "[1,2,3]"}},
    {"PrefixItems", R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
     {"[]", R"(["a"])", R"(["a",1])"}, {R"(["a",1,2])", "[1]"}},
    {"ItemsArrayOldDraft",
     R"({"items":[{"type":"string"}],"additionalItems":{"type":"integer"}})",
     {R"(["a"])", R"(["a",1,2])"}, {R"(["a","b"])"}},
    {"MinMaxLength", R"({"type":"string","minLength":2,"maxLength":3})",
     {R"("ab")", R"("abc")", "\"\xC3\xA9\xC3\xA9\"", R"("\n\n")"}, {R"("a")", R"("abcd")"}},
    {"Pattern", R"({"type":"string","pattern":"^[a-z]+-[0-9]{2}$"})", {R"("ab-12")"},
     {R"("ab-1")", R"("Ab-12")", R"("ab-123")"}},
    {"PatternUnanchored", R"({"type":"string","pattern":"x[0-9]"})",
     {R"("x1")", R"("abx2yz")"}, {R"("x")", R"("abc")"}},
    {"PatternEscapedQuote", R"({"type":"string","pattern":"^a\"b\\\\$"})", {R"("a\"b\\")"},
     {R"("ab")"}},
    {"PatternAndLength", R"({"type":"string","pattern":"^[a-z]*$","minLength":2,"maxLength":3})",
     {R"("ab")", R"("abc")"}, {R"("a")", R"("abcd")", R"("aB")"}},
    {"FormatAndLength", R"({"type":"string","format":"email","maxLength":7})", {R"("a@b.com")"},
     {R"("ab@c.com")"}},
    {"FormatUri", R"({"type":"string","format":"uri"})",
     {R"("https://example.com/a/b?x=1#top")", R"("urn:isbn:0451450523")",
      R"("file:///path/to/a.js")", R"("irc://irc.example.org/room")",
      R"("wss://s1.example.com:443")", R"("ftp://user:pw@[::1]:21/x")"},
     {R"("example.com")", R"("http://exa mple.com")", R"("https://%zz")", R"("file://a b")",
      R"("irc://%zz")", R"("ftp://[::1/x")"}},
    {"PatternProperties",
     R"({"type":"object","properties":{"id":{"type":"integer"}},"patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false})",
     {R"({"id":1,"x-a":"s"})", R"({"x-":"t"})"}, {R"({"x-a":1})", R"({"y":"s"})", R"({"id":"1"})"}},
    {"PatternPropertiesOthersUnderAdditional",
     R"({"type":"object","properties":{"id":{}},"patternProperties":{"^x-":{"type":"string"}},"additionalProperties":{"type":"integer"}})",
     {R"({"x-a":"s","y":1})", R"({"y":2,"x-":"t","id":null})", R"({"x":3})"},
     {R"({"y":"s"})", R"({"x-a":1})", R"({"id":1,"id":2})"}},
    {"PatternPropertiesOthersFree", R"({"patternProperties":{"/.*/":{"type":"string"}}})",
     {R"({"session1":[1]})", R"({"a/b/":"s"})"}, {R"({"a/b/":1})", R"({"/x/":null})"}},
    {"PatternPropertiesEachKeyItsOwnPatterns",
     R"({"patternProperties":{"^a":{"type":"string"},"b$":{"type":"integer"}},"additionalProperties":false})",
     {R"({"ax":"s"})", R"({"xb":1})", R"({"ax":"s","xb":2})"},
     {R"({"ab":"s"})", R"({"ab":1})", R"({"c":1})", R"({"ax":1})"}},
    {"PatternPropertiesOnDeclaredName",
     R"({"properties":{"x-id":{"type":["integer","string"]}},"patternProperties":{"^x-":{"type":"string"}}})",
     {R"({"x-id":"a"})"}, {R"({"x-id":1})"}},
    {"OneOfClosedObjects",
     R"({"oneOf":[{"type":"object","properties":{"a":{}},"additionalProperties":false},{"type":"object","required":["b"]}]})",
     {R"({"a":1})", R"({"b":1})"}, {R"({"c":1})"}},
    {"FormatDate", R"({"type":"string","format":"date"})", {R"("2024-02-28")", R"("1999-12-31")"},
     {R"("2024-02-30")", R"("2024-13-01")", R"("2024-1-01")", R"("2024-04-31")"}},
    {"FormatDateTime", R"({"type":"string","format":"date-time"})",
     {R"("2024-01-05T10:20:30Z")", R"("2024-01-05T10:20:30.5+02:00")"},
     {R"("2024-01-05 10:20:30Z")", R"("2024-01-05T25:00:00Z")", R"("2024-01-05T10:20:30")"}},
    {"FormatUuid", R"({"type":"string","format":"uuid"})",
     {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567e89b12d3a456426614174000")"}},
    {"FormatEmail", R"({"type":"string","format":"email"})", {R"("a.b@example.com")"},
     {R"("a@b")", R"("@example.com")", R"("a b@example.com")"}},
    {"IntegerRange", R"({"type":"integer","minimum":-15,"maximum":120})",
     {"-15", "-1", "0", "9", "99", "120"}, {"-16", "121", "1000", "-100"}},
    {"IntegerExclusive", R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})",
     {"1", "9"}, {"0", "10"}},
    {"IntegerExclusiveDraft4", R"({"type":"integer","minimum":5,"exclusiveMinimum":true})",
     {"6", "60"}, {"5", "-6"}},
    {"IntegerFractionalBounds", R"({"type":"integer","minimum":1.5,"maximum":3.5})", {"2", "3"},
     {"1", "4"}},
    {"NumberRange", R"({"type":"number","minimum":0,"maximum":10})",
     {"0", "0.5", "10", "10.0", "9.99"}, {"-0.5", "10.5", "11", "10.01"}},
    {"NumberExclusive", R"({"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":0})",
     {"-1.5", "-1", "-0.1"}, {"0", "-2", "-2.0", "0.5"}},
    {"AnyOf", R"({"anyOf":[{"type":"string","maxLength":1},{"type":"integer"}]})",
     {R"("a")", "5"}, {R"("ab")", "true"}},
    {"AnyOfWithSiblings",
     R"({"type":"object","required":["k"],"anyOf":[{"properties":{"k":{"const":1}}},{"properties":{"k":{"const":2}}}]})",
     {R"({"k":1})", R"({"k":2})"}, {R"({"k":3})", "{}"}},
    {"OneOfDisjointTypes", R"({"oneOf":[{"type":"string"},{"type":"boolean"}]})",
     {R"("s")", "true"}, {"1"}},
    {"OneOfDiscriminator",
     R"({"oneOf":[{"type":"object","properties":{"t":{"const":"a"},"x":{"type":"integer"}},"required":["t"],"additionalProperties":false},{"type":"object","properties":{"t":{"const":"b"},"y":{"type":"string"}},"required":["t"],"additionalProperties":false}]})",
     {R"({"t":"a","x":1})", R"({"t":"b","y":"s"})"}, {R"({"t":"a","y":"s"})", R"({"t":"c"})"}},
    {"AllOf",
     R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"a":{"minimum":3},"b":{"type":"string"}},"required":["b"]}]})",
     {R"({"a":3,"b":"x"})"}, {R"({"a":2,"b":"x"})", R"({"a":3})", R"({"b":"x"})"}},
    {"AllOfKeepsPropertyOrder",
     R"({"$defs":{"base":{"properties":{"a":{},"b":{}}}},"allOf":[{"$ref":"#/$defs/base"},{"properties":{"c":{}}}],"properties":{"d":{}}})",
     {R"({"a":1,"b":2,"c":3,"d":4})"}, {}},
    {"AllOfAdditionalFalseOnOneSide",
     R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]})",
     {R"({"a":1})"}, {R"({"b":1})", R"({"a":1,"b":1})"}},
    {"RefDefs", R"({"$defs":{"p":{"type":"integer","minimum":1}},"type":"array","items":{"$ref":"#/$defs/p"}})",
     {"[1,2]"}, {"[0]"}},
    {"RefDefinitions", R"({"definitions":{"s":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/s"}}})",
     {R"({"x":"a"})"}, {R"({"x":1})"}},
    {"RefWithSiblings", R"({"$defs":{"n":{"type":"integer"}},"$ref":"#/$defs/n","maximum":5})",
     {"5", "-1"}, {"6", R"("5")"}},
    {"RefReplacesSiblingsDraft7",
     R"({"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"o":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}},"properties":{"s":{"type":"string","$ref":"#/definitions/o"}}})",
     {R"({"s":{"a":1}})", "{}"}, {R"({"s":"x"})", R"({"s":{}})"}},
    {"RefReplacesSiblingsDraft4InAllOf",
     R"({"$schema":"http://json-schema.org/draft-04/schema#","definitions":{"n":{"type":"integer"}},"allOf":[{"$ref":"#/definitions/n","maximum":5}]})",
     {"7", "-1"}, {R"("7")"}},
    {"EnumIntegralNumberBothSpellings", R"({"enum":[2.0,"a",-3]})",
     {"2", "2.0", R"("a")", "-3", "-3.0"}, {"2.5", "20", "3", "-3.5"}},
    {"ConstIntegralNumberUnderType", R"({"type":"number","const":4})", {"4", "4.0"},
     {"4.5", "40"}},
    {"RefRecursive",
     R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/node"}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
     {R"({"v":1})", R"({"v":1,"next":{"v":2,"next":{"v":3}}})"},
     {R"({"v":1,"next":{}})", R"({"next":{"v":2}})"}},
    {"RefRoot", R"({"type":"array","items":{"$ref":"#"},"maxItems":2})",
     {"[]", "[[]]", "[[],[[]]]"}, {"[1]", "[[],[],[]]"}},
    {"BooleanSchemas", R"({"properties":{"yes":true,"no":false}})",
     {R"({"yes":[1]})", "{}"}, {R"({"no":1})"}},
};

INSTANTIATE_TEST_SUITE_P(Keywords, KeywordTest, ::testing::ValuesIn(kCases), CaseName);

// `depth` arrays around 1: the 1 is a member at level `depth`.
std::string Nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') + "1" +
         std::string(static_cast<size_t>(depth), ']');
}

TEST(FreeValueTest, NestsUpToTheDepthLimit) {
  const auto trie = testing::SmallVocabulary();
  // The unconstrained value is the whole text, or the value of another key.
  for (const char* schema : {"true", R"({"type":"object","properties":{"a":{"type":"integer"}}})"}) {
    auto grammar = CompileJsonSchemaText(schema, SchemaCompileOptions());
    ASSERT_TRUE(grammar.ok()) << grammar.status();
    const bool object = std::string(schema) != "true";
    auto text = [&](int depth) {
      return object ? R"({"a":1,"z":)" + Nested(depth) + "}" : Nested(depth);
    };
    for (int depth : {5, 20, SchemaCompileOptions().max_any_depth}) {
      const testing::Verdicts v = testing::Check(*grammar, trie, text(depth));
      EXPECT_TRUE(v.reference && v.dfa && v.tokens) << schema << " depth " << depth;
    }
    // One deeper: a member past the limit is refused (the container holding
    // it may still be written empty).
    const std::string deeper = text(SchemaCompileOptions().max_any_depth + 1);
    const testing::Verdicts v = testing::Check(*grammar, trie, deeper);
    EXPECT_FALSE(v.reference || v.dfa || v.tokens) << schema;
    GrammarMatcher matcher(*grammar, trie, MatcherOptions());
    const size_t last_open = deeper.rfind('[');
    EXPECT_TRUE(matcher.AcceptBytes(deeper.substr(0, last_open + 1)).ok()) << schema;
    EXPECT_FALSE(matcher.CanAccept("1")) << schema;
    EXPECT_FALSE(matcher.CanAccept("[")) << schema;
    EXPECT_TRUE(matcher.CanAccept("]")) << schema;
  }
}

TEST(FreeValueTest, DepthLimitIsAnOption) {
  SchemaCompileOptions options;
  options.max_any_depth = 2;
  auto grammar = CompileJsonSchemaText("true", options);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_TRUE(GrammarAccepts(**grammar, Nested(2)));
  EXPECT_TRUE(GrammarAccepts(**grammar, "[[[]]]"));  // empty at level 2
  EXPECT_FALSE(GrammarAccepts(**grammar, Nested(3)));
  // A typeless {} writes its own array: its items are the unconstrained values.
  auto typeless = CompileJsonSchemaText("{}", options);
  ASSERT_TRUE(typeless.ok()) << typeless.status();
  EXPECT_TRUE(GrammarAccepts(**typeless, Nested(3)));
  EXPECT_FALSE(GrammarAccepts(**typeless, Nested(4)));
}

}  // namespace
}  // namespace colibri::grammar
