// A hung expert node (SIGSTOP, like a swap storm) must not stall the
// cluster: with three nodes and two copies of each expert, `serve` keeps
// generating while one node is stopped, with the local run's tokens. No
// timing is asserted; ctest's timeout bounds the whole test.
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

constexpr int kTokens = 48;
const char kModel[] = "qwen3moe-tiny-f32";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string ModelPath() { return testing::FixturesDir() + "/models/" + kModel + ".gguf"; }

std::vector<int32_t> ParseIds(const std::string& line) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(line, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    ids.push_back(std::stoi(std::string(piece)));
  }
  return ids;
}

TEST(HungNodeTest, ServeCompletesWithTheLocalTokensWhileANodeIsStopped) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  testing::GoldenCase golden;
  std::string error;
  ASSERT_TRUE(testing::LoadGoldenCase(kModel, "english", &golden, &error)) << error;
  const std::vector<int32_t> prompt = golden.prompt_tokens;
  const CommandResult local = testing::RunCommand(
      {Coordinator(), "run", "--model", ModelPath(), "--prompt-tokens",
       testing::JoinIds(std::vector<int>(prompt.begin(), prompt.end())), "--n-predict",
       std::to_string(kTokens), "--temp", "0", "--ignore-eos", "--print-token-ids", "--threads",
       "1"});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::vector<int32_t> expected = ParseIds(local.out);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kTokens));

  std::vector<std::unique_ptr<NodeProcess>> nodes;
  std::string addresses;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(
        std::make_unique<NodeProcess>(testing::MakeTempDir("hung"), "node-" + std::to_string(i)));
    ASSERT_TRUE(nodes.back()->Start(0, &error)) << error;
    addresses += (i > 0 ? "," : "") + nodes.back()->address();
  }
  ServerProcess serve;
  ASSERT_TRUE(serve.Start({Coordinator(), "serve", "--model", ModelPath(), "--listen",
                           "127.0.0.1:0", "--threads", "1", "--nodes", addresses, "--replicas",
                           "2", "--probe-interval", "0.2"},
                          &error))
      << error;
  ClientOptions options;
  options.address = serve.address();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  v1::GenerateRequest request;
  for (int32_t id : prompt) request.mutable_tokens()->add_ids(id);
  request.set_max_tokens(kTokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);

  // Healthy first: every node has replied, so every node has an estimate.
  absl::StatusOr<GenerateResult> healthy = (*client)->Generate(request);
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_EQ(healthy->tokens, expected);

  // Stop node 1 while a generation is under way, then generate again with it
  // still stopped (in case the first finished before the signal landed).
  const int stopped = nodes[1]->pid();
  absl::StatusOr<GenerateResult> during = absl::UnknownError("not run");
  std::thread generation([&] { during = (*client)->Generate(request); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  generation.join();
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->tokens, expected);
  absl::StatusOr<GenerateResult> after = (*client)->Generate(request);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->tokens, expected);

  absl::StatusOr<v1::ClusterStatusReply> status = (*client)->ClusterStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->nodes_size(), 3);
  EXPECT_FALSE(status->nodes(1).healthy());
  ::kill(stopped, SIGCONT);
  EXPECT_EQ(serve.Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace colibri
