// `colibri-client chat` and `colibri-client bench` against a real `serve`.
// chat: two user turns piped in (stdin not a terminal); the replies must be
// the greedy replies of HTTP /v1/chat/completions for the same messages, so
// the second request carried the first turn and its reply (the server
// applied the template to the whole history); /reset forgets it. bench: the
// JSON's shape, and that its counts add up (and match the server's metrics),
// not its timings.
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/node_process.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using json = nlohmann::json;
using testing::CommandResult;
using testing::ServerProcess;

constexpr char kCurl[] = "/usr/bin/curl";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string ClientBinary() { return testing::BinaryPath("client/colibri-client"); }

// Single-quotes `s` for /bin/sh.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class ClientCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    if (::access(kCurl, X_OK) != 0) GTEST_SKIP() << "curl not installed (scripts/install-deps.sh)";
  }

  void StartServe(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        Coordinator(),   "serve",
        "--model",       testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf",
        "--listen",      "127.0.0.1:0",
        "--http-listen", "127.0.0.1:0",
        "--threads",     "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServerProcess>();
    std::string error;
    ASSERT_TRUE(serve_->StartWithHttp(args, &http_, &error)) << error;
  }

  // The greedy reply of /v1/chat/completions to `messages` and its usage.
  json HttpChat(const json& messages, int max_tokens) {
    const json body = {{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}};
    const CommandResult r =
        testing::RunCommand({kCurl, "-sS", "-H", "Content-Type: application/json", "--data-binary",
                             body.dump(), "http://" + http_ + "/v1/chat/completions"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out, nullptr, false);
  }

  // colibri-client with `args`, `input` on its stdin (a pipe).
  CommandResult Client(const std::vector<std::string>& args, const std::string& input = "") {
    std::string command = "printf %s " + Quote(input) + " | " + Quote(ClientBinary()) +
                          " --coordinator " + serve_->address();
    for (const std::string& a : args) command += " " + Quote(a);
    return testing::RunCommand({"/bin/sh", "-c", command});
  }

  std::unique_ptr<ServerProcess> serve_;
  std::string http_;
};

TEST_F(ClientCommandsTest, ChatKeepsTheHistoryTheServerTemplates) {
  ASSERT_NO_FATAL_FAILURE(StartServe());
  const std::string system = "Answer briefly.";
  const std::string first = "Where do the small birds live?";
  const std::string second = "And in winter?";
  const CommandResult chat =
      Client({"chat", "--temp", "0", "-n", "6", "--stats", "--system", system},
             first + "\n\n" + second + "\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;

  json messages = {{{"role", "system"}, {"content", system}},
                   {{"role", "user"}, {"content", first}}};
  const json reply1 = HttpChat(messages, 6);
  ASSERT_TRUE(reply1.is_object()) << reply1;
  const std::string text1 = reply1["choices"][0]["message"]["content"];
  messages.push_back({{"role", "assistant"}, {"content", text1}});
  messages.push_back({{"role", "user"}, {"content", second}});
  const json reply2 = HttpChat(messages, 6);
  ASSERT_TRUE(reply2.is_object()) << reply2;
  const std::string text2 = reply2["choices"][0]["message"]["content"];
  EXPECT_EQ(chat.out, text1 + "\n" + text2 + "\n");

  // The stats lines carry the prompt sizes the server counted.
  const std::vector<std::string> stats = absl::StrSplit(chat.err, '\n', absl::SkipEmpty());
  ASSERT_EQ(stats.size(), 2u) << chat.err;
  EXPECT_EQ(stats[0], "[prompt " + std::to_string(reply1["usage"]["prompt_tokens"].get<int>()) +
                          " tokens, 6 generated, finish length]");
  EXPECT_EQ(stats[1], "[prompt " + std::to_string(reply2["usage"]["prompt_tokens"].get<int>()) +
                          " tokens, 6 generated, finish length]");
}

TEST_F(ClientCommandsTest, GenerateDrawsARandomSeedUnlessGivenAndVerbosePrintsIt) {
  ASSERT_NO_FATAL_FAILURE(StartServe());
  // Only the seed line of stderr ("seed: N").
  const auto seed_of = [](const CommandResult& r) {
    const size_t at = r.err.find("seed: ");
    return at == std::string::npos ? std::string() : r.err.substr(at, r.err.find('\n', at) - at);
  };
  const CommandResult first = Client({"generate", "hi", "-n", "2", "--verbose"});
  const CommandResult second = Client({"generate", "hi", "-n", "2", "--verbose"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_FALSE(seed_of(first).empty()) << first.err;
  EXPECT_NE(seed_of(first), seed_of(second));
  const CommandResult given = Client({"generate", "hi", "-n", "2", "--seed", "7", "--verbose"});
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(seed_of(given), "seed: 7");
  const CommandResult quiet = Client({"generate", "hi", "-n", "2"});
  EXPECT_EQ(seed_of(quiet), "");
}

TEST_F(ClientCommandsTest, StatusAndInfoPrintJsonForScripts) {
  ASSERT_NO_FATAL_FAILURE(StartServe());
  const CommandResult info = Client({"info", "--json"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const json model = json::parse(info.out, nullptr, false);
  ASSERT_TRUE(model.is_object()) << info.out;
  EXPECT_EQ(model["architecture"], "qwen3moe");
  EXPECT_EQ(model["n_layer"], 3);
  EXPECT_EQ(model["n_expert_used"], 2);
  // 64-bit counts are strings, as proto3's JSON mapping has them.
  EXPECT_TRUE(model["dense_bytes"].is_string()) << info.out;

  const CommandResult status = Client({"status", "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const json cluster = json::parse(status.out, nullptr, false);
  ASSERT_TRUE(cluster.is_object()) << status.out;
  EXPECT_TRUE(cluster["nodes"].is_array());  // local experts: no nodes
  EXPECT_TRUE(cluster.contains("active_generations")) << status.out;
}

TEST_F(ClientCommandsTest, ChatResetForgetsTheHistoryAndExitStops) {
  ASSERT_NO_FATAL_FAILURE(StartServe());
  const CommandResult chat = Client({"chat", "--temp", "0", "-n", "3", "--stats"},
                                    "Hello\n/reset\nHello\n/exit\nnever sent\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  const std::vector<std::string> stats = absl::StrSplit(chat.err, '\n', absl::SkipEmpty());
  ASSERT_EQ(stats.size(), 2u) << chat.err;
  EXPECT_EQ(stats[0], stats[1]) << "after /reset the same line is the same prompt";
  const std::vector<std::string> lines = absl::StrSplit(chat.out, '\n');
  ASSERT_GE(lines.size(), 3u) << chat.out;
  EXPECT_EQ(lines[1], "(history cleared)");
  EXPECT_EQ(lines[0], lines[2]);
}

// chat --tools --tool-choice NAME: each reply is calls of that function,
// printed as "[call ID] NAME ARGUMENTS"; "/tool ID TEXT" answers it and the
// next reply is asked for (the history holds the call and the answer).
TEST_F(ClientCommandsTest, ChatWithToolsPrintsCallsAndAnswersThem) {
  ASSERT_NO_FATAL_FAILURE(StartServe());
  const std::string tools = testing::MakeTempDir("chat-tools") + "/tools.json";
  std::ofstream(tools) << R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"enum": ["Oslo", "Bergen"]}},
                     "required": ["city"], "additionalProperties": false}}}])";
  const CommandResult chat =
      Client({"chat", "--temp", "1", "--seed", "3", "-n", "100", "--stats", "--tools", tools,
              "--tool-choice", "get_weather"},
             "Weather in Oslo?\n/tool call_0_0 rain, 4 degrees\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  const std::vector<std::string> stats = absl::StrSplit(chat.err, '\n', absl::SkipEmpty());
  ASSERT_EQ(stats.size(), 2u) << chat.err;
  for (const std::string& line : stats) {
    EXPECT_NE(line.find("finish tool_calls"), std::string::npos) << line;
  }
  const auto prompt_tokens = [](const std::string& line) {
    return std::stoi(line.substr(line.find("[prompt ") + 8));
  };
  EXPECT_GT(prompt_tokens(stats[1]), prompt_tokens(stats[0]) + 10)
      << "the second prompt holds the calls and the answer";
  std::vector<std::string> calls;
  for (absl::string_view line : absl::StrSplit(chat.out, '\n')) {
    if (absl::ConsumePrefix(&line, "[call ")) calls.emplace_back(line);
  }
  ASSERT_GE(calls.size(), 2u) << chat.out;  // parallel calls allowed: one or more per reply
  EXPECT_EQ(calls[0].substr(0, calls[0].find(' ')), "call_0_0]") << chat.out;
  for (const std::string& call : calls) {
    const size_t args = call.find(" get_weather ");
    ASSERT_NE(args, std::string::npos) << call;
    const json a = json::parse(call.substr(args + 13), nullptr, false);
    EXPECT_TRUE(a == json::parse(R"({"city":"Oslo"})") || a == json::parse(R"({"city":"Bergen"})"))
        << call;
  }
}

TEST_F(ClientCommandsTest, BenchJsonCountsAddUpAndMatchTheServersMetrics) {
  ASSERT_NO_FATAL_FAILURE(StartServe({"--sessions", "2"}));
  const CommandResult bench = Client({"bench", "--requests", "6", "--concurrency", "2",
                                      "--prompt-tokens", "8", "--max-tokens", "4", "--json"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const json j = json::parse(bench.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << bench.out;
  EXPECT_EQ(j["concurrency"], 2);
  EXPECT_EQ(j["prompt_tokens"], 8);
  EXPECT_EQ(j["distinct_prompts"], 16);  // the built-in texts, 8 tokens each
  EXPECT_EQ(j["max_tokens"], 4);
  EXPECT_EQ(j["requests"], 6);
  EXPECT_EQ(j["ok"], 6);
  EXPECT_EQ(j["errors"], json::object());
  EXPECT_EQ(j["output_tokens"], 24);
  EXPECT_TRUE(j["seconds"].is_number());
  EXPECT_TRUE(j["output_tokens_per_second"].is_number());
  for (const char* key : {"time_to_first_token_seconds", "inter_token_latency_seconds"}) {
    ASSERT_TRUE(j[key].is_object()) << key;
    for (const char* p : {"p50", "p90", "p99"}) EXPECT_TRUE(j[key][p].is_number()) << key << p;
    EXPECT_LE(j[key]["p50"].get<double>(), j[key]["p99"].get<double>()) << key;
  }
  const CommandResult metrics = testing::RunCommand({kCurl, "-sS", "http://" + http_ + "/metrics"});
  EXPECT_NE(metrics.out.find("\ncolibri_generated_tokens_total 24\n"), std::string::npos)
      << metrics.out;
  EXPECT_NE(metrics.out.find("\ncolibri_requests_total{api=\"grpc\",endpoint=\"/"
                             "colibri.v1.Inference/Generate\",status=\"OK\"} 6\n"),
            std::string::npos)
      << metrics.out;
}

TEST_F(ClientCommandsTest, BenchCountsErrorsByCodeAndPrintsATable) {
  const std::string token_file = testing::MakeTempDir("bench-token") + "/token";
  std::ofstream(token_file) << "bench-test-token-0123456789abcdef";
  ASSERT_NO_FATAL_FAILURE(StartServe({"--auth-token-file", token_file, "--ctx-size", "64"}));
  // Without the token even ModelInfo fails: the bench reports that.
  const CommandResult refused = Client({"bench", "--requests", "2"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("UNAUTHENTICATED"), std::string::npos) << refused.err;

  const CommandResult table =
      Client({"--auth-token-file", token_file, "bench", "--requests", "3", "--concurrency", "1",
              "--prompt-tokens", "4", "--max-tokens", "2"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("requests                     3 (ok 3)\n"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("output tokens                6\n"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("time to first token (s)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("inter-token latency (s)"), std::string::npos) << table.out;
}

}  // namespace
}  // namespace colibri
