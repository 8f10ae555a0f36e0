// Prefix reuse across requests in `colibri-coordinator serve` (on by
// default), against real processes on loopback, locally and with experts on
// 3 nodes: a chat's second turn, whose prompt holds the first turn's prompt
// and answer, reports usage.prompt_tokens_details.cached_tokens >= 90% of the
// first turn's prompt and gives exactly the text and logprobs a server
// without reuse (--kv-cache-size 0) gives; so do several requests sharing
// that prefix at once, and a gRPC request (GenerateStats.cached_prompt_tokens).
// A model with sliding-window layers (gpt-oss) reuses nothing. With
// --kv-cache-dir a serve killed with SIGKILL after a turn and restarted on
// the same directory serves the next turn from disk, with the same tokens.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/node_process.h"
#include "tests/support/metrics_text.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using json = nlohmann::json;
using testing::CommandResult;
using testing::NodeProcess;
using testing::ServerProcess;

constexpr char kCurl[] = "/usr/bin/curl";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string Model(const std::string& name) {
  return testing::FixturesDir() + "/models/" + name + ".gguf";
}

// A system prompt of ~100 tokens, so that a block boundary costs little.
const char kSystem[] =
    "You are a careful assistant for a small farm in the hills. You answer questions about the "
    "weather, the animals, the fields and the market in the valley. You keep answers short, you "
    "say when you do not know, and you never invent prices. The farm keeps sheep, goats, two "
    "cows, a dozen hens and bees; it grows barley, beans and apples, and sells cheese and honey.";

// What one chat completion gave, comparable across servers.
struct Reply {
  std::string text;
  std::string logprobs;  // the logprobs object, serialized
  int prompt_tokens = 0;
  int cached_tokens = -1;
};

class PrefixReuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    if (::access(kCurl, X_OK) != 0) GTEST_SKIP() << "curl not installed (scripts/install-deps.sh)";
  }

  void StartNodes(int n) {
    std::string error;
    ASSERT_TRUE(testing::StartNodes(n, "node", nullptr, &nodes_, &error)) << error;
  }

  void StartServe(const std::vector<std::string>& extra, const std::string& model) {
    std::vector<std::string> args = {Coordinator(), "serve",     "--model",     model,
                                     "--listen",    "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                                     "--threads",   "1",         "--sessions",  "3"};
    if (!nodes_.empty()) args.insert(args.end(), {"--nodes", testing::JoinAddresses(nodes_)});
    args.insert(args.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServerProcess>();
    std::string error;
    ASSERT_TRUE(serve_->Start(args, &error)) << error;
    http_ = serve_->WaitForLine("http listening on ", &error);
    ASSERT_FALSE(http_.empty()) << error;
  }

  // A greedy chat completion with logprobs.
  Reply Chat(const json& messages, int max_tokens = 12) {
    const json body = {{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0},
                       {"ignore_eos", true},   {"logprobs", true},         {"top_logprobs", 3}};
    const CommandResult r =
        testing::RunCommand({kCurl, "-sS", "-H", "Content-Type: application/json", "--data-binary",
                             body.dump(), "http://" + http_ + "/v1/chat/completions"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json v = json::parse(r.out, nullptr, false);
    Reply reply;
    EXPECT_TRUE(v.is_object() && v.contains("choices")) << r.out;
    if (!v.is_object() || !v.contains("choices")) return reply;
    reply.text = v["choices"][0]["message"]["content"];
    reply.logprobs = v["choices"][0]["logprobs"].dump();
    reply.prompt_tokens = v["usage"]["prompt_tokens"];
    reply.cached_tokens = v["usage"]["prompt_tokens_details"]["cached_tokens"];
    return reply;
  }

  // A greedy gRPC generation of `text`.
  client::GenerateResult Grpc(const std::string& text) {
    v1::GenerateRequest request;
    request.set_text(text);
    request.set_max_tokens(8);
    request.set_ignore_eos(true);
    request.mutable_sampling()->set_temperature(0);
    client::ClientOptions options;
    options.address = serve_->address();
    auto c = client::Client::Connect(options);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    absl::StatusOr<client::GenerateResult> r = (*c)->Generate(request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : client::GenerateResult();
  }

  double Metric(const std::string& series) {
    const CommandResult r = testing::RunCommand({kCurl, "-sS", "http://" + http_ + "/metrics"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return testing::MetricSample(r.out, series);
  }

  // Everything one server gives: turn 1, turn 2, three follow-ups sharing
  // turn 1's prefix at once, and two gRPC requests (the second extends the
  // first's prompt).
  struct Conversation {
    Reply turn1, turn2;
    std::vector<Reply> together;
    client::GenerateResult grpc1, grpc2;
  };
  Conversation Converse() {
    Conversation c;
    json messages = {{{"role", "system"}, {"content", kSystem}},
                     {{"role", "user"}, {"content", "What should I plant after the barley?"}}};
    c.turn1 = Chat(messages);
    messages.push_back({{"role", "assistant"}, {"content", c.turn1.text}});
    json turn2 = messages;
    turn2.push_back({{"role", "user"}, {"content", "And where do the bees go in winter?"}});
    c.turn2 = Chat(turn2);
    const std::vector<std::string> questions = {"Is the honey ready?", "How are the goats?",
                                                "Will it rain tomorrow?"};
    c.together.resize(questions.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < questions.size(); ++i) {
      json m = messages;
      m.push_back({{"role", "user"}, {"content", questions[i]}});
      threads.emplace_back([this, &c, i, m] { c.together[i] = Chat(m); });
    }
    for (std::thread& t : threads) t.join();
    const std::string text = std::string(kSystem) + " Question: what do the hens eat?";
    c.grpc1 = Grpc(text);
    c.grpc2 = Grpc(text + " And the cows?");
    return c;
  }

  static void ExpectSame(const Reply& want, const Reply& got) {
    EXPECT_EQ(want.text, got.text);
    EXPECT_EQ(want.logprobs, got.logprobs);
    EXPECT_EQ(want.prompt_tokens, got.prompt_tokens);
  }

  // Reference on a server without reuse, then the same on one with it.
  void CheckReuse(const std::string& model) {
    StartServe({"--kv-cache-size", "0"}, model);
    const Conversation want = Converse();
    EXPECT_EQ(want.turn2.cached_tokens, 0);
    EXPECT_EQ(Metric("colibri_prompt_tokens_cached_total"), 0);
    serve_.reset();

    StartServe({}, model);
    const Conversation got = Converse();
    ExpectSame(want.turn1, got.turn1);
    ExpectSame(want.turn2, got.turn2);
    EXPECT_EQ(got.turn1.cached_tokens, 0);
    EXPECT_GE(got.turn2.cached_tokens, 0.9 * got.turn1.prompt_tokens)
        << "turn 1 had " << got.turn1.prompt_tokens << " prompt tokens";
    EXPECT_LT(got.turn2.cached_tokens, got.turn2.prompt_tokens);
    int cached = got.turn2.cached_tokens;
    for (size_t i = 0; i < want.together.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "follow-up " << i);
      ExpectSame(want.together[i], got.together[i]);
      EXPECT_GE(got.together[i].cached_tokens, 0.9 * got.turn1.prompt_tokens);
      cached += got.together[i].cached_tokens;
    }
    EXPECT_EQ(got.grpc1.tokens, want.grpc1.tokens);
    EXPECT_EQ(got.grpc2.tokens, want.grpc2.tokens);
    EXPECT_EQ(want.grpc2.stats.cached_prompt_tokens(), 0);
    EXPECT_GT(got.grpc2.stats.cached_prompt_tokens(), 0);
    cached += got.grpc1.stats.cached_prompt_tokens() + got.grpc2.stats.cached_prompt_tokens();
    EXPECT_EQ(Metric("colibri_prompt_tokens_cached_total"), cached);
    EXPECT_GT(Metric("colibri_prefix_cache_bytes"), 0);
  }

  std::vector<std::unique_ptr<NodeProcess>> nodes_;
  std::unique_ptr<ServerProcess> serve_;
  std::string http_;  // HOST:PORT of the HTTP API
};

TEST_F(PrefixReuseTest, ASecondTurnReusesTheFirstAndGivesTheSameTokensLocally) {
  CheckReuse(Model("qwen3moe-tiny-f32"));
}

TEST_F(PrefixReuseTest, ASecondTurnReusesTheFirstAndGivesTheSameTokensOnThreeNodes) {
  StartNodes(3);
  CheckReuse(Model("qwen3moe-tiny-f32"));
}

TEST_F(PrefixReuseTest, AfterKillNineARestartTakesTheNextTurnFromDisk) {
  const std::string model = Model("qwen3moe-tiny-f32");
  json turn1 = {{{"role", "system"}, {"content", kSystem}},
                {{"role", "user"}, {"content", "What should I plant after the barley?"}}};
  StartServe({"--kv-cache-size", "0"}, model);
  const Reply want1 = Chat(turn1);
  json turn2 = turn1;
  turn2.push_back({{"role", "assistant"}, {"content", want1.text}});
  turn2.push_back({{"role", "user"}, {"content", "And where do the bees go in winter?"}});
  const Reply want2 = Chat(turn2);
  serve_.reset();

  const std::string dir = ::testing::TempDir() + "/prefix_reuse_test-kv-cache-dir";
  std::filesystem::remove_all(dir);
  StartServe({"--kv-cache-dir", dir}, model);
  const Reply got1 = Chat(turn1);
  ExpectSame(want1, got1);
  // The writer is asynchronous: kill once /metrics says the turn's blocks
  // are written (not after a guessed time), with nothing flushed at exit.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(Metric("colibri_prefix_disk_written_blocks_total") > 0 &&
           Metric("colibri_prefix_disk_pending_bytes") == 0)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the blocks were never written";
    ::usleep(20000);
  }
  EXPECT_EQ(serve_->Stop(SIGKILL), 128 + SIGKILL);

  StartServe({"--kv-cache-dir", dir}, model);
  const Reply got2 = Chat(turn2);
  ExpectSame(want2, got2);
  EXPECT_GE(got2.cached_tokens, 0.9 * got1.prompt_tokens)
      << "turn 1 had " << got1.prompt_tokens << " prompt tokens";
  EXPECT_GT(Metric("colibri_prefix_disk_loaded_blocks_total"), 0);
  EXPECT_EQ(Metric("colibri_prefix_disk_rejected_files_total"), 0);
}

TEST_F(PrefixReuseTest, SlidingWindowLayersTurnReuseOff) {
  StartServe({}, Model("gpt-oss-tiny-mxfp4"));
  json messages = {{{"role", "system"}, {"content", kSystem}},
                   {{"role", "user"}, {"content", "What should I plant after the barley?"}}};
  const Reply turn1 = Chat(messages, 4);
  messages.push_back({{"role", "assistant"}, {"content", turn1.text}});
  messages.push_back({{"role", "user"}, {"content", "And the bees?"}});
  const Reply turn2 = Chat(messages, 4);
  EXPECT_EQ(turn2.cached_tokens, 0);
  EXPECT_EQ(Metric("colibri_prefix_cache_bytes"), 0);
}

}  // namespace
}  // namespace colibri
