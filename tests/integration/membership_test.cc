// A running `serve` takes a node in and retires another (--nodes-file
// reloaded on SIGHUP) while generations keep running: every generation's
// tokens equal the local run's, and each node ends up holding exactly its
// rendezvous share (computed here from RendezvousScore over the node ids).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "placement/placement.h"
#include "tests/integration/node_process.h"
#include "tests/support/golden.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using client::Client;
using client::ClientOptions;
using client::GenerateResult;
using testing::NodeProcess;
using testing::ServerProcess;

constexpr int kTokens = 8;
const char kModel[] = "qwen3moe-tiny-f32";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string ModelPath() { return testing::FixturesDir() + "/models/" + kModel + ".gguf"; }

// Experts each node id should hold (one replica, equal weights): for every
// (layer, expert), the id with the highest rendezvous score.
std::map<std::string, int64_t> ExpectedShares(const std::vector<int>& experts_per_layer,
                                              const std::vector<std::string>& ids) {
  std::map<std::string, int64_t> out;
  for (const std::string& id : ids) out[id] = 0;
  for (int l = 0; l < static_cast<int>(experts_per_layer.size()); ++l) {
    for (int e = 0; e < experts_per_layer[l]; ++e) {
      std::string best;
      double best_score = -1;
      for (const std::string& id : ids) {
        placement::PlacementNode node;
        node.id = id;
        const double score = placement::RendezvousScore(node, l, e);
        if (score > best_score) {
          best_score = score;
          best = id;
        }
      }
      ++out[best];
    }
  }
  return out;
}

// Node id -> experts assigned, for the nodes in force that hold experts.
std::map<std::string, int64_t> Shares(const v1::ClusterStatusReply& status) {
  std::map<std::string, int64_t> out;
  for (const v1::NodeStatus& n : status.nodes()) {
    if (!n.excluded()) out[n.node_id()] = n.experts_assigned();
  }
  return out;
}

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  }
};

TEST_F(MembershipTest, NodesJoinAndLeaveWhileGenerationsRun) {
  testing::GoldenCase golden;
  std::string error;
  ASSERT_TRUE(testing::LoadGoldenCase(kModel, "english", &golden, &error)) << error;
  const testing::CommandResult local = testing::RunCommand(
      {Coordinator(), "run", "--model", ModelPath(), "--prompt-tokens",
       testing::JoinIds(std::vector<int>(golden.prompt_tokens.begin(), golden.prompt_tokens.end())),
       "--n-predict", std::to_string(kTokens), "--temp", "0", "--ignore-eos", "--print-token-ids",
       "--threads", "1"});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  std::vector<int32_t> expected;
  for (absl::string_view piece :
       absl::StrSplit(local.out, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    expected.push_back(std::stoi(std::string(piece)));
  }
  ASSERT_EQ(expected.size(), static_cast<size_t>(kTokens));
  absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(ModelPath());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int> experts_per_layer;
  for (const auto& layer : (*model)->experts()) experts_per_layer.push_back(layer.size());

  std::vector<std::unique_ptr<NodeProcess>> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(std::make_unique<NodeProcess>(testing::MakeTempDir("membership"),
                                                  "node-" + std::to_string(i)));
    ASSERT_TRUE(nodes.back()->Start(0, &error)) << error;
  }
  const std::string nodes_file = testing::MakeTempDir("membership-list") + "/nodes";
  auto write_nodes = [&](const std::vector<int>& which) {
    std::ofstream out(nodes_file);
    out << "# nodes of the test cluster\n";
    for (int i : which) out << nodes[i]->address() << "\n";
  };
  write_nodes({0, 1});

  ServerProcess serve;
  ASSERT_TRUE(
      serve.Start({Coordinator(), "serve", "--model", ModelPath(), "--listen", "127.0.0.1:0",
                   "--threads", "1", "--nodes-file", nodes_file, "--probe-interval", "0.1"},
                  &error))
      << error;
  ClientOptions options;
  options.address = serve.address();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto status = [&] {
    absl::StatusOr<v1::ClusterStatusReply> s = (*client)->ClusterStatus();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : v1::ClusterStatusReply();
  };
  EXPECT_EQ(Shares(status()), ExpectedShares(experts_per_layer, {"node-0", "node-1"}));

  // Generations back to back, from before the first change to after the last.
  v1::GenerateRequest request;
  for (int32_t id : golden.prompt_tokens) request.mutable_tokens()->add_ids(id);
  request.set_max_tokens(kTokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<absl::StatusOr<GenerateResult>> results;
  std::thread generating([&] {
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(options);
    ASSERT_TRUE(c.ok()) << c.status();
    while (!stop.load()) {
      absl::StatusOr<GenerateResult> r = (*c)->Generate(request);
      absl::MutexLock lock(&mu);
      results.push_back(std::move(r));
    }
  });
  auto generated = [&] {
    absl::MutexLock lock(&mu);
    return results.size();
  };
  auto wait_for = [&](auto done) {
    for (int i = 0; i < 600; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return done();
  };
  ASSERT_TRUE(wait_for([&] { return generated() >= 1; }));

  // node-2 joins.
  write_nodes({0, 1, 2});
  ASSERT_EQ(kill(serve.pid(), SIGHUP), 0);
  const std::map<std::string, int64_t> three =
      ExpectedShares(experts_per_layer, {"node-0", "node-1", "node-2"});
  ASSERT_TRUE(wait_for([&] { return Shares(status()) == three; })) << status().DebugString();
  const size_t after_join = generated();

  // node-1 leaves.
  write_nodes({0, 2});
  ASSERT_EQ(kill(serve.pid(), SIGHUP), 0);
  const std::map<std::string, int64_t> two =
      ExpectedShares(experts_per_layer, {"node-0", "node-2"});
  ASSERT_TRUE(wait_for([&] {
    const v1::ClusterStatusReply s = status();
    return s.nodes_size() == 2 && Shares(s) == two;
  })) << status().DebugString();
  const size_t after_leave = generated();
  ASSERT_TRUE(wait_for([&] { return generated() >= after_leave + 2; }));
  stop = true;
  generating.join();

  const v1::ClusterStatusReply final_status = status();
  EXPECT_EQ(final_status.replacements(), 2);
  EXPECT_EQ(final_status.fallback_routes(), 0);
  for (const v1::NodeStatus& n : final_status.nodes()) {
    EXPECT_TRUE(n.healthy()) << n.DebugString();
    EXPECT_GE(n.experts_stored(), n.experts_assigned()) << n.DebugString();
  }
  absl::MutexLock lock(&mu);
  EXPECT_GE(results.size(), after_join);
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << "generation " << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->tokens, expected) << "generation " << i;
  }
  EXPECT_EQ(serve.Stop(SIGTERM), 0);
}

// The Kubernetes init step (k8s/base/nodes-statefulset.yaml): each node
// imports its own share before the coordinator starts, which then finds every
// expert in place and neither sends nor has anything imported.
TEST_F(MembershipTest, NodesThatImportedTheirShareGetNothingAtStart) {
  const std::string node_bin = testing::BinaryPath("expert_node/colibri-expert-node");
  std::vector<std::string> dirs;
  for (int i = 0; i < 2; ++i) {
    dirs.push_back(testing::MakeTempDir("share"));
    const testing::CommandResult r = testing::RunCommand(
        {node_bin, "--listen", "127.0.0.1:0", "--data-dir", dirs[i], "--node-id",
         "node-" + std::to_string(i), "--threads", "1", "--import-gguf", ModelPath(),
         "--import-share-of", "node-0,node-1", "--exit-after-import"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // A pod scaled in before the id list was updated imports nothing and exits 0.
  const testing::CommandResult outside = testing::RunCommand(
      {node_bin, "--listen", "127.0.0.1:0", "--data-dir", testing::MakeTempDir("share"),
       "--node-id", "node-9", "--threads", "1", "--import-gguf", ModelPath(), "--import-share-of",
       "node-0,node-1", "--exit-after-import"});
  EXPECT_EQ(outside.exit_code, 0) << outside.err;
  EXPECT_NE(outside.err.find("importing nothing"), std::string::npos) << outside.err;
  std::vector<std::unique_ptr<NodeProcess>> nodes;
  std::string error;
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(std::make_unique<NodeProcess>(dirs[i], "node-" + std::to_string(i)));
    ASSERT_TRUE(nodes.back()->Start(0, &error)) << error;
  }
  const std::vector<std::string> run = {Coordinator(),
                                        "run",
                                        "--model",
                                        ModelPath(),
                                        "--prompt-tokens",
                                        "1,2,3",
                                        "--n-predict",
                                        "4",
                                        "--temp",
                                        "0",
                                        "--print-token-ids",
                                        "--threads",
                                        "1"};
  const testing::CommandResult local = testing::RunCommand(run);
  ASSERT_EQ(local.exit_code, 0) << local.err;
  std::vector<std::string> remote = run;
  remote.insert(remote.end(), {"--nodes", nodes[0]->address() + "," + nodes[1]->address(),
                               "--node-gguf", ModelPath()});
  const testing::CommandResult r = testing::RunCommand(remote);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, local.out);
  EXPECT_NE(r.err.find("ingest: 0 bytes sent (0 experts), 0 experts imported"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace colibri
