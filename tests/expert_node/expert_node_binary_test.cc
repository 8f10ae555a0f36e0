// The colibri-expert-node binary: start-up checks, the "listening on" line,
// serving over a real socket, graceful SIGTERM.
#include <signal.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"
#include "tests/expert_node/node_test_client.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri::expert_node {
namespace {

using testing::TempDir;

std::string NodeBinary() { return colibri::testing::BinaryPath("expert_node/colibri-expert-node"); }

// The binary with `args`, started in the background.
class NodeProcess : public colibri::testing::ServerProcess {
 public:
  bool Start(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {NodeBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string error;
    const bool ok = ServerProcess::Start(argv, &error);
    if (!ok) ADD_FAILURE() << error;
    return ok;
  }
  // SIGTERM, then the exit code (or 128 + signal).
  int Stop() { return ServerProcess::Stop(SIGTERM); }
};

TEST(ExpertNodeBinaryTest, RefusesWildcardWithoutTokenUnlessInsecure) {
  TempDir dir;
  const colibri::testing::CommandResult refused = colibri::testing::RunCommand(
      {NodeBinary(), "--listen", "0.0.0.0:0", "--data-dir", dir.path()});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(refused.err, "refusing to listen")) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "--insecure")) << refused.err;

  NodeProcess insecure;
  ASSERT_TRUE(insecure.Start({"--listen", "0.0.0.0:0", "--data-dir", dir.path(), "--insecure"}));
  EXPECT_TRUE(absl::StartsWith(insecure.address(), "0.0.0.0:")) << insecure.address();
  EXPECT_EQ(insecure.Stop(), 0);
}

TEST(ExpertNodeBinaryTest, RejectsBadFlags) {
  TempDir dir;
  EXPECT_NE(colibri::testing::RunCommand({NodeBinary(), "--listen", "127.0.0.1:0", "--data-dir",
                                          dir.path(), "--ram-budget", "lots"})
                .exit_code,
            0);
  EXPECT_NE(colibri::testing::RunCommand({NodeBinary(), "--listen", "127.0.0.1:0", "--data-dir",
                                          dir.path(), "--auth-token-file", "/nonexistent"})
                .exit_code,
            0);
}

TEST(ExpertNodeBinaryTest, ServesWithTokenAndImportsAtStartup) {
  const std::string fixtures = colibri::testing::FixturesDir();
  if (fixtures.empty()) GTEST_SKIP() << "fixtures dir not found";
  const std::string gguf = fixtures + "/models/qwen3moe-tiny-f32.gguf";
  TempDir dir;
  const std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << "tok-123\n";
  NodeProcess node;
  ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", dir.path() + "/db",
                          "--auth-token-file", token_file, "--ram-budget", "16M",
                          "--import-gguf", gguf}));
  auto stub = testing::ConnectTo(node.address());
  // The import runs after the listening line; wait for it (bounded).
  v1::InventoryReply inventory;
  for (int i = 0; i < 100; ++i) {
    inventory.Clear();
    auto context = testing::MakeContext("tok-123");
    ASSERT_TRUE(stub->Inventory(context.get(), v1::InventoryRequest(), &inventory).ok());
    if (inventory.entries_size() > 0 && inventory.entries(inventory.entries_size() - 1).experts_size() > 0) {
      v1::NodeStatsReply stats;
      auto c2 = testing::MakeContext("tok-123");
      ASSERT_TRUE(stub->NodeStats(c2.get(), v1::NodeStatsRequest(), &stats).ok());
      if (stats.experts_stored() == 24) break;
    }
    ::usleep(50000);
  }
  ASSERT_GT(inventory.entries_size(), 0);
  EXPECT_EQ(inventory.ram_budget_bytes(), 16u << 20);
  auto context = testing::MakeContext();
  v1::NodeStatsReply stats;
  EXPECT_EQ(stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Stops promptly although this client keeps its connection open.
  EXPECT_EQ(node.Stop(), 0);
}

}  // namespace
}  // namespace colibri::expert_node
