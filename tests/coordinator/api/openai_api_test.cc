// The OpenAI wire format without a socket: request parsing (types, ranges,
// defaults, the field named in errors) and the responses and stream chunks.
#include "coordinator/api/openai_api.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri::coordinator::openai {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

ApiLimits Limits() {
  ApiLimits limits;
  limits.n_ctx = 128;
  limits.n_vocab = 1000;
  return limits;
}

absl::StatusOr<ApiRequest> Completion(const json& body) {
  return ParseRequest(Endpoint::kCompletions, body.dump(), Limits());
}
absl::StatusOr<ApiRequest> Chat(const json& body) {
  return ParseRequest(Endpoint::kChatCompletions, body.dump(), Limits());
}

// The request fails with InvalidArgument naming `param`.
void ExpectBad(const absl::StatusOr<ApiRequest>& r, const std::string& param) {
  ASSERT_FALSE(r.ok()) << param;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(ParamOf(r.status()), param) << r.status();
  const ApiError error = ErrorFromStatus(r.status());
  EXPECT_EQ(error.http_status, 400);
  if (param.empty()) {
    EXPECT_TRUE(error.body["error"]["param"].is_null());
  } else {
    EXPECT_EQ(error.body["error"]["param"], param);
  }
}

TEST(ParseRequestTest, ACompletionWithEveryField) {
  absl::StatusOr<ApiRequest> r = Completion({{"model", "m"},
                                             {"prompt", "hello"},
                                             {"max_tokens", 20},
                                             {"max_completion_tokens", 7},
                                             {"temperature", 0.5},
                                             {"top_p", 0.9},
                                             {"top_k", 40},
                                             {"min_p", 0.05},
                                             {"presence_penalty", 0.5},
                                             {"frequency_penalty", -0.5},
                                             {"repeat_penalty", 1.1},
                                             {"seed", 42},
                                             {"stop", {"\n", "END"}},
                                             {"stream", true},
                                             {"stream_options", {{"include_usage", true}}},
                                             {"logprobs", 3},
                                             {"n", 1},
                                             {"user", "u"},
                                             {"something_new", {{"a", 1}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, "hello");
  EXPECT_FALSE(r->prompt_is_ids);
  EXPECT_EQ(r->max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r->sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r->sampling.penalty_last_n, 64);
  EXPECT_TRUE(r->has_seed);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
}

TEST(ParseRequestTest, DefaultsAndNullsMeanNotGiven) {
  absl::StatusOr<ApiRequest> r =
      Completion({{"prompt", "x"}, {"max_tokens", nullptr}, {"stop", nullptr}, {"seed", nullptr}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_FLOAT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 1.0f);
  EXPECT_FALSE(r->has_seed);
  EXPECT_TRUE(r->stop.empty());
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->logprobs);
}

TEST(ParseRequestTest, PromptsAsTokenIdsAndBatchesOfOne) {
  absl::StatusOr<ApiRequest> ids = Completion({{"prompt", {1, 2, 999}}});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_TRUE(ids->prompt_is_ids);
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 999}));
  absl::StatusOr<ApiRequest> one = Completion({{"prompt", {"only"}}});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->prompt, "only");
  absl::StatusOr<ApiRequest> nested = Completion({{"prompt", {{5, 6}}}});
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->prompt_ids, (std::vector<int32_t>{5, 6}));
}

TEST(ParseRequestTest, BadValuesNameTheirField) {
  ExpectBad(ParseRequest(Endpoint::kCompletions, "{\"prompt\": ", Limits()), "");
  ExpectBad(ParseRequest(Endpoint::kCompletions, "\"text\"", Limits()), "");
  ExpectBad(ParseRequest(Endpoint::kCompletions, "", Limits()), "");
  ExpectBad(Completion(json::object()), "prompt");
  ExpectBad(Completion({{"prompt", ""}}), "prompt");
  ExpectBad(Completion({{"prompt", json::array()}}), "prompt");
  ExpectBad(Completion({{"prompt", {1, 1000}}}), "prompt");  // beyond the vocabulary
  ExpectBad(Completion({{"prompt", {-1}}}), "prompt");
  ExpectBad(Completion({{"prompt", {"a", "b"}}}), "prompt");                // a batch
  ExpectBad(Completion({{"prompt", std::vector<int>(129, 1)}}), "prompt");  // beyond n_ctx
  ExpectBad(Completion({{"prompt", true}}), "prompt");
  ExpectBad(Completion({{"prompt", "x"}, {"max_tokens", "10"}}), "max_tokens");
  ExpectBad(Completion({{"prompt", "x"}, {"max_tokens", 1.5}}), "max_tokens");
  ExpectBad(Completion({{"prompt", "x"}, {"max_tokens", 0}}), "max_tokens");
  ExpectBad(Completion({{"prompt", "x"}, {"max_tokens", 129}}), "max_tokens");
  ExpectBad(Completion({{"prompt", "x"}, {"max_completion_tokens", 1e12}}),
            "max_completion_tokens");
  ExpectBad(Completion({{"prompt", "x"}, {"temperature", -0.1}}), "temperature");
  ExpectBad(Completion({{"prompt", "x"}, {"temperature", "warm"}}), "temperature");
  ExpectBad(Completion({{"prompt", "x"}, {"top_p", 0}}), "top_p");
  ExpectBad(Completion({{"prompt", "x"}, {"top_k", -1}}), "top_k");
  ExpectBad(Completion({{"prompt", "x"}, {"min_p", 2}}), "min_p");
  ExpectBad(Completion({{"prompt", "x"}, {"presence_penalty", 3}}), "presence_penalty");
  ExpectBad(Completion({{"prompt", "x"}, {"repeat_penalty", 0}}), "repeat_penalty");
  ExpectBad(Completion({{"prompt", "x"}, {"seed", "1"}}), "seed");
  ExpectBad(Completion({{"prompt", "x"}, {"stop", 3}}), "stop");
  ExpectBad(Completion({{"prompt", "x"}, {"stop", std::vector<std::string>(17, "s")}}), "stop");
  ExpectBad(Completion({{"prompt", "x"}, {"stream", 1}}), "stream");
  ExpectBad(Completion({{"prompt", "x"}, {"stream_options", true}}), "stream_options");
  ExpectBad(Completion({{"prompt", "x"}, {"stream_options", {{"include_usage", "y"}}}}),
            "stream_options.include_usage");
  ExpectBad(Completion({{"prompt", "x"}, {"logprobs", 21}}), "logprobs");
  ExpectBad(Completion({{"prompt", "x"}, {"n", 2}}), "n");
  ExpectBad(Completion({{"prompt", "x"}, {"n", "1"}}), "n");
  ExpectBad(Completion({{"prompt", "x"}, {"user", 5}}), "user");
}

TEST(ParseRequestTest, ChatMessagesAreNormalised) {
  absl::StatusOr<ApiRequest> r =
      Chat({{"messages",
             {{{"role", "system"}, {"content", "Be brief."}},
              {{"role", "user"},
               {"content",
                {{{"type", "text"}, {"text", "Hello, "}}, {{"type", "text"}, {"text", "you"}}}}},
              {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}}}},
            {"logprobs", true},
            {"top_logprobs", 2},
            {"tools", {{{"type", "function"}}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1]["content"], "Hello, you");
  EXPECT_TRUE(r->messages[2]["content"].is_null());
  EXPECT_TRUE(r->messages[2].contains("tool_calls"));
  EXPECT_TRUE(r->tools.is_array());
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 2);

  // Key order survives (templates print tools and messages with tojson).
  absl::StatusOr<ApiRequest> ordered =
      ParseRequest(Endpoint::kChatCompletions,
                   R"({"messages": [{"role": "user", "content": "x", "b": 1, "a": 2}],
          "tools": [{"type": "function", "function": {"name": "f", "description": "d"}}]})",
                   Limits());
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  EXPECT_EQ(ordered->messages.dump(), R"([{"role":"user","content":"x","b":1,"a":2}])");
  EXPECT_EQ(ordered->tools.dump(),
            R"([{"type":"function","function":{"name":"f","description":"d"}}])");

  ExpectBad(Chat(json::object()), "messages");
  ExpectBad(Chat({{"messages", json::array()}}), "messages");
  ExpectBad(Chat({{"messages", {1}}}), "messages[0]");
  ExpectBad(Chat({{"messages", {{{"content", "x"}}}}}), "messages[0].role");
  ExpectBad(Chat({{"messages", {{{"role", "user"}, {"content", 5}}}}}), "messages[0].content");
  ExpectBad(Chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}}),
            "messages[0].content[0]");
  const json ok = {{"role", "user"}, {"content", "hi"}};
  ExpectBad(Chat({{"messages", {ok}}, {"top_logprobs", 2}}), "top_logprobs");
  ExpectBad(Chat({{"messages", {ok}}, {"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs");
  ExpectBad(Chat({{"messages", {ok}}, {"logprobs", 2}}), "logprobs");
  ExpectBad(Chat({{"messages", {ok}}, {"tools", "none"}}), "tools");
}

// Arrays nested `depth` deep: "[[...]]".
std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Keys of a parsed object are found by a linear search: an object of
// 300,000 keys (in a field the API ignores) would cost minutes to build, and
// so would the members of many such objects. Both are refused by a linear
// scan before parsing; the most keys and values allowed parse.
TEST(ParseRequestTest, ObjectsWithManyKeysAndBodiesWithManyValuesAreRefused) {
  const auto object = [](int keys) {
    std::string out = "{";
    for (int i = 0; i < keys; ++i) absl::StrAppend(&out, i ? "," : "", "\"k", i, "\":1");
    return out + "}";
  };
  EXPECT_TRUE(
      ParseRequest(Endpoint::kCompletions, R"({"prompt": "hi", "x": )" + object(256) + "}", Limits())
          .ok());
  for (int keys : {257, 300000}) {
    const absl::StatusOr<ApiRequest> r = ParseRequest(
        Endpoint::kCompletions, R"({"prompt": "hi", "logit_bias": )" + object(keys) + "}", Limits());
    ExpectBad(r, "");
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("an object with more than 256 keys"));
  }
  // Keys inside strings are text.
  EXPECT_TRUE(ParseTokenizeRequest(R"({"content": ")" + std::string(1000, ':') + R"("})").ok());
  EXPECT_FALSE(ParseTemplateRequest(R"({"messages": [{"role": "user", "content": "hi", "x": )" +
                                    object(1000) + "}]}")
                   .ok());

  // 2^18 values: 1 body object + the prompt ids (an array and its elements).
  std::string ids = "[";
  for (int i = 0; i < (1 << 18) - 3; ++i) absl::StrAppend(&ids, i ? "," : "", 1);
  const std::string body = R"({"prompt": )" + ids + "]}";
  ApiLimits limits = Limits();
  limits.n_ctx = 1 << 20;
  const absl::StatusOr<ApiRequest> most = ParseRequest(Endpoint::kCompletions, body, limits);
  EXPECT_TRUE(most.ok()) << most.status();
  const absl::StatusOr<ApiRequest> more =
      ParseRequest(Endpoint::kCompletions, R"({"prompt": )" + ids + ",1,1]}", limits);
  ExpectBad(more, "");
  EXPECT_THAT(std::string(more.status().message()), HasSubstr("more than 262144 JSON values"));
}

// Copying or printing a JSON value recurses per level: a body of brackets
// deep enough to overflow the stack is refused before it is parsed, on every
// endpoint, whatever field holds it; brackets in strings do not count.
TEST(ParseRequestTest, BodiesNestedTooDeeplyAreRefused) {
  const std::string chat_prefix = R"({"messages": [{"role": "user", "content": "hi", "x": )";
  // The body object and 127 arrays: 128 levels, the most allowed.
  EXPECT_TRUE(ParseRequest(Endpoint::kCompletions, R"({"prompt": "hi", "x": )" + Nested(127) + "}",
                           Limits())
                  .ok());
  ExpectBad(ParseRequest(Endpoint::kCompletions, R"({"prompt": "hi", "x": )" + Nested(128) + "}",
                         Limits()),
            "");
  // Deep enough to overflow any thread's stack in a recursive copy (the
  // chat messages are copied as they are normalised).
  const std::string deep = Nested(1000000);
  const absl::StatusOr<ApiRequest> chat =
      ParseRequest(Endpoint::kChatCompletions, chat_prefix + deep + "}]}", Limits());
  ExpectBad(chat, "");
  EXPECT_NE(chat.status().message().find("deeper than 128 levels"), absl::string_view::npos)
      << chat.status();
  ExpectBad(
      ParseRequest(Endpoint::kChatCompletions,
                   R"({"messages": [{"role": "user", "content": "hi"}], "tools": )" + deep + "}",
                   Limits()),
      "");
  EXPECT_FALSE(ParseTokenizeRequest(R"({"content": "a", "x": )" + deep + "}").ok());
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens": [1], "x": )" + deep + "}", 10).ok());
  EXPECT_FALSE(ParseTemplateRequest(chat_prefix + deep + "}]}").ok());
  // Brackets inside strings, escaped quotes included, are text.
  const std::string brackets(300, '[');
  const absl::StatusOr<ApiRequest> text = ParseRequest(
      Endpoint::kCompletions,
      R"({"prompt": "a\"\\)" + brackets + R"(", "stop": "\")" + brackets + R"("})", Limits());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->prompt, "a\"\\" + brackets);
}

TEST(ParseOtherRequestsTest, TokenizeDetokenizeAndTemplate) {
  absl::StatusOr<TokenizeRequest> t = ParseTokenizeRequest(R"({"content": "hi"})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->content, "hi");
  EXPECT_FALSE(t->add_special);
  EXPECT_TRUE(t->parse_special);
  EXPECT_EQ(ParamOf(ParseTokenizeRequest(R"({"content": 1})").status()), "content");
  EXPECT_EQ(ParamOf(ParseTokenizeRequest(R"({"content": "a", "add_special": 1})").status()),
            "add_special");

  absl::StatusOr<std::vector<int32_t>> ids = ParseDetokenizeRequest(R"({"tokens": [3, 4]})", 10);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(ParamOf(ParseDetokenizeRequest(R"({"tokens": [10]})", 10).status()), "tokens");
  EXPECT_EQ(ParamOf(ParseDetokenizeRequest(R"({"tokens": ["a"]})", 10).status()), "tokens");

  absl::StatusOr<TemplateRequest> tpl = ParseTemplateRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false})");
  ASSERT_TRUE(tpl.ok()) << tpl.status();
  EXPECT_FALSE(tpl->add_generation_prompt);
  EXPECT_TRUE(tpl->tools.is_null());
  EXPECT_EQ(ParamOf(ParseTemplateRequest(R"({"messages": 1})").status()), "messages");
}

TEST(ErrorTest, StatusCodesMapToHttpAndTheEnvelope) {
  EXPECT_EQ(ErrorFromStatus(absl::UnauthenticatedError("x")).http_status, 401);
  EXPECT_EQ(ErrorFromStatus(absl::NotFoundError("x")).http_status, 404);
  EXPECT_EQ(ErrorFromStatus(absl::ResourceExhaustedError("x")).http_status, 429);
  EXPECT_EQ(ErrorFromStatus(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ErrorFromStatus(absl::CancelledError("x")).http_status, 503);
  EXPECT_EQ(ErrorFromStatus(absl::InternalError("x")).http_status, 500);
  const ApiError e = MakeError(413, "too big");
  EXPECT_EQ(e.http_status, 413);
  EXPECT_EQ(e.body, json::parse(R"({"error": {"message": "too big", "type":
      "invalid_request_error", "param": null, "code": null}})"));
  EXPECT_EQ(MakeError(401, "no").body["error"]["type"], "authentication_error");
  EXPECT_EQ(MakeError(500, "bug").body["error"]["type"], "server_error");
}

TEST(ResponseTest, ChatAndCompletionResponses) {
  ResponseId id{"chatcmpl-1", 1700000000, "m"};
  Usage usage{5, 3, 2};
  const json chat = CompletionResponse(Endpoint::kChatCompletions, id, "Hi!",
                                       FinishReason::kEndOfGeneration, usage, nullptr);
  EXPECT_EQ(chat, json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion",
      "created": 1700000000, "model": "m", "choices": [{"index": 0, "message": {"role":
      "assistant", "content": "Hi!"}, "logprobs": null, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
      "prompt_tokens_details": {"cached_tokens": 2}}})"));
  const json text = CompletionResponse(Endpoint::kCompletions, id, "abc",
                                       FinishReason::kContextFull, usage, nullptr);
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "abc");
  EXPECT_EQ(text["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), std::string("stop"));
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), std::string("length"));
}

// What would change the meaning of the output and is not honoured is a 400
// naming the field; tool_choice "auto" parses tool calls, "none" not;
// "required" and a named function are kept for MakeGenerationSpec.
TEST(ParseRequestTest, ConstraintsThatCannotBeHonouredAreRefusedNotDropped) {
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  const json tools = json::array(
      {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}});
  ExpectBad(Chat({{"messages", messages}, {"response_format", {{"type", "regex"}}}}),
            "response_format");
  ExpectBad(Chat({{"messages", messages}, {"response_format", "json"}}), "response_format");
  ExpectBad(Completion({{"prompt", "x"}, {"grammar", "root ::= \"a\""}}), "grammar");
  ExpectBad(Chat({{"messages", messages}, {"guided_choice", json::array({"a", "b"})}}),
            "guided_choice");
  ExpectBad(Chat({{"messages", messages}, {"guided_regex", "a+"}}), "guided_regex");
  ExpectBad(Chat({{"messages", messages}, {"functions", json::array()}}), "functions");
  ExpectBad(Chat({{"messages", messages}, {"tool_choice", "required"}}), "tool_choice");
  ExpectBad(Chat({{"messages", messages},
                  {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}),
            "tool_choice");
  ExpectBad(Chat({{"messages", messages}, {"tools", tools}, {"tool_choice", {{"type", "f"}}}}),
            "tool_choice");
  ExpectBad(Chat({{"messages", messages}, {"tool_choice", "sometimes"}}), "tool_choice");
  ExpectBad(Chat({{"messages", messages}, {"tools", tools}, {"parallel_tool_calls", 1}}),
            "parallel_tool_calls");

  using Choice = OutputConstraintRequest::ToolChoice;
  auto required = Chat({{"messages", messages}, {"tools", tools}, {"tool_choice", "required"}});
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_EQ(required->output.tool_choice, Choice::kRequired);
  EXPECT_TRUE(required->output.parallel_tool_calls);
  EXPECT_TRUE(required->parse_tool_calls);
  auto named = Chat({{"messages", messages},
                     {"tools", tools},
                     {"parallel_tool_calls", false},
                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}});
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->output.tool_choice, Choice::kNamed);
  EXPECT_EQ(named->output.tool_name, "f");
  EXPECT_FALSE(named->output.parallel_tool_calls);

  auto text = Chat({{"messages", messages}, {"response_format", {{"type", "text"}}}});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_FALSE(text->parse_tool_calls);
  auto with_tools = Chat({{"messages", messages}, {"tools", tools}});
  ASSERT_TRUE(with_tools.ok()) << with_tools.status();
  EXPECT_TRUE(with_tools->parse_tool_calls);
  auto none = Chat({{"messages", messages}, {"tools", tools}, {"tool_choice", "none"}});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->parse_tool_calls);
}

// response_format json_object and json_schema are kept for MakeGenerationSpec
// (output_constraint_test compiles them); a malformed one is a 400 naming
// response_format.
TEST(ParseRequestTest, ResponseFormatKeepsItsSchemaOrNamesWhatIsMalformed) {
  using Format = OutputConstraintRequest::Format;
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto text = Chat({{"messages", messages}, {"response_format", {{"type", "text"}}}});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->output.format, Format::kText);

  auto object = Chat({{"messages", messages}, {"response_format", {{"type", "json_object"}}}});
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(object->output.format, Format::kJsonObject);

  const json schema = {{"type", "object"},
                       {"properties", {{"n", {{"type", "integer"}, {"maximum", 5}}}}},
                       {"required", {"n"}},
                       {"additionalProperties", false}};
  auto strict = Completion(
      {{"prompt", "x"},
       {"response_format",
        {{"type", "json_schema"},
         {"json_schema", {{"name", "n"}, {"strict", true}, {"schema", schema}}}}}});
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_EQ(strict->output.format, Format::kJsonSchema);
  EXPECT_EQ(strict->output.json_schema.dump(), schema.dump());

  const auto format = [&](const json& json_schema) {
    return Chat({{"messages", messages},
                 {"response_format", {{"type", "json_schema"}, {"json_schema", json_schema}}}});
  };
  ExpectBad(format(json::object()), "response_format");  // no schema
  ExpectBad(format({{"schema", "x"}}), "response_format");
  ExpectBad(format({{"schema", schema}, {"strict", "yes"}}), "response_format");
}

// llama-server's top-level json_schema and vLLM's guided_json (a schema or a
// string holding one) are response_format json_schema; two constraints in
// one request, or one that is not a schema, are a 400 naming the field.
TEST(ParseRequestTest, OtherServersSchemaFieldsAreResponseFormatJsonSchema) {
  using Format = OutputConstraintRequest::Format;
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  const json schema = {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}};
  for (const json& request :
       {json{{"messages", messages}, {"json_schema", schema}},
        json{{"messages", messages}, {"guided_json", schema}},
        json{{"messages", messages}, {"guided_json", schema.dump()}},
        json{{"messages", messages}, {"response_format", {{"type", "text"}}},
             {"guided_json", schema}}}) {
    auto r = Chat(request);
    ASSERT_TRUE(r.ok()) << r.status() << " for " << request.dump();
    EXPECT_EQ(r->output.format, Format::kJsonSchema);
    EXPECT_EQ(r->output.json_schema.dump(), schema.dump());
  }
  auto completion = Completion({{"prompt", "x"}, {"json_schema", schema}});
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->output.format, Format::kJsonSchema);

  ExpectBad(Chat({{"messages", messages}, {"guided_json", "{not json"}}), "guided_json");
  ExpectBad(Chat({{"messages", messages}, {"guided_json", 5}}), "guided_json");
  ExpectBad(Chat({{"messages", messages}, {"json_schema", "{}"}}), "json_schema");
  ExpectBad(Chat({{"messages", messages}, {"guided_json", std::string(100000, '[')}}),
            "guided_json");
  ExpectBad(Chat({{"messages", messages}, {"json_schema", schema}, {"guided_json", schema}}),
            "guided_json");
  ExpectBad(Chat({{"messages", messages},
                  {"response_format", {{"type", "json_object"}}},
                  {"json_schema", schema}}),
            "json_schema");
}

TEST(ResponseTest, ChatResponsesWithReasoningAndToolCalls) {
  ResponseId id{"chatcmpl-2", 1700000000, "m"};
  OutputDelta message;
  message.reasoning = "think";
  message.tool_calls.push_back({"call_0", "get_weather", "{\"city\":\"Paris\"}"});
  const json r = ChatResponse(id, message, "tool_calls", Usage{5, 3, 0}, nullptr);
  EXPECT_EQ(r["choices"][0], json::parse(R"({"index": 0, "message": {"role": "assistant",
      "content": null, "reasoning_content": "think", "tool_calls": [{"id": "call_0", "type":
      "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      "logprobs": null, "finish_reason": "tool_calls"})"));
  const json chunk = ChatDeltaChunk(id, message, 2, nullptr);
  EXPECT_EQ(chunk["choices"][0]["delta"], json::parse(R"({"reasoning_content": "think",
      "tool_calls": [{"index": 2, "id": "call_0", "type": "function", "function": {"name":
      "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]})"));
  EXPECT_EQ(FinishChunk(Endpoint::kChatCompletions, id, "tool_calls")["choices"][0]["finish_reason"],
            "tool_calls");
}

TEST(ResponseTest, StreamChunksAndSseFraming) {
  ResponseId id{"chatcmpl-2", 1, "m"};
  EXPECT_EQ(RoleChunk(id)["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(RoleChunk(id)["object"], "chat.completion.chunk");
  const json text = TextChunk(Endpoint::kChatCompletions, id, "lo", nullptr);
  EXPECT_EQ(text["choices"][0]["delta"], json({{"content", "lo"}}));
  EXPECT_TRUE(text["choices"][0]["finish_reason"].is_null());
  const json finish = FinishChunk(Endpoint::kChatCompletions, id, FinishReason::kLength);
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  const json usage = UsageChunk(Endpoint::kCompletions, id, Usage{2, 4});
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 6);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(usage["object"], "text_completion");

  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
  // Invalid UTF-8 from the model is replaced, never thrown.
  EXPECT_EQ(Dump(json("a\xff")), "\"a\xEF\xBF\xBD\"");
}

TEST(ResponseTest, LogprobsInBothShapes) {
  std::vector<TokenReport> tokens(2);
  tokens[0] = {"He", -0.5f, {{"He", -0.5f}, {"She", -1.5f}}};
  tokens[1] = {"llo", -std::numeric_limits<float>::infinity(), {}};
  const json chat = ChatLogprobs(tokens);
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_EQ(chat["content"][0]["token"], "He");
  EXPECT_EQ(chat["content"][0]["bytes"], json({72, 101}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "She");
  EXPECT_FLOAT_EQ(chat["content"][0]["top_logprobs"][1]["logprob"].get<float>(), -1.5f);
  EXPECT_FLOAT_EQ(chat["content"][1]["logprob"].get<float>(), -9999.0f);  // no -inf in JSON

  const json completion = CompletionLogprobs(tokens, 10);
  EXPECT_EQ(completion["tokens"], json({"He", "llo"}));
  EXPECT_EQ(completion["text_offset"], json({10, 12}));
  EXPECT_FLOAT_EQ(completion["top_logprobs"][0]["She"].get<float>(), -1.5f);
}

TEST(ResponseTest, ModelsList) {
  EXPECT_EQ(ModelsResponse("qwen", 5), json::parse(R"({"object": "list", "data": [{"id": "qwen",
      "object": "model", "created": 5, "owned_by": "colibri"}]})"));
}

}  // namespace
}  // namespace colibri::coordinator::openai
