// gRPC Generate with tools against `colibri-coordinator serve` on loopback:
// tool_choice required and a named function constrain the random-weight
// fixtures at temperature 1.0 (seeds 1-8) to calls in each family's own
// syntax (Qwen3/Hermes, GLM-4.5 with its template, DeepSeek-V3.1 with its
// template, gpt-oss with its template, with and without harmony's tokens in
// the vocabulary), whose arguments (checked by hand against the schema) arrive
// parsed in the replies' `chat` with FINISH_REASON_TOOL_CALLS; a history
// with calls and tool results renders; what cannot be served is
// INVALID_ARGUMENT naming it.
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "nlohmann/json.hpp"
#include "tests/integration/node_process.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using client::Client;
using client::GenerateResult;
using json = nlohmann::ordered_json;

constexpr char kWeatherParameters[] = R"({"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 7},
                   "note": {"type": "string", "maxLength": 5}},
    "required": ["city", "unit", "days"], "additionalProperties": false})";
constexpr char kNowParameters[] =
    R"({"type": "object", "properties": {}, "additionalProperties": false})";

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// Empty when `call` is a valid call of one of `names`, else what is wrong.
std::string Violation(const v1::ToolCall& call, const std::set<std::string>& names) {
  if (call.id().empty()) return "no id";
  if (names.count(call.name()) == 0) return "name " + call.name();
  const json args = json::parse(call.arguments(), nullptr, false);
  if (!args.is_object()) return "arguments not an object";
  if (call.name() == "now") return args.empty() ? "" : "now takes no arguments";
  for (const auto& [key, value] : args.items()) {
    if (key != "city" && key != "unit" && key != "days" && key != "note") return "key " + key;
  }
  if (!args.contains("city") || !args.contains("unit") || !args.contains("days")) return "keys";
  if (!args["city"].is_string() || CodePoints(args["city"].get<std::string>()) > 8) return "city";
  if (args["unit"] != "c" && args["unit"] != "f") return "unit";
  if (!args["days"].is_number_integer() || args["days"] < 1 || args["days"] > 7) return "days";
  if (args.contains("note") &&
      (!args["note"].is_string() || CodePoints(args["note"].get<std::string>()) > 5)) {
    return "note";
  }
  return "";
}

// The gpt-oss fixture (whose gpt-neox vocabulary has no harmony tokens)
// with padding tokens from id 50277 renamed to harmony's tokens (typed
// control, as in gpt-oss files; the vocabulary makes the header markers
// user-defined and <|call|>/<|return|> end generation), written to `path`;
// "" or what went wrong.
std::string WriteHarmonyFixture(const std::string& path) {
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file =
      gguf::GgufFile::Open(testing::FixturesDir() + "/models/gpt-oss-tiny-mxfp4.gguf");
  if (!file.ok()) return std::string(file.status().message());
  const std::vector<std::string> markers = {"<|start|>", "<|channel|>", "<|message|>",
                                            "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"};
  constexpr size_t kFirst = 50277;
  gguf::GgufWriter writer((*file)->alignment());
  for (const auto& [key, value] : (*file)->metadata()) {
    gguf::Value copy = value;
    if (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type") {
      for (size_t i = 0; i < markers.size(); ++i) {
        if (key == "tokenizer.ggml.tokens") {
          if (copy.strings.size() <= kFirst + i || copy.strings[kFirst + i].rfind("[PAD", 0) != 0) {
            return "token " + std::to_string(kFirst + i) + " is not padding";
          }
          copy.strings[kFirst + i] = markers[i];
        } else {
          copy.ints[kFirst + i] = 3;  // control
        }
      }
    }
    writer.SetValue(key, std::move(copy));
  }
  for (const gguf::TensorInfo& t : (*file)->tensors()) {
    absl::Status s =
        writer.AddTensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    if (!s.ok()) return std::string(s.message());
  }
  absl::Status written = writer.WriteFile(path);
  return written.ok() ? "" : std::string(written.message());
}

class GrpcToolCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  }

  // Serves `model` (a fixture's name, or a path ending in .gguf) with the
  // template of chat_templates/`template_fixture` ("" for the model's own)
  // and connects.
  void Serve(const std::string& model, const std::string& template_fixture) {
    const bool path = model.size() > 5 && model.compare(model.size() - 5, 5, ".gguf") == 0;
    std::vector<std::string> args = {
        testing::BinaryPath("coordinator/colibri-coordinator"), "serve", "--model",
        path ? model : testing::FixturesDir() + "/models/" + model + ".gguf", "--listen",
        "127.0.0.1:0", "--threads", "1"};
    if (!template_fixture.empty()) {
      std::ifstream fixture(testing::FixturesDir() + "/chat_templates/" + template_fixture);
      const json templates = json::parse(fixture, nullptr, false);
      ASSERT_TRUE(templates.is_object()) << template_fixture;
      const std::string path = testing::MakeTempDir("grpc-tools") + "/template.jinja";
      std::ofstream(path) << templates["template"].get<std::string>();
      args.insert(args.end(), {"--chat-template-file", path});
    }
    serve_ = std::make_unique<testing::ServerProcess>();
    std::string error;
    ASSERT_TRUE(serve_->Start(args, &error)) << error;
    client::ClientOptions options;
    options.address = serve_->address();
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(options);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }

  static v1::GenerateRequest ToolRequest() {
    v1::GenerateRequest request;
    v1::ChatMessage* m = request.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content("Weather in Oslo this week?");
    v1::Tool* weather = request.add_tools();
    weather->set_name("get_weather");
    weather->set_description("The forecast of a city");
    weather->set_parameters(kWeatherParameters);
    v1::Tool* now = request.add_tools();
    now->set_name("now");
    now->set_parameters(kNowParameters);
    request.set_max_tokens(300);
    request.mutable_sampling()->set_temperature(1.0f);
    request.mutable_sampling()->set_has_seed(true);
    return request;
  }

  // Appends an assistant message calling get_weather (call_1, arguments as
  // JSON text) and the tool's answer to it.
  static void AddCallAndResult(v1::GenerateRequest* request) {
    v1::ChatMessage* assistant = request->mutable_chat()->add_messages();
    assistant->set_role("assistant");
    v1::ToolCall* call = assistant->add_tool_calls();
    call->set_id("call_1");
    call->set_name("get_weather");
    call->set_arguments(R"({"city":"Oslo","unit":"c","days":2})");
    v1::ChatMessage* result = request->mutable_chat()->add_messages();
    result->set_role("tool");
    result->set_tool_call_id("call_1");
    result->set_content("rain, 4 degrees");
  }

  // Required and named, seeds 1-8 (parallel calls with odd seeds): every
  // reply is calls that validate, streamed in the replies' `chat` and
  // joined by the client.
  void ExpectForcedCallsValidate(bool one_call_only = false) {
    for (const bool named : {false, true}) {
      const std::set<std::string> names =
          named ? std::set<std::string>{"get_weather"} : std::set<std::string>{"get_weather", "now"};
      for (uint64_t seed = 1; seed <= 8; ++seed) {
        SCOPED_TRACE(::testing::Message() << "named " << named << " seed " << seed);
        v1::GenerateRequest request = ToolRequest();
        request.mutable_sampling()->set_seed(seed);
        if (named) {
          request.mutable_tool_choice()->set_function("get_weather");
        } else {
          request.mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_REQUIRED);
        }
        request.set_parallel_tool_calls(seed % 2 == 1);
        std::vector<v1::ToolCall> streamed;
        std::string streamed_content;
        absl::StatusOr<GenerateResult> result =
            client_->Generate(request, [&](const v1::GenerateReply& reply) {
              for (const v1::ToolCall& call : reply.chat().tool_calls()) streamed.push_back(call);
              streamed_content += reply.chat().content();
              return true;
            });
        ASSERT_TRUE(result.ok()) << result.status();
        EXPECT_EQ(result->finish_reason, v1::FINISH_REASON_TOOL_CALLS) << result->text;
        EXPECT_EQ(result->chat.content(), "") << result->text;
        EXPECT_EQ(streamed_content, "");
        const auto& calls = result->chat.tool_calls();
        ASSERT_GE(calls.size(), 1) << result->text;
        if (seed % 2 == 0 || one_call_only) {
          EXPECT_EQ(calls.size(), 1) << result->text;
        }
        ASSERT_EQ(streamed.size(), static_cast<size_t>(calls.size()));
        std::set<std::string> ids;
        for (int i = 0; i < calls.size(); ++i) {
          EXPECT_EQ(Violation(calls[i], names), "") << calls[i].ShortDebugString() << "\n"
                                                    << result->text;
          EXPECT_EQ(streamed[i].arguments(), calls[i].arguments());
          ids.insert(calls[i].id());
        }
        EXPECT_EQ(ids.size(), static_cast<size_t>(calls.size())) << "ids are unique";
      }
    }
  }

  std::unique_ptr<testing::ServerProcess> serve_;
  std::unique_ptr<Client> client_;
};

TEST_F(GrpcToolCallsTest, HermesCallsOfQwen3Validate) {
  Serve("qwen3moe-tiny-f32", "");
  ExpectForcedCallsValidate();
}

TEST_F(GrpcToolCallsTest, Glm45KeyValueCallsValidate) {
  Serve("glm4moe-tiny-q4_k_m", "GLM-4.6.json");
  ExpectForcedCallsValidate();

  // A history with a call (arguments as JSON text, which GLM's template
  // iterates over as an object) and its result renders.
  v1::GenerateRequest request = ToolRequest();
  request.set_max_tokens(2);
  request.mutable_sampling()->set_seed(1);
  AddCallAndResult(&request);
  absl::StatusOr<GenerateResult> reply = client_->Generate(request);
  EXPECT_TRUE(reply.ok()) << reply.status();
}

TEST_F(GrpcToolCallsTest, DeepSeekV31CallsValidate) {
  Serve("deepseek2-tiny-q8_0", "deepseek-ai-DeepSeek-V3.1.json");
  ExpectForcedCallsValidate();
}

// A history with the assistant's call and the tool's result goes through the
// template (Qwen2.5's, which renders both); tool_choice auto and none pass;
// bad tools, a choice without a chat prompt and an unknown function are
// INVALID_ARGUMENT naming what is wrong.
TEST_F(GrpcToolCallsTest, HistoryRendersAndBadRequestsAreNamed) {
  Serve("qwen3moe-tiny-f32", "Qwen-Qwen2.5-7B-Instruct.json");
  v1::GenerateRequest request = ToolRequest();
  request.set_max_tokens(4);
  request.mutable_sampling()->set_seed(1);
  absl::StatusOr<GenerateResult> first = client_->Generate(request);
  ASSERT_TRUE(first.ok()) << first.status();
  AddCallAndResult(&request);
  request.mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_NONE);
  absl::StatusOr<GenerateResult> second = client_->Generate(request);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->stats.prompt_tokens(), first->stats.prompt_tokens() + 20);
  EXPECT_NE(second->finish_reason, v1::FINISH_REASON_TOOL_CALLS);

  v1::GenerateRequest unknown = ToolRequest();
  unknown.mutable_tool_choice()->set_function("absent");
  absl::StatusOr<GenerateResult> s = client_->Generate(unknown);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_NE(s.status().message().find("absent"), std::string::npos) << s.status();

  v1::GenerateRequest bad_json = ToolRequest();
  bad_json.mutable_tools(1)->set_parameters("{not json");
  s = client_->Generate(bad_json);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_NE(s.status().message().find("tools[1]"), std::string::npos) << s.status();

  v1::GenerateRequest text = ToolRequest();
  text.set_text("hello");
  s = client_->Generate(text);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_NE(s.status().message().find("chat prompt"), std::string::npos) << s.status();
}

// gpt-oss with a vocabulary holding harmony's tokens (as real gpt-oss
// files do): one call per reply, <|call|> ends the generation.
TEST_F(GrpcToolCallsTest, GptOssHarmonyCallsValidate) {
  const std::string path = testing::MakeTempDir("grpc-harmony") + "/gpt-oss-harmony.gguf";
  const std::string error = WriteHarmonyFixture(path);
  ASSERT_EQ(error, "");
  Serve(path, "openai-gpt-oss-120b.json");
  ExpectForcedCallsValidate(/*one_call_only=*/true);
}

// The plain fixture (no harmony tokens: the markers are spelled in plain
// tokens) gives the same calls.
TEST_F(GrpcToolCallsTest, GptOssHarmonyCallsValidateWithoutHarmonyTokens) {
  Serve("gpt-oss-tiny-mxfp4", "openai-gpt-oss-120b.json");
  ExpectForcedCallsValidate(/*one_call_only=*/true);
}

}  // namespace
}  // namespace colibri
