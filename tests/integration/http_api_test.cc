// The OpenAI-compatible HTTP API of `colibri-coordinator serve`, driven with
// curl against a real process on loopback: every endpoint, the same text as
// `run` and gRPC Generate, streaming with usage, stop strings held back,
// logprobs, chat with the default and a given template, the error envelope
// for bad requests, auth, and a client that disconnects mid-stream. Expected text always comes from
// `run`.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/node_process.h"
#include "tests/support/auth_token.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using json = nlohmann::json;
using testing::CommandResult;
using testing::ServerProcess;

constexpr char kCurl[] = "/usr/bin/curl";
constexpr char kModel[] = "qwen3moe-tiny-f32";
const char kPrompt[] = "The small birds of the valley";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string ClientBinary() { return testing::BinaryPath("client/colibri-client"); }
std::string ModelPath() { return testing::FixturesDir() + "/models/" + kModel + ".gguf"; }

struct HttpReply {
  int status = 0;
  std::string body;
  json value;  // the body parsed, or discarded
};

// The text `run` prints for the prompt (without its final newline).
std::string LocalText(const std::string& prompt, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {Coordinator(), "run",  "--model",   ModelPath(),
                                   "--prompt",    prompt, "--threads", "1"};
  args.insert(args.end(), flags.begin(), flags.end());
  const CommandResult r = testing::RunCommand(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return std::string(absl::StripSuffix(r.out, "\n"));
}

// Server-sent events of a stream: the data of each, "[DONE]" included.
std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> data;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&event, "data: ")) data.emplace_back(event);
  }
  return data;
}

// Choice 0 of a stream: its `delta.content` (chat) or `text` (completions)
// concatenated, and its finish_reason.
struct Streamed {
  std::string text;
  std::string finish;
};
Streamed CollectStream(const std::string& body) {
  Streamed out;
  for (const std::string& d : SseData(body)) {
    if (d == "[DONE]") continue;
    const json chunk = json::parse(d);
    if (chunk["choices"].empty()) continue;
    const json& choice = chunk["choices"][0];
    const json& holder = choice.contains("delta") ? choice["delta"] : choice;
    const std::string key = choice.contains("delta") ? "content" : "text";
    if (holder.contains(key) && holder[key].is_string()) out.text += holder[key].get<std::string>();
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
      out.finish = choice["finish_reason"];
    }
  }
  return out;
}

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    if (::access(kCurl, X_OK) != 0) GTEST_SKIP() << "curl not installed (scripts/install-deps.sh)";
  }

  // Starts serve with the HTTP API on 127.0.0.1:0 and `extra` flags, on
  // `model` (default: kModel).
  void StartServe(std::vector<std::string> extra = {}, const std::string& model = ModelPath()) {
    std::vector<std::string> args = {
        Coordinator(), "serve",         "--model",     model,       "--listen",
        "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServerProcess>();
    std::string error;
    ASSERT_TRUE(serve_->StartWithHttp(args, &http_, &error)) << error;
  }

  // curl with `args` against path; the status and the body.
  HttpReply Curl(const std::string& method, const std::string& path, const std::string& body = "",
                 std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {kCurl, "-sS", "-X", method, "-w", "\n%{http_code}"};
    argv.insert(argv.end(), args.begin(), args.end());
    if (!body.empty()) {
      argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", body});
    }
    argv.push_back("http://" + http_ + path);
    const CommandResult r = testing::RunCommand(argv);
    HttpReply reply;
    const size_t nl = r.out.rfind('\n');
    if (nl == std::string::npos) return reply;
    reply.status = std::atoi(r.out.c_str() + nl + 1);
    reply.body = r.out.substr(0, nl);
    reply.value = json::parse(reply.body, nullptr, false);
    return reply;
  }
  HttpReply Post(const std::string& path, const json& body, std::vector<std::string> args = {}) {
    return Curl("POST", path, body.dump(), std::move(args));
  }

  // The completion text of `messages` rendered by the server's template and
  // tokenized, with `sampling`; "" (and a test failure) on an error.
  std::string CompletionOfRenderedChat(const json& messages, const json& sampling) {
    HttpReply rendered = Post("/apply-template", {{"messages", messages}});
    EXPECT_EQ(rendered.status, 200) << rendered.body;
    HttpReply ids =
        Post("/tokenize", {{"content", rendered.value["prompt"]}, {"add_special", true}});
    EXPECT_EQ(ids.status, 200) << ids.body;
    json completion = sampling;
    completion["prompt"] = ids.value["tokens"];
    HttpReply reference = Post("/v1/completions", completion);
    EXPECT_EQ(reference.status, 200) << reference.body;
    if (reference.status != 200) return "";
    return reference.value["choices"][0]["text"];
  }

  // Asserts an OpenAI error envelope with `status` and `param`.
  static void ExpectError(const HttpReply& reply, int status, const std::string& param) {
    EXPECT_EQ(reply.status, status) << reply.body;
    ASSERT_TRUE(reply.value.is_object()) << reply.body;
    const json& error = reply.value["error"];
    ASSERT_TRUE(error.is_object()) << reply.body;
    EXPECT_TRUE(error["message"].is_string()) << reply.body;
    EXPECT_TRUE(error["type"].is_string()) << reply.body;
    if (param.empty()) {
      EXPECT_TRUE(error["param"].is_null()) << reply.body;
    } else {
      EXPECT_EQ(error["param"], param) << reply.body;
    }
  }

  std::unique_ptr<ServerProcess> serve_;
  std::string http_;  // HOST:PORT
};

TEST_F(HttpApiTest, ModelsHealthTokenizeAndDetokenize) {
  StartServe();
  HttpReply health = Curl("GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.value, json({{"status", "ok"}}));

  HttpReply models = Curl("GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.value["object"], "list");
  ASSERT_EQ(models.value["data"].size(), 1u);
  EXPECT_EQ(models.value["data"][0]["id"], kModel);
  EXPECT_EQ(models.value["data"][0]["object"], "model");
  EXPECT_TRUE(models.value["data"][0]["owned_by"].is_string());
  EXPECT_TRUE(models.value["data"][0]["created"].is_number_integer());

  // The ids the tokenize command gives.
  const CommandResult ids =
      testing::RunCommand({Coordinator(), "tokenize", "--model", ModelPath(), "--text", kPrompt});
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  std::vector<int> expected;
  for (absl::string_view piece :
       absl::StrSplit(ids.out, absl::ByAnyChar(" ,\n"), absl::SkipEmpty())) {
    expected.push_back(std::stoi(std::string(piece)));
  }
  HttpReply tokens = Post("/tokenize", {{"content", kPrompt}});
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  EXPECT_EQ(tokens.value["tokens"].get<std::vector<int>>(), expected);
  HttpReply text = Post("/detokenize", {{"tokens", expected}});
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(text.value["content"], kPrompt);

  ExpectError(Post("/detokenize", {{"tokens", {1, -4}}}), 400, "tokens");
  ExpectError(Post("/tokenize", {{"content", 7}}), 400, "content");
  ExpectError(Curl("GET", "/v1/nothing"), 404, "");
}

TEST_F(HttpApiTest, CompletionsGiveTheTextOfRunAndGrpcGenerate) {
  StartServe();
  const std::vector<std::string> flags = {"-n", "10", "--temp", "0.7", "--seed", "3"};
  const std::string expected = LocalText(kPrompt, flags);
  ASSERT_FALSE(expected.empty());
  std::vector<std::string> gen = {ClientBinary(), "--coordinator", serve_->address(), "generate",
                                  kPrompt};
  gen.insert(gen.end(), flags.begin(), flags.end());
  const CommandResult grpc = testing::RunCommand(gen);
  ASSERT_EQ(grpc.exit_code, 0) << grpc.err;
  EXPECT_EQ(absl::StripSuffix(grpc.out, "\n"), expected);

  const json request = {{"model", kModel},    {"prompt", kPrompt}, {"max_tokens", 10},
                        {"temperature", 0.7}, {"seed", 3},         {"unknown_field", {1, 2}}};
  HttpReply reply = Post("/v1/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json& v = reply.value;
  EXPECT_EQ(v["object"], "text_completion");
  EXPECT_EQ(v["model"], kModel);
  ASSERT_EQ(v["choices"].size(), 1u);
  EXPECT_EQ(v["choices"][0]["text"], expected);
  EXPECT_EQ(v["choices"][0]["index"], 0);
  EXPECT_TRUE(v["choices"][0]["logprobs"].is_null());
  const std::string reason = v["choices"][0]["finish_reason"];
  EXPECT_TRUE(reason == "length" || reason == "stop") << reason;
  EXPECT_GT(v["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(v["usage"]["total_tokens"].get<int>(),
            v["usage"]["prompt_tokens"].get<int>() + v["usage"]["completion_tokens"].get<int>());

  // The same seed gives the same text again; token-id prompts work too.
  EXPECT_EQ(Post("/v1/completions", request).value["choices"][0]["text"], expected);
  HttpReply ids = Post("/tokenize", {{"content", kPrompt}, {"add_special", true}});
  json by_ids = request;
  by_ids["prompt"] = ids.value["tokens"];
  EXPECT_EQ(Post("/v1/completions", by_ids).value["choices"][0]["text"], expected);
}

TEST_F(HttpApiTest, StreamingMatchesTheWholeResponseAndEndsWithUsageAndDone) {
  StartServe();
  const std::string expected = LocalText(kPrompt, {"-n", "12", "--temp", "0", "--ignore-eos"});
  const json request = {{"prompt", kPrompt}, {"max_tokens", 12},
                        {"temperature", 0},  {"ignore_eos", true},
                        {"stream", true},    {"stream_options", {{"include_usage", true}}}};
  HttpReply reply = Post("/v1/completions", request, {"-N"});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const std::vector<std::string> data = SseData(reply.body);
  ASSERT_GE(data.size(), 4u) << reply.body;
  EXPECT_EQ(data.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 3 < data.size(); ++i) {
    const json chunk = json::parse(data[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null()) << data[i];
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, expected);
  const json finish = json::parse(data[data.size() - 3]);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  const json usage = json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);

  // Without include_usage: no usage chunk.
  json plain = request;
  plain.erase("stream_options");
  const std::vector<std::string> no_usage = SseData(Post("/v1/completions", plain, {"-N"}).body);
  ASSERT_GE(no_usage.size(), 2u);
  EXPECT_EQ(json::parse(no_usage[no_usage.size() - 2])["choices"][0]["finish_reason"], "length");
}

TEST_F(HttpApiTest, StopStringsNeverAppearStreamedOrNot) {
  StartServe();
  const std::string full = LocalText(kPrompt, {"-n", "16", "--temp", "0", "--ignore-eos"});
  ASSERT_GE(full.size(), 12u) << full;
  const std::string stop = full.substr(full.size() / 2, 3);
  const std::string expected = full.substr(0, full.find(stop));
  const json request = {{"prompt", kPrompt},
                        {"max_tokens", 16},
                        {"temperature", 0},
                        {"ignore_eos", true},
                        {"stop", {stop}}};
  HttpReply whole = Post("/v1/completions", request);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.value["choices"][0]["text"], expected);
  EXPECT_EQ(whole.value["choices"][0]["finish_reason"], "stop");

  json streamed_request = request;
  streamed_request["stream"] = true;
  streamed_request["stop"] = stop;  // a plain string works too
  const std::vector<std::string> data =
      SseData(Post("/v1/completions", streamed_request, {"-N"}).body);
  ASSERT_GE(data.size(), 2u);
  std::string text;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const json chunk = json::parse(data[i]);
    const std::string piece = chunk["choices"][0]["text"];
    EXPECT_EQ(piece.find(stop), std::string::npos) << piece;
    text += piece;
    if (i + 2 == data.size()) {
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "stop");
    }
  }
  EXPECT_EQ(text, expected);
}

TEST_F(HttpApiTest, ChatRendersChatMlWithoutATemplateAndStreamsRoleContentFinish) {
  StartServe();
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}}}}};
  const std::string prompt =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\n";
  HttpReply rendered = Post("/apply-template", {{"messages", messages}});
  ASSERT_EQ(rendered.status, 200) << rendered.body;
  EXPECT_EQ(rendered.value["prompt"], prompt);

  // The reply is the completion of the rendered prompt, special tokens parsed.
  HttpReply ids = Post("/tokenize", {{"content", prompt}, {"add_special", true}});
  ASSERT_EQ(ids.status, 200) << ids.body;
  const json sampling = {{"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
  json completion = sampling;
  completion["prompt"] = ids.value["tokens"];
  HttpReply reference = Post("/v1/completions", completion);
  ASSERT_EQ(reference.status, 200) << reference.body;
  const std::string expected = reference.value["choices"][0]["text"];

  json chat = sampling;
  chat["messages"] = messages;
  HttpReply whole = Post("/v1/chat/completions", chat);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.value["object"], "chat.completion");
  EXPECT_EQ(whole.value["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole.value["choices"][0]["message"]["content"], expected);
  EXPECT_EQ(whole.value["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole.value["usage"]["prompt_tokens"], ids.value["tokens"].size());

  chat["stream"] = true;
  chat["stream_options"] = {{"include_usage", true}};
  const std::vector<std::string> data = SseData(Post("/v1/chat/completions", chat, {"-N"}).body);
  ASSERT_GE(data.size(), 5u);
  const json first = json::parse(data[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 1; i + 3 < data.size(); ++i) {
    text += json::parse(data[i])["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, expected);
  const json finish = json::parse(data[data.size() - 3]);
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json::parse(data[data.size() - 2])["usage"]["completion_tokens"], 10);
  EXPECT_EQ(data.back(), "[DONE]");
}

TEST_F(HttpApiTest, AChatTemplateFileOverridesAndItsErrorsAreBadRequests) {
  const std::string dir = testing::MakeTempDir("http-template");
  const std::string path = dir + "/template.jinja";
  {
    std::ofstream file(path);
    file << "{% if messages|length > 2 %}{{ raise_exception('too many messages') }}{% endif %}"
            "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}";
  }
  StartServe({"--chat-template-file", path});
  const json hi = {{"role", "user"}, {"content", "Hi"}};
  HttpReply plain = Post("/apply-template", {{"messages", {hi}}, {"add_generation_prompt", false}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.value["prompt"], "[user] Hi\n");
  EXPECT_EQ(Post("/apply-template", {{"messages", {hi}}}).value["prompt"],
            "[user] Hi\n[assistant]");

  HttpReply raised = Post("/v1/chat/completions", {{"messages", {hi, hi, hi}}});
  ExpectError(raised, 400, "");
  EXPECT_NE(raised.body.find("too many messages"), std::string::npos) << raised.body;
  EXPECT_EQ(Post("/v1/chat/completions", {{"messages", {hi}}, {"max_tokens", 2}}).status, 200);
}

// A template that opens a think block in the generation prompt (as
// DeepSeek-R1's does): the whole reply is reasoning_content, streamed and
// not, and equals the completion of the rendered prompt. Output constraints
// the server cannot honour are 400s naming the field.
TEST_F(HttpApiTest, ReasoningIsSplitFromContentAndUnsupportedConstraintsAreRefused) {
  const std::string dir = testing::MakeTempDir("http-think");
  const std::string path = dir + "/template.jinja";
  {
    std::ofstream file(path);
    file << "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n"
            "{% endif %}";
  }
  StartServe({"--chat-template-file", path});
  const json messages = {{{"role", "user"}, {"content", "Why is the sky blue?"}}};
  const json sampling = {{"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string expected = CompletionOfRenderedChat(messages, sampling);
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(expected.find("</think>"), std::string::npos) << "the fixture closed the block";

  json chat = sampling;
  chat["messages"] = messages;
  HttpReply whole = Post("/v1/chat/completions", chat);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json& message = whole.value["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], expected) << whole.body;
  EXPECT_EQ(message["content"], "") << whole.body;
  EXPECT_FALSE(message.contains("tool_calls"));

  chat["stream"] = true;
  std::string reasoning, content;
  for (const std::string& d : SseData(Post("/v1/chat/completions", chat, {"-N"}).body)) {
    if (d == "[DONE]") continue;
    const json chunk = json::parse(d);
    if (chunk["choices"].empty()) continue;
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, expected);
  EXPECT_EQ(content, "");

  ExpectError(Post("/v1/chat/completions",
                   {{"messages", messages}, {"response_format", {{"type", "regex"}}}}),
              400, "response_format");
  ExpectError(Post("/v1/chat/completions", {{"messages", messages}, {"tool_choice", "required"}}),
              400, "tool_choice");
}

// gpt-oss with its own template (harmony): the chat reply goes through the
// harmony parser, which gives text without any message header as content,
// equal to the completion of the rendered prompt; a forced tool call comes
// back as tool_calls. (The fixture's vocabulary has no harmony control
// tokens: the markers themselves are covered by assistant_output_test.)
TEST_F(HttpApiTest, GptOssChatGoesThroughTheHarmonyParser) {
  std::ifstream fixture(testing::FixturesDir() + "/chat_templates/openai-gpt-oss-120b.json");
  const json templates = json::parse(fixture, nullptr, false);
  ASSERT_TRUE(templates.is_object()) << "gpt-oss chat template fixture";
  const std::string path = testing::MakeTempDir("http-harmony") + "/template.jinja";
  {
    std::ofstream file(path);
    file << templates["template"].get<std::string>();
  }
  StartServe({"--chat-template-file", path},
             testing::FixturesDir() + "/models/gpt-oss-tiny-mxfp4.gguf");
  const json messages = {{{"role", "user"}, {"content", "Hello!"}}};
  HttpReply rendered = Post("/apply-template", {{"messages", messages}});
  ASSERT_EQ(rendered.status, 200) << rendered.body;
  ASSERT_NE(rendered.value["prompt"].get<std::string>().find("<|start|>assistant"),
            std::string::npos);
  const json sampling = {{"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string expected = CompletionOfRenderedChat(messages, sampling);
  ASSERT_FALSE(expected.empty());
  ASSERT_NE(expected.substr(0, 2), "<|") << "the fixture wrote a header";

  json chat = sampling;
  chat["messages"] = messages;
  for (bool stream : {false, true}) {
    chat["stream"] = stream;
    HttpReply reply = Post("/v1/chat/completions", chat,
                           stream ? std::vector<std::string>{"-N"} : std::vector<std::string>{});
    ASSERT_EQ(reply.status, 200) << reply.body;
    const std::string content =
        stream ? CollectStream(reply.body).text
               : reply.value["choices"][0]["message"]["content"].get<std::string>();
    EXPECT_EQ(content, expected) << "stream " << stream;
  }
  // A forced call: the harmony header the grammar writes, parsed back.
  const json tools = json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "f"},
          {"description", "f"},
          {"parameters", {{"type", "object"}, {"additionalProperties", false}}}}}}});
  HttpReply forced = Post("/v1/chat/completions", {{"messages", messages},
                                                   {"tools", tools},
                                                   {"tool_choice", "required"},
                                                   {"max_tokens", 200},
                                                   {"seed", 1}});
  ASSERT_EQ(forced.status, 200) << forced.body;
  EXPECT_EQ(forced.value["choices"][0]["finish_reason"], "tool_calls") << forced.body;
  const json& calls = forced.value["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u) << forced.body;
  EXPECT_EQ(calls[0]["function"]["name"], "f");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{}");
}

// tool_choice "required" and a named function constrain the random-weight
// model at temperature 1.0 to Hermes calls (the fixture is a Qwen3 model)
// of the request's functions whose arguments follow their schemas, parsed
// into tool_calls with finish_reason "tool_calls", streamed or not.
TEST_F(HttpApiTest, ToolChoiceRequiredAndNamedGiveCallsThatValidate) {
  StartServe();
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object",
      "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
      "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now", "parameters": {
      "type": "object", "properties": {}, "additionalProperties": false}}}])");
  // Empty when `call` is a valid call of one of `names`, else what is wrong.
  const auto violation = [](const json& call, const std::set<std::string>& names) -> std::string {
    if (!call.contains("id") || !call["id"].is_string() || call["id"] == "") return "no id";
    if (call["type"] != "function") return "type";
    const std::string name = call["function"]["name"];
    if (names.count(name) == 0) return "name " + name;
    const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    if (!args.is_object()) return "arguments not an object";
    if (name == "now") return args.empty() ? "" : "now takes no arguments";
    if (args.size() != 2 || !args.contains("city") || !args.contains("unit")) return "keys";
    if (!args["city"].is_string()) return "city";
    size_t chars = 0;
    for (unsigned char c : args["city"].get<std::string>()) chars += (c & 0xC0) != 0x80 ? 1 : 0;
    if (chars > 8) return "city too long";
    if (args["unit"] != "c" && args["unit"] != "f") return "unit";
    return "";
  };
  const json messages = json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}});
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const json& choice : {json("required"), named}) {
    const std::set<std::string> names = choice.is_string()
                                            ? std::set<std::string>{"get_weather", "now"}
                                            : std::set<std::string>{"get_weather"};
    for (int seed = 1; seed <= 3; ++seed) {
      json chat = {{"messages", messages},
                   {"tools", tools},
                   {"tool_choice", choice},
                   {"temperature", 1.0},
                   {"seed", seed},
                   {"max_tokens", 300},
                   {"parallel_tool_calls", seed != 2}};
      HttpReply whole = Post("/v1/chat/completions", chat);
      ASSERT_EQ(whole.status, 200) << whole.body;
      const json& choice0 = whole.value["choices"][0];
      EXPECT_EQ(choice0["finish_reason"], "tool_calls") << whole.body;
      const json& calls = choice0["message"]["tool_calls"];
      ASSERT_TRUE(calls.is_array() && !calls.empty()) << whole.body;
      if (seed == 2) {
        EXPECT_EQ(calls.size(), 1u) << whole.body;
      }
      for (const json& call : calls) EXPECT_EQ(violation(call, names), "") << call.dump();

      chat["stream"] = true;
      json streamed_calls = json::array();
      std::string finish, content;
      for (const std::string& d : SseData(Post("/v1/chat/completions", chat, {"-N"}).body)) {
        if (d == "[DONE]") continue;
        const json chunk = json::parse(d);
        if (chunk["choices"].empty()) continue;
        const json& c = chunk["choices"][0];
        if (c["delta"].contains("tool_calls")) {
          for (json call : c["delta"]["tool_calls"]) {
            EXPECT_EQ(call["index"], streamed_calls.size());
            call.erase("index");
            streamed_calls.push_back(call);
          }
        }
        if (c["delta"].contains("content") && c["delta"]["content"].is_string()) {
          content += c["delta"]["content"].get<std::string>();
        }
        if (c["finish_reason"].is_string()) finish = c["finish_reason"];
      }
      EXPECT_EQ(finish, "tool_calls");
      EXPECT_EQ(content, "");
      ASSERT_EQ(streamed_calls.size(), calls.size()) << "seed " << seed;
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(streamed_calls[i]["function"], calls[i]["function"]) << "seed " << seed;
      }
    }
  }
  ExpectError(Post("/v1/chat/completions",
                   {{"messages", messages},
                    {"tools", tools},
                    {"tool_choice", {{"type", "function"}, {"function", {{"name", "absent"}}}}}}),
              400, "tool_choice");
  ExpectError(Post("/v1/chat/completions", {{"messages", messages},
                                            {"tools", tools},
                                            {"tool_choice", "required"},
                                            {"response_format", {{"type", "json_object"}}}}),
              400, "tool_choice");
}

// response_format constrains the random-weight model's output at temperature
// 1.0: a bounded json_schema's content is an instance (checked by hand) with
// finish_reason stop, streamed or not; json_object gives an object (or its
// prefix when max_tokens cuts it); a schema that cannot be enforced is a 400.
TEST_F(HttpApiTest, ResponseFormatConstrainsTheOutputStreamedOrNot) {
  StartServe();
  const json schema = {
      {"type", "object"},
      {"properties",
       {{"answer", {{"enum", {"yes", "no", "maybe"}}}},
        {"score", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}},
        {"note", {{"type", "string"}, {"maxLength", 6}}}}},
      {"required", {"answer", "score", "note"}},
      {"additionalProperties", false}};
  const auto valid = [](const std::string& text) {
    const json v = json::parse(text, nullptr, false);
    if (!v.is_object() || v.size() != 3) return false;
    if (!v.contains("answer") || !v.contains("score") || !v.contains("note")) return false;
    const json& answer = v["answer"];
    if (answer != "yes" && answer != "no" && answer != "maybe") return false;
    if (!v["score"].is_number_integer() || v["score"] < 0 || v["score"] > 9) return false;
    if (!v["note"].is_string()) return false;
    size_t chars = 0;
    for (unsigned char c : v["note"].get<std::string>()) chars += (c & 0xC0) != 0x80 ? 1 : 0;
    return chars <= 6;
  };
  const json messages = json::array({{{"role", "user"}, {"content", "Rate the valley."}}});
  for (int seed = 1; seed <= 3; ++seed) {
    json chat = {{"messages", messages},
                 {"temperature", 1.0},
                 {"seed", seed},
                 {"max_tokens", 200},
                 {"response_format",
                  {{"type", "json_schema"},
                   {"json_schema", {{"name", "rating"}, {"strict", true}, {"schema", schema}}}}}};
    HttpReply whole = Post("/v1/chat/completions", chat);
    ASSERT_EQ(whole.status, 200) << whole.body;
    const std::string content = whole.value["choices"][0]["message"]["content"];
    EXPECT_TRUE(valid(content)) << content;
    EXPECT_EQ(whole.value["choices"][0]["finish_reason"], "stop") << whole.body;

    chat["stream"] = true;
    const Streamed streamed = CollectStream(Post("/v1/chat/completions", chat, {"-N"}).body);
    EXPECT_EQ(streamed.text, content) << "seed " << seed;
    EXPECT_EQ(streamed.finish, "stop");
  }

  const json object_format = {{"type", "json_object"}};
  for (bool stream : {false, true}) {
    json completion = {{"prompt", kPrompt},
                       {"temperature", 1.0},
                       {"seed", 5},
                       {"max_tokens", 60},
                       {"stream", stream},
                       {"response_format", object_format}};
    HttpReply reply = Post("/v1/completions", completion, stream ? std::vector<std::string>{"-N"}
                                                                 : std::vector<std::string>{});
    ASSERT_EQ(reply.status, 200) << reply.body;
    std::string text, finish;
    if (stream) {
      const Streamed streamed = CollectStream(reply.body);
      text = streamed.text;
      finish = streamed.finish;
    } else {
      text = reply.value["choices"][0]["text"];
      finish = reply.value["choices"][0]["finish_reason"];
    }
    ASSERT_FALSE(text.empty());
    EXPECT_EQ(text[0], '{') << text;
    if (finish == "stop") {
      EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text;
    } else {
      EXPECT_EQ(finish, "length") << text;
    }
  }

  const json lookaround = {{"type", "object"},
                           {"properties", {{"a", {{"type", "string"}, {"pattern", "(?=x)"}}}}}};
  HttpReply refused =
      Post("/v1/chat/completions",
           {{"messages", messages},
            {"response_format",
             {{"type", "json_schema"}, {"json_schema", {{"name", "a"}, {"schema", lookaround}}}}}});
  ExpectError(refused, 400, "response_format");
  EXPECT_NE(refused.body.find("pattern"), std::string::npos) << refused.body;
}

TEST_F(HttpApiTest, LogprobsReportTheChosenTokenAndTheTopOnes) {
  StartServe();
  HttpReply reply = Post("/v1/completions", {{"prompt", kPrompt},
                                             {"max_tokens", 5},
                                             {"temperature", 0},
                                             {"ignore_eos", true},
                                             {"logprobs", 3}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json& lp = reply.value["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u) << reply.body;
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  std::string joined;
  for (size_t i = 0; i < 5; ++i) {
    const float chosen = lp["token_logprobs"][i];
    EXPECT_LE(chosen, 0.0f);
    ASSERT_EQ(lp["top_logprobs"][i].size(), 3u);
    float best = -1e9f;
    for (const auto& [piece, value] : lp["top_logprobs"][i].items()) {
      best = std::max(best, value.get<float>());
    }
    // Greedy without penalties picks the most likely token.
    EXPECT_FLOAT_EQ(chosen, best);
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, reply.value["choices"][0]["text"]);
}

TEST_F(HttpApiTest, BadRequestsGetTheErrorEnvelopeNamingTheField) {
  StartServe({"--ctx-size", "64"});
  ExpectError(Curl("POST", "/v1/completions", "{\"prompt\": "), 400, "");
  ExpectError(Curl("POST", "/v1/completions", "[1, 2]"), 400, "");
  ExpectError(Post("/v1/completions", {{"max_tokens", 3}}), 400, "prompt");
  ExpectError(Post("/v1/completions", {{"prompt", 5}}), 400, "prompt");
  ExpectError(Post("/v1/completions", {{"prompt", {1, 999999999}}}), 400, "prompt");
  ExpectError(Post("/v1/completions", {{"prompt", "hi"}, {"temperature", "hot"}}), 400,
              "temperature");
  ExpectError(Post("/v1/completions", {{"prompt", "hi"}, {"top_p", 1.5}}), 400, "top_p");
  ExpectError(Post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 100000}}), 400,
              "max_tokens");
  ExpectError(Post("/v1/completions", {{"prompt", "hi"}, {"max_completion_tokens", 0}}), 400,
              "max_completion_tokens");
  ExpectError(Post("/v1/completions", {{"prompt", "hi"}, {"n", 2}}), 400, "n");
  ExpectError(Post("/v1/completions", {{"prompt", "hi"}, {"stream", "yes"}}), 400, "stream");
  ExpectError(Post("/v1/completions", {{"prompt", "hi"}, {"stop", {1}}}), 400, "stop");
  std::string long_prompt;
  for (int i = 0; i < 80; ++i) long_prompt += "word" + std::to_string(i) + " ";
  ExpectError(Post("/v1/completions", {{"prompt", long_prompt}}), 400, "prompt");
  ExpectError(Post("/v1/chat/completions", {{"messages", "hello"}}), 400, "messages");

  // max_completion_tokens wins over max_tokens; the server keeps serving.
  HttpReply good = Post("/v1/completions", {{"prompt", "hi"},
                                            {"max_tokens", 9},
                                            {"max_completion_tokens", 2},
                                            {"ignore_eos", true},
                                            {"n", 1},
                                            {"user", "me"}});
  ASSERT_EQ(good.status, 200) << good.body;
  EXPECT_EQ(good.value["usage"]["completion_tokens"], 2);
}

TEST_F(HttpApiTest, TheTokenIsRequiredExceptForHealth) {
  const std::string dir = testing::MakeTempDir("http");
  const std::string token_file = dir + "/token";
  const std::string token = testing::WriteAuthTokenFile(token_file);
  StartServe({"--auth-token-file", token_file});
  const json request = {{"prompt", "hi"}, {"max_tokens", 2}};
  ExpectError(Post("/v1/completions", request), 401, "");
  ExpectError(Post("/v1/completions", request, {"-H", "Authorization: Bearer wrong"}), 401, "");
  ExpectError(Curl("GET", "/v1/models"), 401, "");
  ExpectError(Post("/tokenize", {{"content", "x"}}), 401, "");
  EXPECT_EQ(Curl("GET", "/health").status, 200);
  EXPECT_EQ(Post("/v1/completions", request, {"-H", "Authorization: Bearer " + token}).status, 200);
}

TEST_F(HttpApiTest, RefusesAnHttpListenerBeyondLoopbackWithoutAToken) {
  // (timeout: a server that does start must not hang the test)
  const CommandResult refused = testing::RunCommand(
      {"/usr/bin/timeout", "60", Coordinator(), "serve", "--model", ModelPath(), "--listen",
       "127.0.0.1:0", "--http-listen", "0.0.0.0:0", "--threads", "1"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("refusing to listen on 0.0.0.0:0"), std::string::npos) << refused.err;
}

TEST_F(HttpApiTest, AClientThatDisconnectsMidStreamCancelsItsGeneration) {
  // One session and a generation far longer than the client stays: unless
  // the disconnect cancels it, it keeps the session busy for minutes. The
  // context is capped at the model's, so this takes a model trained for a
  // long one (glm4moe-tiny: 131072 positions).
  StartServe({"--sessions", "1", "--ctx-size", "65536"},
             testing::FixturesDir() + "/models/glm4moe-tiny-q4_k_m.gguf");
  const json request = {{"prompt", kPrompt},
                        {"max_tokens", 60000},
                        {"temperature", 0},
                        {"ignore_eos", true},
                        {"stream", true}};
  HttpReply partial = Post("/v1/completions", request, {"-N", "--max-time", "2"});
  EXPECT_GE(SseData(partial.body).size(), 1u) << partial.body;
  EXPECT_EQ(partial.body.find("[DONE]"), std::string::npos);

  client::ClientOptions options;
  options.address = serve_->address();
  absl::StatusOr<std::unique_ptr<client::Client>> grpc = client::Client::Connect(options);
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  int active = -1;
  for (int i = 0; i < 600 && active != 0; ++i) {
    absl::StatusOr<v1::ClusterStatusReply> status = (*grpc)->ClusterStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    active = status->active_generations();
    if (active != 0) ::usleep(100 * 1000);
  }
  EXPECT_EQ(active, 0) << "the abandoned generation is still running";
  HttpReply next = Post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 3}});
  EXPECT_EQ(next.status, 200) << next.body;
}

}  // namespace
}  // namespace colibri
