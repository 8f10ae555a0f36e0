// Faults of a real colibri-expert-node process:
// kill -9 at seeded random points during ingest, import, compute and
// shutdown, each followed by the invariant: the store opens, every stored
// expert verifies, and a run over the node gives the local run's tokens.
// And a damaged write-ahead log of a store killed before its flush.
//
// COLIBRI_FAULT_SEED and COLIBRI_FAULT_ROUNDS (rounds per phase) override the
// defaults for longer runs; a failure prints the seed.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "expert_node/expert_store.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/gguf/gguf_fingerprint.h"
#include "tests/expert_node/node_test_client.h"
#include "tests/integration/node_process.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using testing::CommandResult;
using testing::NodeProcess;

constexpr char kModel[] = "qwen3moe-tiny-f32.gguf";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

class NodeFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    model_path_ = testing::FixturesDir() + "/models/" + kModel;
    absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(model_path_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    fingerprint_ = *gguf::ModelFingerprint(model_->file());
    seed_ = static_cast<uint32_t>(EnvInt("COLIBRI_FAULT_SEED", 20261203));
    rounds_ = std::max(1, EnvInt("COLIBRI_FAULT_ROUNDS", 2));
    rng_.seed(seed_);
    const CommandResult local = testing::RunCommand(RunArgs());
    ASSERT_EQ(local.exit_code, 0) << local.err;
    local_tokens_ = local.out;
    ASSERT_FALSE(local_tokens_.empty());
  }

  std::vector<std::string> RunArgs() const {
    return {
        Coordinator(),       "run",         "--model", model_path_, "--prompt-tokens", "1,2,3,4,5",
        "--n-predict",       "8",           "--temp",  "0",         "--threads",       "1",
        "--print-token-ids", "--ignore-eos"};
  }

  int RandomMillis(int max) { return std::uniform_int_distribution<int>(0, max)(rng_); }

  // The invariant after a kill: the store (the node is down) opens and every
  // stored expert verifies; then the node restarts on it and a run over it
  // gives the local run's tokens (the coordinator re-sends what is missing).
  void CheckInvariant(const std::string& what, const std::string& data_dir) {
    SCOPED_TRACE(absl::StrCat(what, " (seed ", seed_, ")"));
    {
      expert_node::ExpertStore::Options options;
      options.data_dir = data_dir;
      absl::StatusOr<std::unique_ptr<expert_node::ExpertStore>> store =
          expert_node::ExpertStore::Open(options);
      ASSERT_TRUE(store.ok()) << store.status();
      absl::StatusOr<int64_t> dropped = (*store)->VerifyAll();
      ASSERT_TRUE(dropped.ok()) << dropped.status();
      EXPECT_EQ(*dropped, 0) << "experts that did not verify after the kill";
      std::printf("%s: %lld experts stored and verified\n", what.c_str(),
                  static_cast<long long>((*store)->experts_stored()));
    }
    NodeProcess node(data_dir, "fault-node");
    std::string error;
    ASSERT_TRUE(node.Start(0, &error)) << error;
    std::vector<std::string> args = RunArgs();
    args.insert(args.end(), {"--nodes", node.address()});
    const CommandResult run = testing::RunCommand(args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.out, local_tokens_) << run.err;
    node.Stop(SIGTERM);
  }

  // Starts a node on `data_dir`, runs `work` against it in a thread, kills
  // the node with SIGKILL after a random delay of up to max_delay_ms, then
  // checks the invariant.
  void KillDuring(const std::string& what, const std::string& data_dir, int max_delay_ms,
                  const std::function<void(const std::string& address)>& work) {
    NodeProcess node(data_dir, "fault-node");
    std::string error;
    ASSERT_TRUE(node.Start(0, &error)) << error;
    std::thread worker([&] { work(node.address()); });
    const int delay = RandomMillis(max_delay_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    node.Stop(SIGKILL);
    worker.join();
    CheckInvariant(absl::StrCat(what, ", killed after ", delay, " ms"), data_dir);
  }

  // Like KillDuring, but the kill comes once the node has stored a random
  // number (below the model's total) of experts, plus up to 3 ms: a point
  // inside the operation whatever its speed.
  void KillWhileStoring(const std::string& what, const std::string& data_dir,
                        const std::function<void(const std::string& address)>& work) {
    NodeProcess node(data_dir, "fault-node");
    std::string error;
    ASSERT_TRUE(node.Start(0, &error)) << error;
    const arch::ModelConfig& config = model_->config();
    const int total = config.n_layer * config.n_expert;
    const int target = std::uniform_int_distribution<int>(0, total - 1)(rng_);
    std::thread worker([&] { work(node.address()); });
    auto stub = expert_node::testing::ConnectTo(node.address());
    uint64_t stored = 0;
    for (int i = 0; i < 10000 && stored < static_cast<uint64_t>(target); ++i) {
      v1::NodeStatsReply stats;
      auto context = expert_node::testing::MakeContext();
      if (stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).ok()) {
        stored = stats.experts_stored();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    const int delay = RandomMillis(3);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    node.Stop(SIGKILL);
    worker.join();
    CheckInvariant(absl::StrCat(what, ", killed ", delay, " ms after ", stored, " of ", total,
                                " experts were stored"),
                   data_dir);
  }

  // A store holding every expert of the model (a node imports it).
  std::string PopulatedDir(const std::string& name) {
    const std::string dir = testing::MakeTempDir(name);
    NodeProcess node(dir, "fault-node", {"--import-gguf", model_path_});
    std::string error;
    EXPECT_TRUE(node.Start(0, &error)) << error;
    node.Stop(SIGTERM);
    return dir;
  }

  std::string model_path_;
  std::unique_ptr<arch::Model> model_;
  std::string fingerprint_;
  uint32_t seed_ = 0;
  int rounds_ = 2;
  std::mt19937 rng_;
  std::string local_tokens_;
};

TEST_F(NodeFaultTest, KillDuringIngestLeavesAConsistentStore) {
  for (int round = 0; round < rounds_; ++round) {
    const std::string dir = testing::MakeTempDir("fault-ingest");
    KillWhileStoring(absl::StrCat("ingest round ", round), dir, [&](const std::string& address) {
      auto stub = expert_node::testing::ConnectTo(address);
      v1::IngestReply reply;
      // Small chunks: many messages, so that the kill lands inside an expert.
      (void)expert_node::testing::IngestExperts(stub.get(), *model_, fingerprint_, {}, &reply, "",
                                                997);
    });
  }
}

TEST_F(NodeFaultTest, KillDuringImportLeavesAConsistentStore) {
  for (int round = 0; round < rounds_; ++round) {
    const std::string dir = testing::MakeTempDir("fault-import");
    KillWhileStoring(absl::StrCat("import round ", round), dir, [&](const std::string& address) {
      auto stub = expert_node::testing::ConnectTo(address);
      v1::ImportRequest request;
      request.set_gguf_path(model_path_);
      v1::ImportReply reply;
      auto context = expert_node::testing::MakeContext();
      (void)stub->Import(context.get(), request, &reply);
    });
  }
}

// Compute requests in a loop until the node dies.
void ComputeUntilFailure(const arch::Model& model, const std::string& fingerprint,
                         const std::string& address) {
  auto stub = expert_node::testing::ConnectTo(address);
  for (uint32_t i = 0; i < 10000; ++i) {
    const v1::ComputeLayerRequest request = expert_node::testing::RandomRequest(
        model, fingerprint, static_cast<int>(i % model.config().n_layer), 8,
        model.config().n_expert_used, i);
    v1::ComputeLayerReply reply;
    auto context = expert_node::testing::MakeContext();
    if (!stub->ComputeLayer(context.get(), request, &reply).ok()) return;
  }
}

TEST_F(NodeFaultTest, KillDuringComputeLeavesAConsistentStore) {
  const std::string dir = PopulatedDir("fault-compute");
  for (int round = 0; round < rounds_; ++round) {
    KillDuring(absl::StrCat("compute round ", round), dir, 300, [&](const std::string& address) {
      ComputeUntilFailure(*model_, fingerprint_, address);
    });
  }
}

// SIGTERM starts an orderly shutdown under load; SIGKILL cuts it short.
TEST_F(NodeFaultTest, KillDuringShutdownLeavesAConsistentStore) {
  const std::string dir = PopulatedDir("fault-shutdown");
  for (int round = 0; round < rounds_; ++round) {
    NodeProcess node(dir, "fault-node");
    std::string error;
    ASSERT_TRUE(node.Start(0, &error)) << error;
    const int pid = node.pid();
    std::thread worker([&] { ComputeUntilFailure(*model_, fingerprint_, node.address()); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(pid, SIGTERM);
    const int delay = RandomMillis(40);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    node.Stop(SIGKILL);
    worker.join();
    CheckInvariant(absl::StrCat("shutdown round ", round, ", killed ", delay, " ms after SIGTERM"),
                   dir);
  }
}

// The WAL files of a RocksDB folder, largest first.
std::vector<std::string> WalFiles(const std::string& dir) {
  std::vector<std::string> wals;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".log" && entry.file_size() > 0) {
      wals.push_back(entry.path().string());
    }
  }
  std::sort(wals.begin(), wals.end(), [](const std::string& a, const std::string& b) {
    return std::filesystem::file_size(a) > std::filesystem::file_size(b);
  });
  return wals;
}

// A store killed before its memtable was flushed holds its newest experts
// only in the write-ahead log. One damaged byte in the middle of that log:
// the node opens, says in its log what the recovery lost, every expert it
// still holds verifies, and what was durable before (the experts of an
// earlier, flushed session) is all there; a run over it re-sends the rest.
TEST_F(NodeFaultTest, ADamagedWalLosesOnlyWhatItHeld) {
  const std::string dir = testing::MakeTempDir("fault-wal");
  const arch::ModelConfig& config = model_->config();
  const int total = config.n_layer * config.n_expert;
  // The durable part: the experts of layer 0, flushed at an orderly stop.
  {
    NodeProcess node(dir, "fault-node");
    std::string error;
    ASSERT_TRUE(node.Start(0, &error)) << error;
    auto stub = expert_node::testing::ConnectTo(node.address());
    std::vector<std::pair<int, int>> layer0;
    for (int e = 0; e < config.n_expert; ++e) layer0.push_back({0, e});
    v1::IngestReply reply;
    ASSERT_TRUE(
        expert_node::testing::IngestExperts(stub.get(), *model_, fingerprint_, layer0, &reply)
            .ok());
    node.Stop(SIGTERM);  // an orderly stop flushes
  }
  // The rest goes to the WAL only: the node is killed before any flush.
  {
    NodeProcess node(dir, "fault-node");
    std::string error;
    ASSERT_TRUE(node.Start(0, &error)) << error;
    auto stub = expert_node::testing::ConnectTo(node.address());
    std::vector<std::pair<int, int>> rest;
    for (int l = 1; l < config.n_layer; ++l) {
      for (int e = 0; e < config.n_expert; ++e) rest.push_back({l, e});
    }
    v1::IngestReply reply;
    ASSERT_TRUE(
        expert_node::testing::IngestExperts(stub.get(), *model_, fingerprint_, rest, &reply).ok());
    node.Stop(SIGKILL);
  }
  const std::vector<std::string> wals = WalFiles(dir);
  ASSERT_FALSE(wals.empty()) << "no write-ahead log in " << dir;
  {
    std::fstream wal(wals[0], std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(std::filesystem::file_size(wals[0]));
    wal.seekg(size / 2);
    char c = 0;
    wal.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    wal.seekp(size / 2);
    wal.write(&c, 1);
  }
  // The store opens (as the node opens it), saying on the node's log what
  // the recovery dropped.
  expert_node::ExpertStore::Options options;
  options.data_dir = dir;
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<expert_node::ExpertStore>> store =
      expert_node::ExpertStore::Open(options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_NE(log.find("damaged write-ahead log"), std::string::npos) << log;
  EXPECT_NE(log.find("dropping"), std::string::npos) << log;
  EXPECT_NE(log.find("re-sends"), std::string::npos) << log;
  std::printf("%s", log.c_str());
  absl::StatusOr<int64_t> dropped = (*store)->VerifyAll();
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 0);
  std::printf("after the damaged WAL: %lld of %d experts\n",
              static_cast<long long>((*store)->experts_stored()), total);
  for (int e = 0; e < config.n_expert; ++e) {
    absl::StatusOr<bool> present = (*store)->Contains(expert_node::ExpertId{fingerprint_, 0, e});
    ASSERT_TRUE(present.ok()) << present.status();
    EXPECT_TRUE(*present) << "durable expert L0E" << e << " was lost";
  }
  EXPECT_LT((*store)->experts_stored(), static_cast<uint64_t>(total));
  store->reset();
  CheckInvariant("after the damaged WAL", dir);
}

}  // namespace
}  // namespace colibri
