// The output constraints a client asks for, compiled: response formats, and
// tool calls in each family's syntax that the family's parser reads back.
#include "coordinator/api/output_constraint.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/api/assistant_output.h"
#include "gtest/gtest.h"
#include "model/grammar/json_schema_compiler.h"

namespace colibri::coordinator {
namespace {

using json = nlohmann::ordered_json;
using Format = OutputConstraintRequest::Format;
using Choice = OutputConstraintRequest::ToolChoice;
using Grammar = std::shared_ptr<const grammar::CompiledGrammar>;

const char kDsCallsBegin[] =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "calls\xE2\x96\x81"
    "begin\xEF\xBD\x9C>";
const char kDsCallsEnd[] =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "calls\xE2\x96\x81"
    "end\xEF\xBD\x9C>";
const char kDsCallBegin[] =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "call\xE2\x96\x81"
    "begin\xEF\xBD\x9C>";
const char kDsCallEnd[] =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "call\xE2\x96\x81"
    "end\xEF\xBD\x9C>";
const char kDsSep[] =
    "<\xEF\xBD\x9Ctool\xE2\x96\x81"
    "sep\xEF\xBD\x9C>";

json Tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
      "required": ["city"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now"}}])");
}

Grammar Compile(const OutputConstraintRequest& request, ToolDialect dialect,
                const json& tools = Tools()) {
  std::string param;
  absl::StatusOr<Grammar> g = CompileOutputConstraint(request, tools, dialect, &param);
  EXPECT_TRUE(g.ok()) << g.status() << " param " << param;
  return g.ok() ? *g : nullptr;
}

// The error of `request` and the field it names.
std::pair<absl::Status, std::string> ErrorOf(const OutputConstraintRequest& request,
                                             ToolDialect dialect, const json& tools = Tools()) {
  std::string param;
  absl::StatusOr<Grammar> g = CompileOutputConstraint(request, tools, dialect, &param);
  EXPECT_FALSE(g.ok());
  return {g.status(), param};
}

OutputConstraintRequest Required(bool parallel) {
  OutputConstraintRequest r;
  r.tool_choice = Choice::kRequired;
  r.parallel_tool_calls = parallel;
  return r;
}

// The calls the dialect's parser reads out of `text`, fed byte by byte.
std::vector<ToolCall> Parsed(ToolDialect dialect, const std::string& text) {
  OutputDialect d;
  d.tools = dialect;
  AssistantOutputParser parser(d, true, "call_");
  OutputDelta all;
  for (char c : text) all.Append(parser.Feed(std::string(1, c)));
  all.Append(parser.Finish());
  EXPECT_EQ(all.content, "") << text;
  return all.tool_calls;
}

TEST(OutputConstraintTest, FreeTextHasNoGrammar) {
  std::string param;
  absl::StatusOr<Grammar> g =
      CompileOutputConstraint(OutputConstraintRequest(), Tools(), ToolDialect::kHermes, &param);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, nullptr);
  OutputConstraintRequest none;
  none.tool_choice = Choice::kNone;
  EXPECT_EQ(*CompileOutputConstraint(none, Tools(), ToolDialect::kHermes, &param), nullptr);
}

TEST(OutputConstraintTest, ResponseFormatsCompileOrNameWhatCannotBeEnforced) {
  OutputConstraintRequest object;
  object.format = Format::kJsonObject;
  Grammar g = Compile(object, ToolDialect::kNone);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(grammar::GrammarAccepts(*g, R"({"a":[1,"x"]})"));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, "[1]"));

  OutputConstraintRequest strict;
  strict.format = Format::kJsonSchema;
  strict.json_schema = {{"type", "object"},
                        {"properties", {{"n", {{"type", "integer"}, {"maximum", 5}}}}},
                        {"required", {"n"}},
                        {"additionalProperties", false}};
  g = Compile(strict, ToolDialect::kNone);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(grammar::GrammarAccepts(*g, R"({"n":5})"));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, R"({"n":6})"));

  OutputConstraintRequest lookaround;
  lookaround.format = Format::kJsonSchema;
  lookaround.json_schema = {{"type", "object"},
                            {"properties", {{"a", {{"type", "string"}, {"pattern", "(?=x)"}}}}}};
  auto [status, param] = ErrorOf(lookaround, ToolDialect::kNone);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(param, "response_format");
  EXPECT_NE(status.message().find("pattern"), std::string::npos) << status;
  EXPECT_NE(status.message().find("#/properties/a"), std::string::npos) << status;

  // A schema whose automaton would be huge is refused within the bounds.
  json huge = {{"type", "string"}, {"maxLength", 300}};
  for (int depth = 0; depth < 4; ++depth) {
    huge = {{"type", "array"}, {"items", huge}, {"maxItems", 300}};
  }
  OutputConstraintRequest big;
  big.format = Format::kJsonSchema;
  big.json_schema = huge;
  auto [big_status, big_param] = ErrorOf(big, ToolDialect::kNone);
  EXPECT_EQ(big_status.code(), absl::StatusCode::kInvalidArgument) << big_status;
  EXPECT_EQ(big_param, "response_format");
  EXPECT_NE(big_status.message().find("automaton states"), std::string::npos) << big_status;
}

// Hermes: <tool_call> blocks naming one of the tools with arguments of its
// schema; the words the grammar takes are the calls the parser reads.
TEST(OutputConstraintTest, HermesCallsFollowTheirFunctionsSchemas) {
  Grammar one = Compile(Required(false), ToolDialect::kHermes);
  ASSERT_NE(one, nullptr);
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>";
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(grammar::GrammarAccepts(*one, weather));
  EXPECT_TRUE(grammar::GrammarAccepts(*one, now));
  EXPECT_FALSE(grammar::GrammarAccepts(*one, weather + "\n" + now));  // one call only
  EXPECT_FALSE(grammar::GrammarAccepts(
      *one,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\":\"Paris\"}}\n"
      "</tool_call>"));
  EXPECT_FALSE(grammar::GrammarAccepts(
      *one,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Parisienne\"}}"
      "\n</tool_call>"));  // maxLength 8
  EXPECT_FALSE(grammar::GrammarAccepts(
      *one, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(grammar::GrammarAccepts(*one, "{\"name\": \"now\", \"arguments\": {}}"));

  const std::vector<ToolCall> calls = Parsed(ToolDialect::kHermes, weather);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, "{\"city\":\"Paris\"}");

  Grammar parallel = Compile(Required(true), ToolDialect::kHermes);
  ASSERT_NE(parallel, nullptr);
  std::string calls4 = weather;
  for (int i = 1; i < kMaxParallelToolCalls; ++i) calls4 += "\n" + now;
  EXPECT_TRUE(grammar::GrammarAccepts(*parallel, weather + "\n" + now));
  EXPECT_TRUE(grammar::GrammarAccepts(*parallel, calls4));
  EXPECT_FALSE(grammar::GrammarAccepts(*parallel, calls4 + "\n" + now));
  EXPECT_EQ(Parsed(ToolDialect::kHermes, calls4).size(), size_t{kMaxParallelToolCalls});

  OutputConstraintRequest named = Required(false);
  named.tool_choice = Choice::kNamed;
  named.tool_name = "now";
  Grammar only_now = Compile(named, ToolDialect::kHermes);
  ASSERT_NE(only_now, nullptr);
  EXPECT_TRUE(grammar::GrammarAccepts(*only_now, now));
  EXPECT_FALSE(grammar::GrammarAccepts(*only_now, weather));
}

// DeepSeek-V3: one calls block holding the V3.1-form calls.
TEST(OutputConstraintTest, DeepSeekCallsSitInOneBlock) {
  Grammar g = Compile(Required(true), ToolDialect::kDeepSeekV3);
  ASSERT_NE(g, nullptr);
  const std::string weather =
      std::string(kDsCallBegin) + "get_weather" + kDsSep + "{\"city\":\"Oslo\"}" + kDsCallEnd;
  const std::string now = std::string(kDsCallBegin) + "now" + kDsSep + "{}" + kDsCallEnd;
  const std::string two = kDsCallsBegin + weather + now + kDsCallsEnd;
  EXPECT_TRUE(grammar::GrammarAccepts(*g, two));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, kDsCallsBegin + weather + kDsCallsEnd + now));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, weather));
  const std::vector<ToolCall> calls = Parsed(ToolDialect::kDeepSeekV3, two);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_EQ(calls[1].name, "now");
}

// GLM-4.5: key/value pairs in the declared order, raw text for string-only
// parameters (bounded, without the closing tags), JSON for the others;
// required keys present, optional ones optional, none twice; what the parser
// reads back (given the tools) are the arguments as typed.
TEST(OutputConstraintTest, Glm45CallsAreKeyValuePairsThatParseBackTyped) {
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object",
      "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]},
                     "days": {"type": "integer", "minimum": 1, "maximum": 7},
                     "note": {"type": "string"}},
      "required": ["city", "unit", "days"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}])");
  Grammar g = Compile(Required(true), ToolDialect::kGlm45, tools);
  ASSERT_NE(g, nullptr);
  const auto arg = [](const std::string& k, const std::string& v) {
    return "<arg_key>" + k + "</arg_key>\n<arg_value>" + v + "</arg_value>\n";
  };
  const std::string weather = "<tool_call>get_weather\n" + arg("city", "12") + arg("unit", "f") +
                              arg("days", "3") + "</tool_call>";
  const std::string now = "<tool_call>now\n</tool_call>";
  EXPECT_TRUE(grammar::GrammarAccepts(*g, weather));
  EXPECT_TRUE(grammar::GrammarAccepts(*g, weather + "\n" + now));
  EXPECT_TRUE(grammar::GrammarAccepts(
      *g, "<tool_call>get_weather\n" + arg("city", "a <b> c") + arg("unit", "c") +
              arg("days", "7") + arg("note", "x</arg_valu") + "</tool_call>"));
  // Too long, an order that is not the declared one, a repeated key, a
  // missing required one, a value out of its schema, a closing tag inside.
  EXPECT_FALSE(grammar::GrammarAccepts(
      *g, "<tool_call>get_weather\n" + arg("city", "Reykjavik") + arg("unit", "f") +
              arg("days", "3") + "</tool_call>"));
  EXPECT_FALSE(grammar::GrammarAccepts(
      *g, "<tool_call>get_weather\n" + arg("unit", "f") + arg("city", "Oslo") + arg("days", "3") +
              "</tool_call>"));
  EXPECT_FALSE(grammar::GrammarAccepts(
      *g, "<tool_call>get_weather\n" + arg("city", "Oslo") + arg("city", "Oslo") +
              arg("unit", "f") + arg("days", "3") + "</tool_call>"));
  EXPECT_FALSE(grammar::GrammarAccepts(
      *g, "<tool_call>get_weather\n" + arg("city", "Oslo") + arg("days", "3") + "</tool_call>"));
  EXPECT_FALSE(grammar::GrammarAccepts(
      *g, "<tool_call>get_weather\n" + arg("city", "Oslo") + arg("unit", "k") + arg("days", "3") +
              "</tool_call>"));
  EXPECT_FALSE(grammar::GrammarAccepts(
      *g, "<tool_call>get_weather\n" + arg("city", "Oslo") + arg("unit", "f") + arg("days", "9") +
              "</tool_call>"));
  EXPECT_FALSE(grammar::GrammarAccepts(
      *g, "<tool_call>get_weather\n" + arg("city", "Oslo") + arg("unit", "f") + arg("days", "3") +
              arg("note", "a</tool_call>") + "</tool_call>"));

  OutputDialect d;
  d.tools = ToolDialect::kGlm45;
  AssistantOutputParser parser(d, true, "call_");
  parser.set_tools(tools);
  OutputDelta all = parser.Feed(weather + "\n" + now);
  all.Append(parser.Finish());
  EXPECT_EQ(all.content, "");
  ASSERT_EQ(all.tool_calls.size(), 2u);
  EXPECT_EQ(all.tool_calls[0].name, "get_weather");
  EXPECT_EQ(all.tool_calls[0].arguments, "{\"city\":\"12\",\"unit\":\"f\",\"days\":3}");
  EXPECT_EQ(all.tool_calls[1].name, "now");
  EXPECT_EQ(all.tool_calls[1].arguments, "{}");

  // Without parallel calls, one call only.
  Grammar one = Compile(Required(false), ToolDialect::kGlm45, tools);
  ASSERT_NE(one, nullptr);
  EXPECT_TRUE(grammar::GrammarAccepts(*one, now));
  EXPECT_FALSE(grammar::GrammarAccepts(*one, now + "\n" + now));

  // What raw text or a fixed key order cannot follow is refused by name.
  json pattern = tools;
  pattern[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^[A-Z]";
  auto [raw, raw_param] = ErrorOf(Required(true), ToolDialect::kGlm45, pattern);
  EXPECT_EQ(raw_param, "tools");
  EXPECT_NE(raw.message().find("'pattern'"), std::string::npos) << raw;
  json min_properties = tools;
  min_properties[1]["function"]["parameters"]["minProperties"] = 1;
  auto [object, object_param] = ErrorOf(Required(true), ToolDialect::kGlm45, min_properties);
  EXPECT_EQ(object_param, "tools");
  EXPECT_NE(object.message().find("'minProperties'"), std::string::npos) << object;
}

// GLM-4.5 values that are JSON objects keep their keys in any order and
// cannot hold the closing tags; a free JSON value is refused by name.
TEST(OutputConstraintTest, Glm45ObjectValuesTakeAnyKeyOrderAndFreeValuesAreRefused) {
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "move", "parameters": {
      "type": "object",
      "properties": {"to": {"type": "object",
                            "properties": {"x": {"type": "integer"},
                                           "tag": {"type": "string", "maxLength": 16}},
                            "required": ["x", "tag"], "additionalProperties": false}},
      "required": ["to"], "additionalProperties": false}}}])");
  Grammar g = Compile(Required(true), ToolDialect::kGlm45, tools);
  ASSERT_NE(g, nullptr);
  const auto call = [](const std::string& value) {
    return "<tool_call>move\n<arg_key>to</arg_key>\n<arg_value>" + value +
           "</arg_value>\n</tool_call>";
  };
  EXPECT_TRUE(grammar::GrammarAccepts(*g, call(R"({"x":1,"tag":"a"})")));
  EXPECT_TRUE(grammar::GrammarAccepts(*g, call(R"({"tag":"a<b","x":1})")));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, call(R"({"tag":"</arg_value>","x":1})")));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, call(R"({"x":1})")));

  json free = tools;
  free[0]["function"]["parameters"]["properties"]["to"] = json::object();
  auto [error, param] = ErrorOf(Required(true), ToolDialect::kGlm45, free);
  EXPECT_EQ(param, "tools");
  EXPECT_NE(error.message().find("parameter 'to' of function 'move'"), std::string::npos)
      << error;
}

// gpt-oss: a harmony header naming the function, its JSON arguments, one
// call per reply; the harmony parser reads the call back.
TEST(OutputConstraintTest, HarmonyCallsHaveControlTokenHeaders) {
  Grammar g = Compile(Required(true), ToolDialect::kHarmony);
  ASSERT_NE(g, nullptr);
  const auto call = [](const std::string& name, const std::string& args) {
    return "<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>" + args;
  };
  EXPECT_TRUE(grammar::GrammarAccepts(*g, call("get_weather", "{\"city\":\"Oslo\"}")));
  EXPECT_TRUE(grammar::GrammarAccepts(*g, call("now", "{}")));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, call("get_weather", "{\"town\":\"Oslo\"}")));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, call("now", "{}") + call("now", "{}")));
  EXPECT_FALSE(grammar::GrammarAccepts(*g, call("absent", "{}")));
  EXPECT_FALSE(grammar::GrammarAccepts(
      *g, "<|channel|>analysis to=functions.now <|constrain|>json<|message|>{}"));

  OutputDialect d;
  d.tools = ToolDialect::kHarmony;
  AssistantOutputParser parser(d, true, "call_");
  OutputDelta all = parser.Feed(call("get_weather", "{\"city\":\"Oslo\"}") + "<|call|>");
  all.Append(parser.Finish());
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].name, "get_weather");
  EXPECT_EQ(all.tool_calls[0].arguments, "{\"city\":\"Oslo\"}");
}

TEST(OutputConstraintTest, WhatCannotBeConstrainedNamesItsField) {
  auto [none, none_param] = ErrorOf(Required(true), ToolDialect::kNone);
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none_param, "tool_choice");

  OutputConstraintRequest missing = Required(true);
  missing.tool_choice = Choice::kNamed;
  missing.tool_name = "absent";
  EXPECT_EQ(ErrorOf(missing, ToolDialect::kHermes).second, "tool_choice");
  EXPECT_EQ(ErrorOf(Required(true), ToolDialect::kHermes, json::array()).second, "tool_choice");

  json bad_params = Tools();
  bad_params[0]["function"]["parameters"] = {{"type", "string"}};
  auto [params, params_param] = ErrorOf(Required(true), ToolDialect::kHermes, bad_params);
  EXPECT_EQ(params_param, "tools");
  EXPECT_NE(params.message().find("get_weather"), std::string::npos) << params;
  json nameless = Tools();
  nameless[1]["function"].erase("name");
  EXPECT_EQ(ErrorOf(Required(true), ToolDialect::kHermes, nameless).second, "tools");

  // Many functions share one automaton budget: each fits, together they do
  // not, and the request is refused without compiling them all.
  json many = json::array();
  json wide = {{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
  for (int p = 0; p < 40; ++p) {
    wide["properties"][absl::StrCat("p", p)] = {{"type", "string"}, {"maxLength", 40}};
  }
  for (int f = 0; f < 200; ++f) {
    many.push_back({{"type", "function"},
                    {"function", {{"name", absl::StrCat("f", f)}, {"parameters", wide}}}});
  }
  OutputConstraintRequest one_of_many = Required(false);
  one_of_many.tool_choice = Choice::kNamed;
  one_of_many.tool_name = "f7";
  EXPECT_NE(Compile(one_of_many, ToolDialect::kHermes, many), nullptr);
  auto [too_many, too_many_param] = ErrorOf(Required(false), ToolDialect::kHermes, many);
  EXPECT_EQ(too_many_param, "tools");
  EXPECT_NE(too_many.message().find("the parameters of function 'f"), std::string::npos)
      << too_many;  // refused while compiling the functions, not after

  OutputConstraintRequest both = Required(true);
  both.format = Format::kJsonObject;
  EXPECT_EQ(ErrorOf(both, ToolDialect::kHermes).second, "tool_choice");
}

}  // namespace
}  // namespace colibri::coordinator
