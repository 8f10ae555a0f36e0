// What the compiler cannot enforce is an error naming the keyword and where it
// is; hostile schemas end in clean errors within bounded time and memory.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/grammar/json_schema_compiler.h"

namespace colibri::grammar {
namespace {

using ::testing::HasSubstr;

absl::Status Compile(const std::string& schema) {
  return CompileJsonSchemaText(schema, SchemaCompileOptions()).status();
}

struct ErrorCase {
  const char* schema;
  const char* message;  // a part of the error
};

TEST(SchemaErrorsTest, NamesTheKeywordAndPointer) {
  const ErrorCase cases[] = {
      {"{\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"(?=x)\"}}}",
       "#/properties/a: pattern: "},
      {"{\"pattern\":\"(a)\\\\1\",\"type\":\"string\"}", "backreferences"},
      {R"({"type":"string","format":"hostname"})",
       "#: format: format \"hostname\" is not supported"},
      {R"({"not":{"type":"string"}})", "#: not: is not supported"},
      {R"({"if":{},"then":{}})", "#: if: is not supported"},
      {R"({"type":"number","multipleOf":2})", "#: multipleOf: is not supported"},
      {R"({"type":"array","uniqueItems":true})", "#: uniqueItems: "},
      {R"({"type":"array","contains":{}})", "#: contains: "},
      {R"({"type":"object","propertyNames":{"maxLength":3}})", "#: propertyNames: "},
      {R"({"type":"object","minProperties":2})", "#: minProperties: "},
      {R"({"items":{"$ref":"http://example.com/s.json"}})", "#/items: $ref: "},
      {R"({"$ref":"#/$defs/missing"})", "points to nothing"},
      {R"({"oneOf":[{"type":"integer"},{"minimum":0}]})",
       "#: oneOf: alternatives 0 and 1 may both match"},
      {R"({"type":"number","minimum":0.5})", "#: minimum: a fractional bound"},
      {R"({"type":"integer","maximum":1e30})", "#: maximum: bounds beyond"},
      {R"({"type":"bogus"})", "#: type: \"bogus\" is not a JSON type"},
      {R"({"properties":{"a":{"minLength":-1}}})", "#/properties/a: minLength: "},
      {R"({"allOf":[{"type":"string","pattern":"a"},{"pattern":"b"}]})", "#: allOf: "},
      {R"({"properties":{"\u00e9":{}}})", "#: additionalProperties: property name"},
      {R"({"allOf":[{"enum":5},{"enum":6}]})", "#: allOf: allOf: enum is not an array"},
      {R"({"enum":5})", "#: enum: is not an array"},
  };
  for (const ErrorCase& c : cases) {
    const absl::Status status = Compile(c.schema);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.schema << " " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.schema;
  }
}

TEST(SchemaErrorsTest, NotJson) {
  for (const char* text : {"", "{", "not json", "{\"type\":}", "[1,2"}) {
    const absl::Status status = Compile(text);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(status.message()), HasSubstr("not valid JSON"));
  }
  EXPECT_THAT(std::string(Compile("42").message()), HasSubstr("neither an object nor a boolean"));
}

TEST(SchemaErrorsTest, RefCycleWithoutText) {
  EXPECT_THAT(std::string(Compile(R"({"$ref":"#"})").message()), HasSubstr("no base case"));
  EXPECT_THAT(std::string(Compile(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").message()),
              HasSubstr("no base case"));
  EXPECT_EQ(Compile(R"({"allOf":[{"$ref":"#"}]})").code(), absl::StatusCode::kInvalidArgument);
}

TEST(SchemaErrorsTest, RecursionWithoutBaseCaseAcceptsNothing) {
  // Every node must hold another: no finite instance.
  const absl::Status status = Compile(
      R"({"type":"object","properties":{"next":{"$ref":"#"}},"required":["next"]})");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no finite instance"));
}

TEST(SchemaErrorsTest, RequiredValueWithNoInstanceDeepInside) {
  // The innermost required value has no instance, so neither has any object
  // around it; an optional sibling proven once does not hide that.
  const absl::Status status = Compile(
      R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":false,"d":{"type":"integer"}},"required":["d","c"]}},"required":["b"]},"e":{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}},"required":["e","a"]})");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("no finite instance"));
  EXPECT_TRUE(
      Compile(
          R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"d":{"type":"integer"}},"required":["d"]}},"required":["b"]}},"required":["a"]})")
          .ok());
}

TEST(SchemaErrorsTest, DeepNesting) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "{\"items\":";
  deep += "{}";
  for (int i = 0; i < 100000; ++i) deep += "}";
  const absl::Status status = Compile(deep);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  std::string nested_schemas;
  for (int i = 0; i < 200; ++i) nested_schemas += "{\"items\":";
  nested_schemas += "{}";
  for (int i = 0; i < 200; ++i) nested_schemas += "}";
  EXPECT_THAT(std::string(Compile(nested_schemas).message()), HasSubstr("nests deeper than"));
}

TEST(SchemaErrorsTest, StackedQuantifiers) {
  const std::string pattern = "a" + std::string(100000, '*');
  const absl::Status status =
      Compile("{\"type\":\"string\",\"pattern\":\"" + pattern + "\"}");
  EXPECT_THAT(std::string(status.message()), HasSubstr("more than 8 quantifiers"));
}

TEST(SchemaErrorsTest, HugeBoundsAreResourceErrors) {
  for (const char* schema :
       {R"({"type":"string","maxLength":1000000000})", R"({"type":"string","minLength":100000000})",
        R"({"type":"array","maxItems":1000000000})",
        R"({"type":"array","items":{"type":"array","items":{"type":"string","maxLength":500},"maxItems":500},"maxItems":500})"}) {
    const absl::Status status = Compile(schema);
    EXPECT_FALSE(status.ok()) << schema;
    EXPECT_TRUE(status.code() == absl::StatusCode::kResourceExhausted ||
                status.code() == absl::StatusCode::kInvalidArgument)
        << schema << " " << status;
  }
}

TEST(SchemaErrorsTest, OutOfStatesRetriesShallower) {
  const char* kList = R"({"type":"object","properties":{"next":{"$ref":"#"}}})";
  SchemaCompileOptions one;
  one.max_ref_depth = 1;
  auto shallow = CompileJsonSchemaText(kList, one);
  ASSERT_TRUE(shallow.ok()) << shallow.status();
  SchemaCompileOptions tight;  // $ref depth 4 (and 2) do not fit, depth 1 does
  tight.max_nfa_states = (*shallow)->nfa.size() + 10;
  auto grammar = CompileJsonSchemaText(kList, tight);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_TRUE(GrammarAccepts(**grammar, R"({"next":{}})"));
  EXPECT_FALSE(GrammarAccepts(**grammar, R"({"next":{"next":{"next":{}}}})"));
  auto full = CompileJsonSchemaText(kList, SchemaCompileOptions());
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(GrammarAccepts(**full, R"({"next":{"next":{"next":{}}}})"));
}

TEST(SchemaErrorsTest, HugeEnumWithinBudget) {
  std::string values;
  for (int i = 0; i < 200000; ++i) values += (i ? ",\"value" : "\"value") + std::to_string(i) + "\"";
  const absl::Status status = Compile("{\"enum\":[" + values + "]}");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  SchemaCompileOptions small;
  small.max_nfa_states = 100;
  EXPECT_EQ(CompileJsonSchemaText(R"({"type":"string","format":"email"})", small).status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace colibri::grammar
