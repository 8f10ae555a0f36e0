// The colibri-expert-node binary: start-up checks, the "listening on" line,
// serving over a real socket, graceful SIGTERM.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "expert_node/expert_record.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/gguf/gguf_fingerprint.h"
#include "tests/expert_node/expert_test_util.h"
#include "tests/expert_node/node_test_client.h"
#include "tests/support/auth_token.h"
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

// The settings come from --config; a flag given as well wins; Inventory
// reports the advertised address.
TEST(ExpertNodeBinaryTest, ConfigFileAndAdvertiseAddress) {
  TempDir dir;
  const std::string config = dir.path() + "/node.toml";
  std::ofstream(config) << "# an expert node\n"
                        << "listen = \"127.0.0.1:0\"\n"
                        << "data-dir = \"" << dir.path() << "/db\"\n"
                        << "node-id = \"from-file\"\n"
                        << "ram-budget = \"16M\"\n"
                        << "advertise = \"file.lab:7070\"\n";
  NodeProcess node;
  ASSERT_TRUE(node.Start({"--config", config, "--advertise", "node1.lab:7071"}));
  auto stub = testing::ConnectTo(node.address());
  v1::InventoryReply inventory;
  auto context = testing::MakeContext();
  ASSERT_TRUE(stub->Inventory(context.get(), v1::InventoryRequest(), &inventory).ok());
  EXPECT_EQ(inventory.node_id(), "from-file");
  EXPECT_EQ(inventory.advertise_address(), "node1.lab:7071");
  EXPECT_EQ(inventory.ram_budget_bytes(), 16u << 20);
  EXPECT_EQ(node.Stop(), 0);

  std::ofstream(config, std::ios::app) << "ram-budgt = \"1G\"\n";
  const colibri::testing::CommandResult unknown =
      colibri::testing::RunCommand({NodeBinary(), "--config", config});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(unknown.err, config + ":7: unknown key 'ram-budgt'"))
      << unknown.err;

  const colibri::testing::CommandResult wildcard = colibri::testing::RunCommand(
      {NodeBinary(), "--data-dir", dir.path(), "--advertise", "0.0.0.0:7070"});
  EXPECT_NE(wildcard.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(wildcard.err, "wildcard")) << wildcard.err;
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

// A node whose store is damaged says what is damaged
// and how to go on; --reset-store moves the store aside and starts empty with
// the same node id.
TEST(ExpertNodeBinaryTest, ADamagedStoreOffersRepairAndReset) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/data";
  {
    NodeProcess node;
    ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", dir}));
    EXPECT_EQ(node.Stop(), 0);
  }
  std::string id;
  std::ifstream(dir + "/NODE_ID") >> id;
  ASSERT_FALSE(id.empty());
  { std::ofstream(dir + "/CURRENT", std::ios::trunc) << "MANIFEST-999999"; }  // no newline

  const colibri::testing::CommandResult refused =
      colibri::testing::RunCommand({NodeBinary(), "--listen", "127.0.0.1:0", "--data-dir", dir});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(refused.err, "CURRENT")) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "--repair")) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "--reset-store")) << refused.err;

  {
    NodeProcess node;  // RocksDB rebuilds the MANIFEST and CURRENT
    ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", dir, "--repair"}));
    EXPECT_EQ(node.Stop(), 0);
  }
  { std::ofstream(dir + "/CURRENT", std::ios::trunc) << "MANIFEST-999999"; }
  NodeProcess node;
  ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", dir, "--reset-store"}));
  EXPECT_EQ(node.Stop(), 0);
  int aside = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    if (absl::StrContains(entry.path().filename().string(), "data.damaged-")) ++aside;
  }
  EXPECT_EQ(aside, 1);
  std::string id_after;
  std::ifstream(dir + "/NODE_ID") >> id_after;
  EXPECT_EQ(id_after, id);
}

// Node side: a guessable token, a huge or
// malformed node id are refused as usage errors; a unix socket is announced
// as itself, not as "unix:1".
TEST(ExpertNodeBinaryTest, RefusesWeakTokensAndBadIdsAndAnnouncesUnixSockets) {
  TempDir dir;
  const std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << "x\n";
  colibri::testing::CommandResult r =
      colibri::testing::RunCommand({NodeBinary(), "--listen", "127.0.0.1:0", "--data-dir",
                                    dir.path() + "/d", "--auth-token-file", token_file});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "fewer than the 32 required")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "x\n")) << r.err;
  for (const std::string& id :
       {std::string(100000, 'a'), std::string("a b"), std::string("\x1b[2Jnode")}) {
    r = colibri::testing::RunCommand({NodeBinary(), "--listen", "127.0.0.1:0", "--data-dir",
                                      dir.path() + "/d", "--node-id", id});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(absl::StrContains(r.err, "node id")) << r.err.substr(0, 200);
    EXPECT_FALSE(absl::StrContains(r.err, "\x1b")) << r.err.substr(0, 200);
    EXPECT_LT(r.err.size(), 1000u);
  }
  // A 1 MB NODE_ID file is damage, with a clear way out.
  {
    std::ofstream(dir.path() + "/NODE_ID") << std::string(1 << 20, 'n');
    r = colibri::testing::RunCommand(
        {NodeBinary(), "--listen", "127.0.0.1:0", "--data-dir", dir.path()});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(absl::StrContains(r.err, "NODE_ID is damaged")) << r.err.substr(0, 300);
    EXPECT_LT(r.err.size(), 1000u);
  }
  const std::string socket = "unix:" + dir.path() + "/node.sock";
  NodeProcess node;
  ASSERT_TRUE(node.Start({"--listen", socket, "--data-dir", dir.path() + "/u"}));
  EXPECT_EQ(node.address(), socket);
  EXPECT_EQ(node.Stop(), 0);
}

TEST(ExpertNodeBinaryTest, ServesWithTokenAndImportsAtStartup) {
  const std::string fixtures = colibri::testing::FixturesDir();
  if (fixtures.empty()) GTEST_SKIP() << "fixtures dir not found";
  const std::string gguf = fixtures + "/models/qwen3moe-tiny-f32.gguf";
  TempDir dir;
  const std::string token_file = dir.path() + "/token";
  const std::string token = colibri::testing::WriteAuthTokenFile(token_file);
  NodeProcess node;
  ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", dir.path() + "/db",
                          "--auth-token-file", token_file, "--ram-budget", "16M",
                          "--import-gguf", gguf}));
  auto stub = testing::ConnectTo(node.address());
  // The import runs after the listening line; wait for it (bounded).
  v1::InventoryReply inventory;
  for (int i = 0; i < 100; ++i) {
    inventory.Clear();
    auto context = testing::MakeContext(token);
    ASSERT_TRUE(stub->Inventory(context.get(), v1::InventoryRequest(), &inventory).ok());
    if (inventory.entries_size() > 0 && inventory.entries(inventory.entries_size() - 1).experts_size() > 0) {
      v1::NodeStatsReply stats;
      auto c2 = testing::MakeContext(token);
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

TEST(ExpertNodeBinaryTest, RefusesPinBudgetAboveRamBudget) {
  TempDir dir;
  const colibri::testing::CommandResult refused = colibri::testing::RunCommand(
      {NodeBinary(), "--listen", "127.0.0.1:0", "--data-dir", dir.path(), "--ram-budget", "1M",
       "--pin-budget", "2M"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(refused.err, "--pin-budget")) << refused.err;
}

v1::NodeStatsReply Stats(v1::ExpertService::Stub* stub) {
  v1::NodeStatsReply stats;
  auto context = testing::MakeContext();
  EXPECT_TRUE(stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).ok());
  return stats;
}

// Layer `layer`, token t routed to experts[t % size] alone.
v1::ComputeLayerRequest RequestFor(const arch::Model& model, const std::string& fingerprint,
                                   int layer, const std::vector<int>& experts, uint32_t seed) {
  v1::ComputeLayerRequest request = testing::RandomRequest(model, fingerprint, layer, 4, 1, seed);
  for (v1::Route& r : *request.mutable_routes()) r.set_expert(experts[r.token() % experts.size()]);
  return request;
}

// The tiny Qwen3-MoE fixture; gguf stays empty when the fixtures are absent.
struct TinyModel {
  std::string gguf;
  std::unique_ptr<arch::Model> model;
  std::string fingerprint;
  int n_experts = 0;  // all layers'
};
void OpenTinyModel(TinyModel* tiny) {
  const std::string fixtures = colibri::testing::FixturesDir();
  if (fixtures.empty()) return;
  tiny->gguf = fixtures + "/models/qwen3moe-tiny-f32.gguf";
  auto model = arch::Model::Open(tiny->gguf);
  ASSERT_TRUE(model.ok()) << model.status();
  tiny->model = std::move(*model);
  tiny->fingerprint = *gguf::ModelFingerprint(tiny->model->file());
  tiny->n_experts = tiny->model->config().n_layer * tiny->model->config().n_expert;
}

TEST(ExpertNodeBinaryTest, PinnedExpertsSurviveARestart) {
  TinyModel tiny;
  ASSERT_NO_FATAL_FAILURE(OpenTinyModel(&tiny));
  if (tiny.gguf.empty()) GTEST_SKIP() << "fixtures dir not found";
  const arch::Model* model = tiny.model.get();
  const std::string& gguf = tiny.gguf;
  const std::string& fp = tiny.fingerprint;
  const uint64_t size = ExpertBlob::SizeFor(LayoutOf(model->experts()[0][1]));
  const int n_experts = tiny.n_experts;
  TempDir dir;
  const std::string db = dir.path() + "/db";
  {
    NodeProcess node;
    ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", db, "--import-gguf", gguf}));
    auto stub = testing::ConnectTo(node.address());
    for (int i = 0; i < 200 && Stats(stub.get()).experts_stored() < uint64_t(n_experts); ++i) {
      ::usleep(50000);
    }
    ASSERT_EQ(Stats(stub.get()).experts_stored(), uint64_t(n_experts));
    for (int i = 0; i < 5; ++i) {  // experts 1 and 2 of layer 0: hot
      v1::ComputeLayerReply reply;
      auto context = testing::MakeContext();
      ASSERT_TRUE(
          stub->ComputeLayer(context.get(), RequestFor(*model, fp, 0, {1, 2}, i), &reply).ok());
    }
    v1::ComputeLayerReply reply;  // expert 3 of layer 1: used once
    auto context = testing::MakeContext();
    ASSERT_TRUE(stub->ComputeLayer(context.get(), RequestFor(*model, fp, 1, {3}, 9), &reply).ok());
    EXPECT_EQ(node.Stop(), 0);  // a clean shutdown saves the usage counts
  }
  NodeProcess node;
  ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", db, "--ram-budget", "16M",
                          "--pin-budget", std::to_string(2 * size), "--no-warm-ram"}));
  auto stub = testing::ConnectTo(node.address());
  const v1::NodeStatsReply stats = Stats(stub.get());
  EXPECT_EQ(stats.pinned_experts(), 2u);
  EXPECT_EQ(stats.pinned_bytes(), 2 * size);
  EXPECT_EQ(stats.experts_in_ram(), 2u);
  v1::ComputeLayerReply reply;
  auto context = testing::MakeContext();
  ASSERT_TRUE(stub->ComputeLayer(context.get(), RequestFor(*model, fp, 0, {1, 2}, 42), &reply)
                  .ok());
  EXPECT_EQ(reply.ram_hits(), 2);
  EXPECT_EQ(reply.ram_misses(), 0);
  EXPECT_EQ(node.Stop(), 0);
}

TEST(ExpertNodeBinaryTest, WarmsTheRamTierAfterAnImportUnlessTurnedOff) {
  TinyModel tiny;
  ASSERT_NO_FATAL_FAILURE(OpenTinyModel(&tiny));
  if (tiny.gguf.empty()) GTEST_SKIP() << "fixtures dir not found";
  const std::string& gguf = tiny.gguf;
  const uint64_t n_experts = tiny.n_experts;
  TempDir dir;
  const std::string db = dir.path() + "/db";
  {
    NodeProcess node;  // --warm-ram is the default
    ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", db, "--import-gguf", gguf}));
    auto stub = testing::ConnectTo(node.address());
    v1::NodeStatsReply stats;
    for (int i = 0; i < 400; ++i) {
      stats = Stats(stub.get());
      if (stats.experts_in_ram() == n_experts) break;
      ::usleep(25000);
    }
    EXPECT_EQ(stats.experts_stored(), n_experts);
    EXPECT_EQ(stats.experts_in_ram(), n_experts);
    EXPECT_EQ(stats.ram_warmed_experts(), n_experts);
    EXPECT_EQ(stats.ram_misses(), 0u);
    v1::ComputeLayerReply reply;
    auto context = testing::MakeContext();
    ASSERT_TRUE(
        stub->ComputeLayer(context.get(), RequestFor(*tiny.model, tiny.fingerprint, 1, {0, 3}, 7), &reply).ok());
    EXPECT_EQ(reply.ram_misses(), 0);
    EXPECT_EQ(reply.ram_hits(), 2);
    EXPECT_EQ(node.Stop(), 0);
  }
  NodeProcess node;
  ASSERT_TRUE(node.Start({"--listen", "127.0.0.1:0", "--data-dir", db, "--no-warm-ram"}));
  auto stub = testing::ConnectTo(node.address());
  ::usleep(300000);  // a warm-up would have run at once
  const v1::NodeStatsReply stats = Stats(stub.get());
  EXPECT_EQ(stats.experts_stored(), n_experts);
  EXPECT_EQ(stats.experts_in_ram(), 0u);
  EXPECT_EQ(stats.ram_warmed_experts(), 0u);
  EXPECT_EQ(node.Stop(), 0);
}

}  // namespace
}  // namespace colibri::expert_node
