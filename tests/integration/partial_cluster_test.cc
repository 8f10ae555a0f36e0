// Start-up is not all-or-nothing: `run` and `serve` with one of three nodes
// unreachable start with the two they reach (the same tokens as the local
// run), serve takes the third in once it comes up, and a run whose node dies
// while experts are being sent to it completes. A node that hangs (SIGSTOP)
// under serve does not stall it. Hot-expert replication (--rebalance) keeps
// the local tokens while copies come and go and a node is killed as rounds
// run. No timing is asserted; ctest's timeout bounds each test.
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/integration/node_process.h"
#include "tests/support/golden.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using client::Client;
using client::ClientOptions;
using client::GenerateResult;
using testing::CommandResult;
using testing::NodeProcess;
using testing::ServerProcess;

constexpr int kTokens = 8;

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string ModelPath(const std::string& model) {
  return testing::FixturesDir() + "/models/" + model + ".gguf";
}

std::vector<int32_t> ParseIds(const std::string& line) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(line, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    ids.push_back(std::stoi(std::string(piece)));
  }
  return ids;
}

std::vector<int32_t> Prompt(const std::string& model) {
  testing::GoldenCase c;
  std::string error;
  EXPECT_TRUE(testing::LoadGoldenCase(model, "english", &c, &error)) << error;
  return c.prompt_tokens;
}

std::vector<std::string> RunArgs(const std::string& model, const std::vector<int32_t>& prompt,
                                 int n_predict = kTokens) {
  return {Coordinator(),     "run",
          "--model",         ModelPath(model),
          "--prompt-tokens", testing::JoinIds(std::vector<int>(prompt.begin(), prompt.end())),
          "--n-predict",     std::to_string(n_predict),
          "--temp",          "0",
          "--ignore-eos",    "--print-token-ids",
          "--threads",       "1"};
}

// A greedy generation of `n` tokens of `prompt`, EOS ignored.
v1::GenerateRequest Request(const std::vector<int32_t>& prompt, int n = kTokens) {
  v1::GenerateRequest request;
  for (int32_t id : prompt) request.mutable_tokens()->add_ids(id);
  request.set_max_tokens(n);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);
  return request;
}

class PartialClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  }
  // Starts three nodes, then stops the last; returns its port (free again).
  int StartTwoOfThree() {
    for (int i = 0; i < 3; ++i) {
      nodes_.push_back(std::make_unique<NodeProcess>(testing::MakeTempDir("partial"),
                                                     "node-" + std::to_string(i)));
      std::string error;
      EXPECT_TRUE(nodes_.back()->Start(0, &error)) << error;
    }
    const int port = nodes_[2]->port();
    addresses_ = nodes_[0]->address() + "," + nodes_[1]->address() + "," + nodes_[2]->address();
    nodes_[2]->Stop(SIGKILL);
    return port;
  }

  // Starts three nodes (data in temporary folders named after `what`) and
  // lists them in addresses_.
  void StartThree(const std::string& what) {
    for (int i = 0; i < 3; ++i) {
      nodes_.push_back(
          std::make_unique<NodeProcess>(testing::MakeTempDir(what), "node-" + std::to_string(i)));
      std::string error;
      ASSERT_TRUE(nodes_.back()->Start(0, &error)) << error;
      addresses_ += (i > 0 ? "," : "") + nodes_.back()->address();
    }
  }

  // Starts `serve` of model over addresses_ with `extra` flags and connects
  // a client to it.
  void Serve(const std::string& model, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        Coordinator(), "serve", "--model", ModelPath(model), "--listen",         "127.0.0.1:0",
        "--threads",   "1",     "--nodes", addresses_,       "--probe-interval", "0.2"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string error;
    ASSERT_TRUE(serve_.Start(args, &error)) << error;
    ClientOptions options;
    options.address = serve_.address();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::vector<std::unique_ptr<NodeProcess>> nodes_;
  std::string addresses_;
  ServerProcess serve_;
  std::unique_ptr<Client> client_;
};

TEST_F(PartialClusterTest, RunAndServeStartWithoutAnUnreachableNodeAndServeTakesItInLater) {
  const std::string model = "qwen3moe-tiny-f32";
  const std::vector<int32_t> prompt = Prompt(model);
  const CommandResult local = testing::RunCommand(RunArgs(model, prompt));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::vector<int32_t> expected = ParseIds(local.out);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kTokens));

  const int port = StartTwoOfThree();
  std::vector<std::string> args = RunArgs(model, prompt);
  args.insert(args.end(), {"--nodes", addresses_});
  const CommandResult partial = testing::RunCommand(args);
  ASSERT_EQ(partial.exit_code, 0) << partial.err;
  EXPECT_EQ(ParseIds(partial.out), expected);
  EXPECT_NE(partial.err.find("starting without it"), std::string::npos) << partial.err;

  ASSERT_NO_FATAL_FAILURE(Serve(model, {}));
  const v1::GenerateRequest request = Request(prompt);
  absl::StatusOr<GenerateResult> before = client_->Generate(request);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->tokens, expected);
  absl::StatusOr<v1::ClusterStatusReply> status = client_->ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->nodes_size(), 3);
  EXPECT_FALSE(status->nodes(2).healthy());
  EXPECT_TRUE(status->nodes(2).excluded());
  EXPECT_EQ(status->nodes(2).experts_assigned(), 0);
  EXPECT_EQ(status->fallback_routes(), 0);  // every expert placed on the two

  // The third node comes up on its address: it joins under its own id (the
  // provisional entry made for its address is retired) and gets work.
  std::string error;
  ASSERT_TRUE(nodes_[2]->Start(port, &error)) << error;
  bool placed = false;
  for (int i = 0; i < 300 && !placed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = client_->ClusterStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    placed = status->nodes(2).healthy() && !status->nodes(2).excluded() &&
             status->nodes(2).experts_assigned() > 0;
  }
  ASSERT_TRUE(placed) << status->DebugString();
  // Placed under the id it reports, not under its address.
  EXPECT_EQ(status->nodes(2).node_id(), "node-2");
  EXPECT_GE(status->nodes(2).experts_stored(), status->nodes(2).experts_assigned());
  absl::StatusOr<GenerateResult> after = client_->Generate(request);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->tokens, expected);
  status = client_->ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_GT(status->nodes(2).requests(), 0);
  EXPECT_EQ(serve_.Stop(SIGTERM), 0);
}

TEST_F(PartialClusterTest, ServeKeepsTheLocalTokensWhileANodeIsStopped) {
  // Three nodes, two copies of each expert, 48 tokens per generation.
  const std::string model = "qwen3moe-tiny-f32";
  const int n = 48;
  const std::vector<int32_t> prompt = Prompt(model);
  const CommandResult local = testing::RunCommand(RunArgs(model, prompt, n));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::vector<int32_t> expected = ParseIds(local.out);
  ASSERT_EQ(expected.size(), static_cast<size_t>(n));
  ASSERT_NO_FATAL_FAILURE(StartThree("hung"));
  ASSERT_NO_FATAL_FAILURE(Serve(model, {"--replicas", "2"}));
  const v1::GenerateRequest request = Request(prompt, n);
  // Healthy first: every node has replied, so every node has an estimate.
  absl::StatusOr<GenerateResult> healthy = client_->Generate(request);
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_EQ(healthy->tokens, expected);

  // Stop node 1 while a generation is under way, then generate again with it
  // still stopped (in case the first finished before the signal landed).
  const int stopped = nodes_[1]->pid();
  absl::StatusOr<GenerateResult> during = absl::UnknownError("not run");
  std::thread generation([&] { during = client_->Generate(request); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  generation.join();
  absl::StatusOr<GenerateResult> after = client_->Generate(request);
  absl::StatusOr<v1::ClusterStatusReply> status = client_->ClusterStatus();
  ::kill(stopped, SIGCONT);
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->tokens, expected);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->tokens, expected);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->nodes_size(), 3);
  EXPECT_FALSE(status->nodes(1).healthy());
  EXPECT_EQ(serve_.Stop(SIGTERM), 0);
}

// serve --rebalance with rounds every 50 ms over three nodes and one copy of
// each expert: generations run without pause while copies of the hot experts
// are sent, installed and dropped; once a node holds extra copies it is killed
// (-9) with rounds still running (transfers to it may be in flight). Every
// generation, before, during and after, gives the local run's tokens.
TEST_F(PartialClusterTest, RebalancingKeepsTheLocalTokensWhenANodeDies) {
  const std::string model = "qwen3moe-tiny-f32";
  const int n = 24;
  const std::vector<int32_t> prompt = Prompt(model);
  const CommandResult local = testing::RunCommand(RunArgs(model, prompt, n));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::vector<int32_t> expected = ParseIds(local.out);
  ASSERT_EQ(expected.size(), static_cast<size_t>(n));
  ASSERT_NO_FATAL_FAILURE(StartThree("rebalance"));
  ASSERT_NO_FATAL_FAILURE(Serve(model, {"--rebalance-interval", "0.05"}));
  const v1::GenerateRequest request = Request(prompt, n);
  absl::StatusOr<v1::ClusterStatusReply> status = client_->ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  std::vector<int64_t> rendezvous;
  for (const v1::NodeStatus& node : status->nodes()) rendezvous.push_back(node.experts_assigned());
  // Generate until some node holds an extra copy in force.
  int holder = -1;
  for (int i = 0; i < 200 && holder < 0; ++i) {
    absl::StatusOr<GenerateResult> r = client_->Generate(request);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->tokens, expected) << "generation " << i;
    status = client_->ClusterStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    for (int j = 0; j < 3; ++j) {
      if (status->nodes(j).experts_assigned() > rendezvous[j]) holder = j;
    }
  }
  ASSERT_GE(holder, 0) << "no extra copy was ever placed";
  // Kill the holder while generations and rounds go on.
  std::vector<absl::StatusOr<GenerateResult>> during(4, absl::UnknownError("not run"));
  std::thread generations([&] {
    for (auto& r : during) r = client_->Generate(request);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  nodes_[holder]->Stop(SIGKILL);
  generations.join();
  for (const auto& r : during) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tokens, expected);
  }
  absl::StatusOr<GenerateResult> after = client_->Generate(request);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->tokens, expected);
  EXPECT_EQ(serve_.Stop(SIGTERM), 0);
}

TEST_F(PartialClusterTest, ARunWhoseNodeDiesDuringIngestCompletes) {
  // The third node behind a 400 kbit/s link (its 0.2 MiB of experts take
  // about 4 s), killed 2 s into the run while its experts stream: the run
  // goes on without it and its tokens are the local run's.
  const std::string model = "qwen2moe-tiny-q8_0";
  const std::vector<int32_t> prompt = Prompt(model);
  const CommandResult local = testing::RunCommand(RunArgs(model, prompt));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  for (int i = 0; i < 3; ++i) {
    nodes_.push_back(
        std::make_unique<NodeProcess>(testing::MakeTempDir("dying"), "node-" + std::to_string(i)));
    std::string error;
    ASSERT_TRUE(nodes_.back()->Start(0, &error)) << error;
  }
  ServerProcess relay;
  std::string error;
  ASSERT_TRUE(relay.Start({testing::BinaryPath("tools/relay/colibri-relay"), "--route",
                           "127.0.0.1:0=" + nodes_[2]->address(), "--bandwidth", "400kbit"},
                          &error))
      << error;
  // "listening on HOST:PORT -> TARGET"
  const std::string relayed = relay.address().substr(0, relay.address().find(' '));
  std::vector<std::string> args = RunArgs(model, prompt);
  args.insert(args.end(),
              {"--nodes", nodes_[0]->address() + "," + nodes_[1]->address() + "," + relayed});
  std::thread killer([this] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    nodes_[2]->Stop(SIGKILL);
  });
  const CommandResult r = testing::RunCommand(args);
  killer.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("going on without it"), std::string::npos) << r.err;
  EXPECT_EQ(ParseIds(r.out), ParseIds(local.out));
}

}  // namespace
}  // namespace colibri
