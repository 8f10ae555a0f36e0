// The Prometheus metrics of `serve` (GET /metrics on --http-listen) and of
// an expert node (--metrics-listen), scraped with curl from real processes
// after real requests: the values move as the requests say (generated tokens
// = the response's completion_tokens, the node's ComputeLayer count = the
// coordinator's round trips to it), `promtool check metrics` accepts both
// outputs, the node's listener follows the token rule, and a non-streaming
// client that disconnects cancels its generation (active generations return
// to 0). Also the error event of a stream that fails after it started.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/node_process.h"
#include "tests/support/curl.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using json = nlohmann::json;
using testing::CommandResult;
using testing::Curl;
using testing::HttpReply;
using testing::kCurl;
using testing::PostJson;
using testing::ServerProcess;

constexpr char kPromtool[] = "/usr/bin/promtool";
constexpr char kPrompt[] = "The small birds of the valley";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string Node() { return testing::BinaryPath("expert_node/colibri-expert-node"); }
std::string Model(const std::string& name) {
  return testing::FixturesDir() + "/models/" + name + ".gguf";
}

// The samples of a text exposition: "name{labels}" -> value. Comment lines
// are skipped; a line that does not parse fails the test.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    const absl::string_view number = line.substr(space + 1);
    const bool ok = space != absl::string_view::npos &&
                    (absl::SimpleAtod(number, &value) || number == "+Inf" || number == "NaN");
    EXPECT_TRUE(ok) << "bad sample line: " << line;
    if (ok) samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

// Runs `promtool check metrics` on `text`; "" when it accepts it (or is not
// installed: then *skipped is set), else its complaint.
std::string Promtool(const std::string& text, bool* skipped) {
  *skipped = ::access(kPromtool, X_OK) != 0;
  if (*skipped) return "";
  const std::string path = testing::MakeTempDir("promtool") + "/metrics.txt";
  std::ofstream(path) << text;
  const CommandResult r =
      testing::RunCommand({"/bin/sh", "-c", std::string(kPromtool) + " check metrics < " + path});
  return r.exit_code == 0 ? "" : r.out + r.err;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    if (::access(kCurl, X_OK) != 0) GTEST_SKIP() << "curl not installed (scripts/install-deps.sh)";
  }

  // A node with --metrics-listen; its metrics address in node_metrics_.
  void StartNode(std::vector<std::string> extra = {}) {
    node_ = std::make_unique<ServerProcess>();
    std::vector<std::string> args = {
        Node(),       "--listen", "127.0.0.1:0", "--data-dir", testing::MakeTempDir("metrics-node"),
        "--node-id",  "n1",       "--threads",   "1",          "--metrics-listen",
        "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string error;
    ASSERT_TRUE(node_->Start(args, &error)) << error;
    node_metrics_ = node_->WaitForLine("metrics listening on ", &error);
    ASSERT_FALSE(node_metrics_.empty()) << error;
  }

  void StartServe(const std::string& model, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        Coordinator(), "serve",         "--model",     model,       "--listen",
        "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServerProcess>();
    std::string error;
    ASSERT_TRUE(serve_->StartWithHttp(args, &http_, &error)) << error;
  }

  std::string Scrape(const std::string& address) {
    const HttpReply reply = Curl(address, "/metrics");
    EXPECT_EQ(reply.status, 200) << reply.body;
    return reply.body;
  }

  // Scrapes until colibri_active_generations is 0 (at most 60 s); its last value.
  double WaitForNoActiveGenerations() {
    double active = -1;
    for (int i = 0; i < 600 && active != 0; ++i) {
      active = Samples(Scrape(http_))["colibri_active_generations"];
      if (active != 0) ::usleep(100 * 1000);
    }
    return active;
  }

  std::unique_ptr<ServerProcess> node_;
  std::string node_metrics_;
  std::unique_ptr<ServerProcess> serve_;
  std::string http_;
};

TEST_F(MetricsTest, ValuesMoveWithAGenerationOverANodeAndPromtoolAcceptsBoth) {
  ASSERT_NO_FATAL_FAILURE(StartNode());
  ASSERT_NO_FATAL_FAILURE(StartServe(Model("qwen3moe-tiny-f32"), {"--nodes", node_->address()}));
  const HttpReply generated = PostJson(
      http_, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 6}, {"temperature", 0}});
  ASSERT_EQ(generated.status, 200) << generated.body;
  const json usage = json::parse(generated.body)["usage"];
  const int completion_tokens = usage["completion_tokens"];
  ASSERT_GT(completion_tokens, 1);

  const std::string text = Scrape(http_);
  std::map<std::string, double> s = Samples(text);
  EXPECT_EQ(s["colibri_generated_tokens_total"], completion_tokens) << text;
  EXPECT_EQ(s["colibri_prompt_tokens_total"], usage["prompt_tokens"].get<int>()) << text;
  EXPECT_EQ(s["colibri_generations_total{outcome=\"OK\"}"], 1) << text;
  EXPECT_EQ(s["colibri_time_to_first_token_seconds_count"], 1) << text;
  EXPECT_EQ(s["colibri_inter_token_latency_seconds_count"], completion_tokens - 1) << text;
  EXPECT_EQ(s["colibri_requests_total{api=\"http\",endpoint=\"/v1/completions\",status=\"200\"}"],
            1)
      << text;
  EXPECT_EQ(s["colibri_active_generations"], 0) << text;
  EXPECT_EQ(s["colibri_queue_depth"], 0) << text;
  EXPECT_EQ(s["colibri_node_healthy{node=\"n1\"}"], 1) << text;
  const double round_trips = s["colibri_node_round_trips_total{node=\"n1\"}"];
  EXPECT_GT(round_trips, 0) << text;
  EXPECT_EQ(s["colibri_node_failures_total{node=\"n1\"}"], 0) << text;

  const std::string node_text = Scrape(node_metrics_);
  std::map<std::string, double> n = Samples(node_text);
  EXPECT_EQ(n["colibri_node_info{node=\"n1\"}"], 1) << node_text;
  EXPECT_EQ(n["colibri_node_compute_requests_total"], round_trips) << node_text;
  EXPECT_EQ(n["colibri_node_compute_seconds_count"], round_trips) << node_text;
  EXPECT_GT(n["colibri_node_ram_budget_bytes"], 0) << node_text;
  EXPECT_GT(n["colibri_node_experts_stored"], 0) << node_text;
  EXPECT_GT(n["colibri_node_ram_hits_total"] + n["colibri_node_ram_misses_total"], 0) << node_text;
  EXPECT_EQ(n.count("colibri_node_disk_wait_seconds_total"), 1u) << node_text;

  // Scraping is itself a request, counted at its end.
  EXPECT_GE(
      Samples(Scrape(
          http_))["colibri_requests_total{api=\"http\",endpoint=\"/metrics\",status=\"200\"}"],
      1);

  bool skipped = false;
  EXPECT_EQ(Promtool(text, &skipped), "") << text;
  EXPECT_EQ(Promtool(node_text, &skipped), "") << node_text;
  if (skipped) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
}

TEST_F(MetricsTest, TheNodeListenerNeedsTheTokenBeyondLoopbackAndChecksIt) {
  const std::string dir = testing::MakeTempDir("metrics-token");
  const CommandResult refused = testing::RunCommand(
      {Node(), "--listen", "127.0.0.1:0", "--data-dir", dir, "--metrics-listen", "0.0.0.0:0"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("0.0.0.0:0"), std::string::npos) << refused.err;

  const std::string token_file = dir + "/token";
  const std::string token = "metrics-test-token-0123456789abcdef";
  std::ofstream(token_file) << token;
  ASSERT_NO_FATAL_FAILURE(StartNode({"--auth-token-file", token_file}));
  EXPECT_EQ(Curl(node_metrics_, "/metrics").status, 401);
  EXPECT_EQ(Curl(node_metrics_, "/metrics", {"-H", "Authorization: Bearer wrong"}).status, 401);
  const HttpReply ok = Curl(node_metrics_, "/metrics", {"-H", "Authorization: Bearer " + token});
  EXPECT_EQ(ok.status, 200);
  EXPECT_NE(ok.body.find("colibri_node_compute_requests_total 0\n"), std::string::npos) << ok.body;
}

TEST_F(MetricsTest, ANonStreamingClientThatDisconnectsCancelsItsGeneration) {
  // One session and a generation far longer than the client waits: unless
  // the disconnect cancels it, it keeps the session busy for minutes
  // (glm4moe-tiny is trained for a long context).
  ASSERT_NO_FATAL_FAILURE(
      StartServe(Model("glm4moe-tiny-q4_k_m"), {"--sessions", "1", "--ctx-size", "65536"}));
  const json request = {
      {"prompt", kPrompt}, {"max_tokens", 60000}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpReply abandoned = PostJson(http_, "/v1/completions", request, {"--max-time", "2"});
  EXPECT_EQ(abandoned.status, 0) << "curl should have given up: " << abandoned.body;
  EXPECT_EQ(WaitForNoActiveGenerations(), 0) << "the abandoned generation is still running";
  const std::map<std::string, double> s = Samples(Scrape(http_));
  EXPECT_EQ(s.at("colibri_generations_total{outcome=\"CANCELLED\"}"), 1);
  EXPECT_GT(s.at("colibri_generated_tokens_total"), 0);
  const HttpReply next =
      PostJson(http_, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 3}});
  EXPECT_EQ(next.status, 200) << next.body;
}

TEST_F(MetricsTest, AStreamThatFailsAfterItStartedEndsWithAnErrorEvent) {
  // A server told to stop cancels the generations in progress: a stream
  // already under way gets an error event, and no [DONE].
  ASSERT_NO_FATAL_FAILURE(
      StartServe(Model("glm4moe-tiny-q4_k_m"), {"--sessions", "1", "--ctx-size", "65536"}));
  const std::string out = testing::MakeTempDir("metrics-stream") + "/stream.txt";
  const json request = {{"prompt", kPrompt},
                        {"max_tokens", 60000},
                        {"temperature", 0},
                        {"ignore_eos", true},
                        {"stream", true}};
  // curl in the background (the stream lasts until serve stops), writing
  // what it receives to `out`.
  const std::string command = std::string(kCurl) + " -sS -N -o " + out +
                              " -H 'Content-Type: application/json' --data-binary '" +
                              request.dump() + "' http://" + http_ + "/v1/completions";
  const CommandResult started =
      testing::RunCommand({"/bin/sh", "-c", command + " >/dev/null 2>&1 & echo $!"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const int curl_pid = std::atoi(started.out.c_str());
  // Wait for the stream to carry tokens.
  std::string body;
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(out);
    body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (body.find("\"text\"") != std::string::npos) break;
    ::usleep(100 * 1000);
  }
  ASSERT_NE(body.find("\"text\""), std::string::npos) << body;
  EXPECT_EQ(serve_->Stop(SIGTERM), 0);
  for (int i = 0; i < 100 && ::kill(curl_pid, 0) == 0; ++i) ::usleep(100 * 1000);
  std::ifstream in(out);
  body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::vector<std::string> data;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&event, "data: ")) data.emplace_back(event);
  }
  ASSERT_GE(data.size(), 2u) << body;
  EXPECT_EQ(body.find("[DONE]"), std::string::npos) << body;
  const json last = json::parse(data.back(), nullptr, false);
  ASSERT_TRUE(last.is_object()) << data.back();
  ASSERT_TRUE(last.contains("error")) << data.back();
  EXPECT_TRUE(last["error"]["message"].is_string()) << data.back();
  EXPECT_TRUE(last["error"]["type"].is_string()) << data.back();
}

}  // namespace
}  // namespace colibri
