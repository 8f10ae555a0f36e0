// AssistantOutputParser on texts written the way each model family writes
// its thinking and tool calls: the split a whole text gives, the same split
// when the text arrives a byte at a time (markers cut anywhere), and the
// text given back unchanged when a block does not parse or never closes.
#include "coordinator/api/assistant_output.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

OutputDialect Dialect(ToolDialect tools, bool think = false, bool starts_in_reasoning = false) {
  OutputDialect d;
  d.tools = tools;
  d.think = think;
  d.starts_in_reasoning = starts_in_reasoning;
  return d;
}

OutputDelta Whole(const OutputDialect& d, const std::string& text, bool tools = true) {
  AssistantOutputParser p(d, tools, "call_");
  OutputDelta out = p.Feed(text);
  out.Append(p.Finish());
  return out;
}

// The same text fed one byte at a time.
OutputDelta Bytewise(const OutputDialect& d, const std::string& text, bool tools = true) {
  AssistantOutputParser p(d, tools, "call_");
  OutputDelta out;
  for (char c : text) out.Append(p.Feed(std::string(1, c)));
  out.Append(p.Finish());
  return out;
}

void ExpectSame(const OutputDelta& a, const OutputDelta& b) {
  EXPECT_EQ(a.content, b.content);
  EXPECT_EQ(a.reasoning, b.reasoning);
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    EXPECT_EQ(a.tool_calls[i].id, b.tool_calls[i].id);
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name);
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments);
  }
}

TEST(AssistantOutputTest, HermesToolCallsAfterThinking) {
  const OutputDialect d = Dialect(ToolDialect::kHermes, /*think=*/true);
  const std::string text =
      "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": "
      "\\\"CET\\\"}\"}\n</tool_call>";
  const OutputDelta out = Whole(d, text);
  EXPECT_EQ(out.reasoning, "\nThe user wants the weather.\n");
  EXPECT_EQ(out.content, "Let me check.\n");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].id, "call_0");
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\":\"Paris\",\"days\":2}");
  EXPECT_EQ(out.tool_calls[1].id, "call_1");
  EXPECT_EQ(out.tool_calls[1].name, "get_time");
  EXPECT_EQ(out.tool_calls[1].arguments, "{\"tz\":\"CET\"}");  // a string holding JSON
  ExpectSame(out, Bytewise(d, text));
}

TEST(AssistantOutputTest, APromptThatOpenedTheThinkBlockStartsInReasoning) {
  const OutputDialect d = Dialect(ToolDialect::kNone, true, /*starts_in_reasoning=*/true);
  const OutputDelta out = Whole(d, "first, 2 + 2 = 4</think>\n\nThe answer is 4.");
  EXPECT_EQ(out.reasoning, "first, 2 + 2 = 4");
  EXPECT_EQ(out.content, "The answer is 4.");
  ExpectSame(out, Bytewise(d, "first, 2 + 2 = 4</think>\n\nThe answer is 4."));
  // Never closed: all of it is reasoning.
  const OutputDelta cut = Whole(d, "still thinking <");
  EXPECT_EQ(cut.reasoning, "still thinking <");
  EXPECT_EQ(cut.content, "");
}

TEST(AssistantOutputTest, Glm45ArgumentsAreJsonWhereTheyParse) {
  const OutputDialect d = Dialect(ToolDialect::kGlm45, true);
  const std::string text =
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
      "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>units</arg_key>\n"
      "<arg_value>[\"C\"]</arg_value>\n</tool_call>";
  const OutputDelta out = Whole(d, text);
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\":\"Paris\",\"days\":3,\"units\":[\"C\"]}");
  ExpectSame(out, Bytewise(d, text));
}

// With the request's tools, a value of a parameter that takes only strings
// stays the text it is, even where it would parse as JSON.
TEST(AssistantOutputTest, Glm45KeepsRawTextParametersAsStrings) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"code": {"type": "string"}, "unit": {"enum": ["1", "2"]},
                     "n": {"type": "integer"}}}}}])");
  const std::string text =
      "<tool_call>f\n<arg_key>code</arg_key>\n<arg_value>123</arg_value>\n<arg_key>unit</arg_key>"
      "\n<arg_value>2</arg_value>\n<arg_key>n</arg_key>\n<arg_value>7</arg_value>\n</tool_call>";
  AssistantOutputParser parser(Dialect(ToolDialect::kGlm45, true), true, "call_");
  parser.set_tools(tools);
  OutputDelta out = parser.Feed(text);
  out.Append(parser.Finish());
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"code\":\"123\",\"unit\":\"2\",\"n\":7}");
  EXPECT_TRUE(GlmRawTextParameter({{"type", "string"}, {"maxLength", 3}}));
  EXPECT_TRUE(GlmRawTextParameter({{"const", "x"}}));
  EXPECT_FALSE(GlmRawTextParameter({{"type", {"string", "null"}}}));
  EXPECT_FALSE(GlmRawTextParameter({{"enum", {"a", 1}}}));
}

TEST(AssistantOutputTest, DeepSeekV3AndV31Calls) {
  const OutputDialect d = Dialect(ToolDialect::kDeepSeekV3);
  const std::string v3 =
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
      "<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const OutputDelta out = Whole(d, v3);
  EXPECT_EQ(out.content, "Checking.");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(out.tool_calls[1].name, "get_time");
  EXPECT_EQ(out.tool_calls[1].arguments, "{}");
  ExpectSame(out, Bytewise(d, v3));
  const std::string v31 =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const OutputDelta out31 = Whole(d, v31);
  ASSERT_EQ(out31.tool_calls.size(), 1u);
  EXPECT_EQ(out31.tool_calls[0].arguments, "{\"city\":\"Oslo\"}");
}

TEST(AssistantOutputTest, WhatDoesNotParseOrNeverClosesIsGivenBackAsContent) {
  const OutputDialect d = Dialect(ToolDialect::kHermes);
  const std::string bad = "Sure: <tool_call>{not json}</tool_call> done";
  const OutputDelta out = Whole(d, bad);
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, bad);
  ExpectSame(out, Bytewise(d, bad));
  const std::string unclosed = "<tool_call>{\"name\": \"f\", \"argum";
  const OutputDelta cut = Whole(d, unclosed);
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_EQ(cut.content, unclosed);
  // A name that is not a string, or arguments that are not an object.
  EXPECT_TRUE(Whole(d, "<tool_call>{\"name\": 3}</tool_call>").tool_calls.empty());
  EXPECT_TRUE(
      Whole(d, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>").tool_calls.empty());
}

TEST(AssistantOutputTest, WithoutToolParsingTheMarkersAreText) {
  const OutputDialect d = Dialect(ToolDialect::kHermes);
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  const OutputDelta out = Whole(d, text, /*tools=*/false);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(AssistantOutputTest, TextThatMayStartAMarkerIsHeldUntilItIsKnown) {
  AssistantOutputParser p(Dialect(ToolDialect::kHermes, true), true, "c");
  EXPECT_EQ(p.Feed("a < b <tool").content, "a < b ");
  EXPECT_EQ(p.Feed("box>").content, "<toolbox>");  // not a marker after all
  EXPECT_EQ(p.Feed("<thi").content, "");
  const OutputDelta d = p.Feed("nk>x");
  EXPECT_EQ(d.content, "");
  EXPECT_EQ(d.reasoning, "x");
  EXPECT_FALSE(p.called_tools());
}

TEST(AssistantOutputTest, TheDialectComesFromTheTemplate) {
  EXPECT_EQ(DialectFor("qwen3moe", "{{ '<tool_call>' }} <think>", "").tools, ToolDialect::kHermes);
  EXPECT_TRUE(DialectFor("qwen3moe", "{{ '<tool_call>' }} <think>", "").think);
  EXPECT_EQ(DialectFor("glm4moe", "<tool_call>{{ name }}<arg_key>", "").tools,
            ToolDialect::kGlm45);
  EXPECT_EQ(DialectFor("deepseek2", "<｜tool▁calls▁begin｜>", "").tools, ToolDialect::kDeepSeekV3);
  EXPECT_EQ(DialectFor("mixtral", "[INST]", "").tools, ToolDialect::kNone);
  EXPECT_FALSE(DialectFor("mixtral", "[INST]", "").think);
  const OutputDialect r1 = DialectFor("deepseek2", "<think>", "<｜Assistant｜><think>\n");
  EXPECT_TRUE(r1.starts_in_reasoning);
  EXPECT_FALSE(DialectFor("deepseek2", "<think>", "<｜Assistant｜>").starts_in_reasoning);
  EXPECT_EQ(DialectFor("gpt-oss", "{{ '<|channel|>' }} <tool_call>", "").tools,
            ToolDialect::kHarmony);
  EXPECT_FALSE(DialectFor("gpt-oss", "<|channel|><think>", "").think);
}

// gpt-oss: analysis is reasoning, final content, a commentary message to
// functions.N a call; the markers (rendered control tokens) never reach the
// client, and a call's <|call|> (end of generation, not in the text) is not
// needed to read it.
TEST(AssistantOutputTest, HarmonyChannelsAndCalls) {
  const OutputDialect d = Dialect(ToolDialect::kHarmony);
  const std::string answer =
      "<|channel|>analysis<|message|>User greets. Answer.<|end|><|start|>assistant"
      "<|channel|>final<|message|>Hello, how can I help?";
  OutputDelta out = Whole(d, answer);
  EXPECT_EQ(out.reasoning, "User greets. Answer.");
  EXPECT_EQ(out.content, "Hello, how can I help?");
  EXPECT_TRUE(out.tool_calls.empty());
  ExpectSame(out, Bytewise(d, answer));

  const std::string call =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}";
  out = Whole(d, call);
  EXPECT_EQ(out.reasoning, "Need weather.");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].id, "call_0");
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
  ExpectSame(out, Bytewise(d, call));
  // The recipient in the role part of the header, and <|call|> rendered
  // (ignore_eos), then another message.
  const std::string two =
      "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>"
      "<|start|>assistant<|channel|>final<|message|>done";
  out = Whole(d, two);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "now");
  EXPECT_EQ(out.tool_calls[0].arguments, "{}");
  EXPECT_EQ(out.content, "done");
  ExpectSame(out, Bytewise(d, two));

  // Without tool parsing, or with a body that is not an object, the call's
  // body is content; text before any header is content.
  EXPECT_EQ(Whole(d, call, /*tools=*/false).content, "{\"city\": \"Paris\"}");
  const std::string broken = "<|channel|>commentary to=functions.f<|message|>not json<|end|>";
  out = Whole(d, broken);
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, "not json");
  ExpectSame(out, Bytewise(d, broken));
  EXPECT_EQ(HarmonyMarker("<|channel|>"), "<|channel|>");
  EXPECT_EQ(HarmonyMarker("<|call|>"), "<|call|>");
  EXPECT_EQ(HarmonyMarker("<|endoftext|>"), "");  // other control tokens stay out
  const std::string plain = "no header at all <b>";
  EXPECT_EQ(Whole(d, plain).content, plain);
  ExpectSame(Whole(d, plain), Bytewise(d, plain));
}

// Bytes that are not UTF-8 in a GLM-4.5 key or raw value (a model writes
// any) become U+FFFD in the arguments; they used to throw from the JSON
// serializer and end the server.
TEST(AssistantOutputTest, GlmArgumentsThatAreNotUtf8AreReplacedNotFatal) {
  const OutputDialect d = Dialect(ToolDialect::kGlm45);
  const std::string text =
      "<tool_call>search<arg_key>q\xa3</arg_key><arg_value>caf\xe9</arg_value></tool_call>";
  const OutputDelta out = Whole(d, text);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, "{\"q\xef\xbf\xbd\":\"caf\xef\xbf\xbd\"}");
  ExpectSame(out, Bytewise(d, text));
}

// Harmony: text that does not open like a header is content up to the next
// marker, whether or not a <|message|> follows later in the same piece; and
// a recipient in the role's part (" to=functions.N" right after the prompt's
// "<|start|>assistant") opens a header whether the text comes whole or a
// byte at a time.
TEST(AssistantOutputTest, HarmonyHeadersDoNotDependOnHowTheTextIsCut) {
  const OutputDialect d = Dialect(ToolDialect::kHarmony);
  const std::string stray = "Well<|channel|>final<|message|>Hello.<|return|>";
  const OutputDelta out = Whole(d, stray);
  EXPECT_EQ(out.content, "WellHello.");
  ExpectSame(out, Bytewise(d, stray));

  const std::string role_recipient =
      " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>"
      "{\"city\": \"Rome\"}<|call|>";
  const OutputDelta call = Bytewise(d, role_recipient);
  ASSERT_EQ(call.tool_calls.size(), 1u);
  EXPECT_EQ(call.tool_calls[0].name, "get_weather");
  EXPECT_EQ(call.tool_calls[0].arguments, "{\"city\":\"Rome\"}");
  EXPECT_EQ(call.content, "");
  ExpectSame(call, Whole(d, role_recipient));

  // A header that does not end within 512 bytes is content, cut or not,
  // and whitespace before a header does not count towards its length.
  const std::string long_header = "<|channel|>" + std::string(600, 'x') + "<|message|>body";
  ExpectSame(Whole(d, long_header), Bytewise(d, long_header));
  const std::string spaced = std::string(600, '\t') + "<|start|>" + std::string(60, '\t') +
                             "|mesegs|>Hael";
  ExpectSame(Whole(d, spaced), Bytewise(d, spaced));
  const std::string spaced_header =
      std::string(600, ' ') + "<|channel|>final<|message|>Hi<|end|>\n\n<|start|>assistant" +
      "<|channel|>final<|message|> there";
  EXPECT_EQ(Whole(d, spaced_header).content, "Hi there");
  ExpectSame(Whole(d, spaced_header), Bytewise(d, spaced_header));
}

}  // namespace
}  // namespace colibri::coordinator
