// `colibri-coordinator run --nodes` against real colibri-expert-node processes
// on loopback: bitwise equality with the local run and with prefetch on and
// off, node crashes (fallback and failover), durable experts across restarts,
// and one round trip per involved node per layer.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "coordinator/cluster/node_client.h"
#include "expert_node/expert_store.h"
#include "gtest/gtest.h"
#include "tests/expert_node/node_test_client.h"
#include "tests/integration/node_process.h"
#include "tests/support/coordinator_run.h"
#include "tests/support/golden.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using testing::CommandResult;
using testing::NodeProcess;

using testing::Coordinator;
using testing::Counter;
using testing::ReadAll;

class DistributedRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  }

  void StartNodes(int n, const std::vector<std::string>& extra_args = {}) {
    std::string error;
    ASSERT_TRUE(testing::StartNodes(n, "node", &dirs_, &nodes_, &error, extra_args)) << error;
  }
  std::string Addresses() const { return testing::JoinAddresses(nodes_); }

  static testing::GoldenCase Case(const std::string& model) {
    testing::GoldenCase c;
    std::string error;
    EXPECT_TRUE(testing::LoadGoldenCase(model, "english", &c, &error)) << error;
    return c;
  }

  static std::vector<std::string> RunArgs(const testing::GoldenCase& c, int n_predict) {
    return testing::GreedyRunArgs(c, n_predict);
  }
  void RunThenDamageNode0(std::vector<std::string>* args, CommandResult* first);

  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<NodeProcess>> nodes_;
};

TEST_F(DistributedRunTest, LogitsAreBitwiseEqualToTheLocalRun) {
  StartNodes(3);
  const std::string dir = testing::MakeTempDir("logits");
  for (const std::string& model : testing::AllGoldenModels()) {
    const testing::GoldenCase c = Case(model);
    // The exact and fast paths, and the fast path with a half KV cache
    // (deepseek2's latent cache too) and a q8_0 one (not for deepseek2's
    // latent rows and olmoe's heads of 16: rows must be multiples of 32).
    for (const auto& [exact, kv] : {std::pair<bool, const char*>{true, "f32"},
                                    {false, "f32"},
                                    {false, "f16"},
                                    {false, "q8_0"}}) {
      if (std::string(kv) == "q8_0" &&
          (model.rfind("deepseek2", 0) == 0 || model.rfind("olmoe", 0) == 0)) {
        continue;
      }
      SCOPED_TRACE(model + (exact ? " exact" : " fast") + ", KV " + kv);
      const std::string local_out = dir + "/local.f32";
      const std::string remote_out = dir + "/remote.f32";
      auto args = [&, exact = exact, kv = kv](const std::string& logits_out) {
        std::vector<std::string> a = RunArgs(c, 4);
        a.insert(a.end(), {"--all-logits", "--logits-out", logits_out, "--kv-type", kv});
        if (exact) a.push_back("--exact");
        return a;
      };
      const std::vector<std::string> local = args(local_out);
      std::vector<std::string> remote = args(remote_out);
      remote.insert(remote.end(), {"--nodes", Addresses()});
      const CommandResult l = testing::RunCommand(local);
      ASSERT_EQ(l.exit_code, 0) << l.err;
      const CommandResult r = testing::RunCommand(remote);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(l.out, r.out);
      const std::string a = ReadAll(local_out);
      const std::string b = ReadAll(remote_out);
      EXPECT_FALSE(a.empty());
      EXPECT_TRUE(a == b) << "logits differ (" << a.size() << " vs " << b.size() << " bytes)";
      EXPECT_EQ(Counter(r.err, "experts:", "fallback_routes"), 0) << r.err;
      EXPECT_GT(Counter(r.err, "experts:", "round_trips"), 0) << r.err;
    }
  }
}

TEST_F(DistributedRunTest, PrefetchLeavesTheLogitsBitwiseTheSame) {
  StartNodes(3);
  const std::string dir = testing::MakeTempDir("prefetch");
  for (const std::string& model : testing::AllGoldenModels()) {
    const testing::GoldenCase c = Case(model);
    for (bool exact : {true, false}) {
      SCOPED_TRACE(model + (exact ? " exact" : " fast"));
      auto run = [&](const std::string& depth) {
        std::vector<std::string> a = RunArgs(c, 4);
        a.insert(a.end(), {"--all-logits", "--logits-out", dir + "/depth" + depth + ".f32",
                           "--nodes", Addresses(), "--prefetch-depth", depth});
        if (exact) a.push_back("--exact");
        return testing::RunCommand(a);
      };
      const CommandResult off = run("0");
      ASSERT_EQ(off.exit_code, 0) << off.err;
      const CommandResult on = run("2");
      ASSERT_EQ(on.exit_code, 0) << on.err;
      EXPECT_EQ(off.out, on.out);
      const std::string a = ReadAll(dir + "/depth0.f32");
      const std::string b = ReadAll(dir + "/depth2.f32");
      EXPECT_FALSE(a.empty());
      EXPECT_TRUE(a == b) << "logits differ (" << a.size() << " vs " << b.size() << " bytes)";
      EXPECT_EQ(Counter(off.err, "prefetch hints:", "riding"), -1) << off.err;
      EXPECT_EQ(off.err.find("prediction L+1:"), std::string::npos) << off.err;
      EXPECT_GT(Counter(on.err, "prefetch hints:", "riding") +
                    Counter(on.err, "prefetch hints:", "separate"),
                0)
          << on.err;
      EXPECT_GT(Counter(on.err, "prediction L+1:", "layers"), 0) << on.err;
      EXPECT_EQ(Counter(on.err, "experts:", "fallback_routes"), 0) << on.err;
    }
  }
}

// Nodes whose RAM tiers hold a few experts read most from disk, prefetch
// (every hint the rule lets through, as background reads yielding to demand
// reads, stale ones dropped) and evict: the tokens and logits are bitwise
// those of the local run, whose experts are all in RAM.
TEST_F(DistributedRunTest, PrefetchFromDiskLeavesTheLogitsThoseOfAllInRam) {
  StartNodes(3, {"--ram-budget", "400000", "--prefetch-cost", "0", "--background-reads", "1",
                 "--no-warm-ram"});
  const std::string dir = testing::MakeTempDir("prefetch-disk");
  const testing::GoldenCase c = Case("qwen3moe-tiny-f32");
  auto run = [&](const std::string& out, const std::vector<std::string>& extra) {
    std::vector<std::string> a = RunArgs(c, 12);
    a.insert(a.end(), {"--all-logits", "--logits-out", out});
    a.insert(a.end(), extra.begin(), extra.end());
    return testing::RunCommand(a);
  };
  const CommandResult local = run(dir + "/local.f32", {});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const CommandResult remote =
      run(dir + "/remote.f32", {"--nodes", Addresses(), "--prefetch-depth", "2"});
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  EXPECT_EQ(local.out, remote.out);
  const std::string a = ReadAll(dir + "/local.f32");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadAll(dir + "/remote.f32")) << "logits differ";
  EXPECT_EQ(Counter(remote.err, "experts:", "fallback_routes"), 0) << remote.err;
  // The nodes read from disk and prefetched in decode (summed over nodes).
  auto sum = [&](const std::string& key) {
    int64_t total = 0;
    std::istringstream lines(remote.err);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("node-tier", 0) != 0) continue;
      total += std::max<int64_t>(Counter(line, "node-tier", key), 0);
    }
    return total;
  };
  EXPECT_GT(sum("disk_bytes_read"), 0) << remote.err;
  EXPECT_GT(sum("prefetch_issued"), 0) << remote.err;
}

TEST_F(DistributedRunTest, OneRoundTripPerInvolvedNodePerLayer) {
  StartNodes(3);
  const testing::GoldenCase c = Case("qwen3moe-tiny-f32");
  const int n_predict = 16;
  std::vector<std::string> args = RunArgs(c, n_predict);
  args.insert(args.end(), {"--nodes", Addresses()});
  const CommandResult r = testing::RunCommand(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // n_predict - 1 tokens are fed back (the last is only sampled); 3 MoE layers.
  const int64_t layers = Counter(r.err, "experts decode:", "layers");
  const int64_t trips = Counter(r.err, "experts decode:", "round_trips");
  const int64_t involved = Counter(r.err, "experts decode:", "involved_nodes");
  EXPECT_EQ(layers, (n_predict - 1) * 3) << r.err;
  EXPECT_EQ(trips, involved) << r.err;
  // top-2 routing over 3 nodes: 1 or 2 nodes per layer and token.
  EXPECT_GE(trips, layers);
  EXPECT_LE(trips, 2 * layers);
  int64_t requests = 0;
  for (const auto& n : nodes_) requests += Counter(r.err, "node " + n->address(), "requests");
  EXPECT_EQ(requests, Counter(r.err, "experts:", "round_trips")) << r.err;
  // The nodes' own decode counters: every routed expert is looked up once in
  // a RAM tier (top-2 experts of a token are distinct).
  int64_t lookups = 0;
  for (const auto& n : nodes_) {
    const std::string tier = "node-tier " + n->address() + " decode:";
    lookups += Counter(r.err, tier, "ram_hits") + Counter(r.err, tier, "ram_misses");
  }
  EXPECT_EQ(lookups, 2 * layers) << r.err;
  std::cerr << "round trips per generated token: " << static_cast<double>(trips) / (n_predict - 1)
            << " (3 MoE layers)\n";
}

// The accepted-draft count of run's "speculation" line; -1 if absent.
int64_t AcceptedDrafts(const std::string& err) {
  std::smatch m;
  if (std::regex_search(err, m, std::regex("speculation \\(ngram\\):.* ([0-9]+) accepted"))) {
    return std::stoll(m[1]);
  }
  return -1;
}

// Speculative decoding on 3 nodes: the same tokens and logits rows as plain
// decoding here and there, greedy and seeded with penalties, on a prompt
// that repeats (drafts are accepted) and one that does not; and fewer round
// trips per generated token when drafts are accepted.
TEST_F(DistributedRunTest, SpeculationGivesTheSameTokensAndLogitsOnNodes) {
  StartNodes(3);
  const std::string dir = testing::MakeTempDir("speculation");
  const std::string verse =
      "And God said, Let there be light: and there was light. And God saw the light, that it "
      "was good: and God divided the light from the darkness. ";
  struct Prompt {
    std::string text;
    bool repeats;
  };
  const std::vector<Prompt> prompts = {{verse + verse + "And God said,", true},
                                       {"The king of Babylon", false}};
  int64_t accepted = 0;
  for (const Prompt& prompt : prompts) {
    for (bool seeded : {false, true}) {
      SCOPED_TRACE(prompt.text + (seeded ? " seeded" : " greedy"));
      auto run = [&](bool nodes, bool draft, const std::string& logits) {
        std::vector<std::string> a = {
            Coordinator(),       "run",
            "--model",           COLIBRI_SOURCE_DIR "/scripts/demo-model/colibri-demo-kjv-q8_0.gguf",
            "--prompt",          prompt.text,
            "--n-predict",       "40",
            "--threads",         "2",
            "--print-token-ids", "--logits-out",
            dir + "/" + logits};
        if (seeded) {
          a.insert(a.end(), {"--temp", "0.7", "--seed", "7", "--repeat-penalty", "1.1"});
        } else {
          a.insert(a.end(), {"--temp", "0"});
        }
        if (nodes) a.insert(a.end(), {"--nodes", Addresses()});
        if (draft) a.insert(a.end(), {"--draft", "ngram", "--draft-max", "6", "--draft-fixed"});
        return testing::RunCommand(a);
      };
      const CommandResult plain = run(false, false, "plain.f32");
      ASSERT_EQ(plain.exit_code, 0) << plain.err;
      const std::string reference = ReadAll(dir + "/plain.f32");
      EXPECT_FALSE(reference.empty());
      for (bool nodes : {false, true}) {
        SCOPED_TRACE(nodes ? "nodes" : "local");
        const CommandResult spec = run(nodes, true, "spec.f32");
        ASSERT_EQ(spec.exit_code, 0) << spec.err;
        EXPECT_EQ(plain.out, spec.out);
        EXPECT_TRUE(ReadAll(dir + "/spec.f32") == reference) << "logits differ";
        const int64_t n = AcceptedDrafts(spec.err);
        EXPECT_GE(n, 0) << spec.err;
        if (prompt.repeats) accepted += n;
        if (nodes) {
          EXPECT_EQ(Counter(spec.err, "experts:", "fallback_routes"), 0) << spec.err;
          const CommandResult off = run(true, false, "off.f32");
          ASSERT_EQ(off.exit_code, 0) << off.err;
          EXPECT_EQ(plain.out, off.out);
          const int64_t trips_on = Counter(spec.err, "experts decode:", "round_trips");
          const int64_t trips_off = Counter(off.err, "experts decode:", "round_trips");
          std::cerr << "round trips in decode: " << trips_off << " plain, " << trips_on
                    << " with drafts (" << n << " accepted)\n";
        }
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST_F(DistributedRunTest, ARestartedNodeKeepsItsExperts) {
  StartNodes(3);
  const testing::GoldenCase c = Case("mixtral-tiny-q4_k_m");
  std::vector<std::string> args = RunArgs(c, 2);
  args.insert(args.end(), {"--nodes", Addresses()});
  const CommandResult first = testing::RunCommand(args);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.err.find("ingest: 0 bytes sent"), std::string::npos) << first.err;
  for (auto& n : nodes_) {
    const int port = n->port();
    n->Stop(SIGKILL);
    std::string error;
    ASSERT_TRUE(n->Start(port, &error)) << error;
  }
  const CommandResult second = testing::RunCommand(args);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.err.find("ingest: 0 bytes sent"), std::string::npos) << second.err;
  EXPECT_EQ(first.out, second.out);
}

// A stored expert of node 0 is overwritten with garbage while it is down. The
// next run meets the checksum failure, computes those routes itself, and has
// the coordinator re-send the dropped expert: the run after it needs nothing
// from the fallback and sends nothing at start-up.
// Overwrites the value of the first expert stored in `dir` (a stopped
// node's store) with junk. One expert: corruption is found when a value is
// read, so one bad value is one failure, after which the node is healthy.
void CorruptOneExpert(const std::string& dir) {
  expert_node::ExpertStore::Options options;
  options.data_dir = dir;
  auto store = expert_node::ExpertStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  auto models = (*store)->List("");
  ASSERT_TRUE(models.ok()) << models.status();
  for (const auto& [fingerprint, layers] : *models) {
    for (const auto& [layer, experts] : layers) {
      if (experts.empty()) continue;
      ASSERT_TRUE((*store)
                      ->PutRawValueForTesting(
                          expert_node::ExpertId{fingerprint, layer, experts[0]},
                          std::string(300, 'z'))
                      .ok());
      return;
    }
  }
  FAIL() << "no expert stored in " << dir;
}

// *args: a greedy run of qwen3moe-tiny-f32 against the nodes. Runs it once
// (*first), then stops node 0, damages one of its experts and starts it again
// on its port.
void DistributedRunTest::RunThenDamageNode0(std::vector<std::string>* args, CommandResult* first) {
  *args = RunArgs(Case("qwen3moe-tiny-f32"), 64);
  args->insert(args->end(), {"--nodes", Addresses()});
  *first = testing::RunCommand(*args);
  ASSERT_EQ(first->exit_code, 0) << first->err;
  const int port = nodes_[0]->port();
  nodes_[0]->Stop(SIGTERM);
  ASSERT_NO_FATAL_FAILURE(CorruptOneExpert(dirs_[0]));
  std::string error;
  ASSERT_TRUE(nodes_[0]->Start(port, &error)) << error;
}

TEST_F(DistributedRunTest, CorruptedStoredExpertsAreHealedDuringTheRun) {
  // No warm-up: it would find the damage before the run (the next test).
  StartNodes(3, {"--no-warm-ram"});
  std::vector<std::string> args;
  CommandResult first;
  ASSERT_NO_FATAL_FAILURE(RunThenDamageNode0(&args, &first));

  const CommandResult healing = testing::RunCommand(args);
  ASSERT_EQ(healing.exit_code, 0) << healing.err;
  EXPECT_EQ(healing.out, first.out);
  EXPECT_NE(healing.err.find("repairing"), std::string::npos) << healing.err;
  const size_t at = healing.err.find("re-placement: ");
  ASSERT_NE(at, std::string::npos) << healing.err;
  EXPECT_GT(std::stoll(healing.err.substr(at + 14)), 0) << healing.err;

  const CommandResult healed = testing::RunCommand(args);
  ASSERT_EQ(healed.exit_code, 0) << healed.err;
  EXPECT_EQ(healed.out, first.out);
  EXPECT_NE(healed.err.find("ingest: 0 bytes sent"), std::string::npos) << healed.err;
  EXPECT_EQ(Counter(healed.err, "node " + nodes_[0]->address(), "failures"), 0) << healed.err;
  EXPECT_EQ(Counter(healed.err, "experts:", "fallback_routes"), 0) << healed.err;
}

// The RAM warm-up (on by default) reads a restarted node's experts at once,
// so a damaged one is found and dropped before any request: the next run
// re-sends it at its start and sees no failure.
TEST_F(DistributedRunTest, TheWarmUpFindsACorruptedExpertBeforeTheRun) {
  StartNodes(3);
  std::vector<std::string> args;
  CommandResult first;
  ASSERT_NO_FATAL_FAILURE(RunThenDamageNode0(&args, &first));
  auto stub = expert_node::testing::ConnectTo(nodes_[0]->address());
  v1::NodeStatsReply stats;
  const auto warmed = [&stats] {
    return stats.checksum_failures() > 0 && stats.experts_in_ram() == stats.experts_stored();
  };
  for (int i = 0; i < 800 && !warmed(); ++i) {
    auto context = expert_node::testing::MakeContext();
    ASSERT_TRUE(stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).ok());
    if (!warmed()) ::usleep(25000);
  }
  ASSERT_EQ(stats.checksum_failures(), 1u);
  EXPECT_EQ(stats.experts_in_ram(), stats.experts_stored());
  EXPECT_EQ(stats.ram_misses(), 0u);

  const CommandResult resent = testing::RunCommand(args);
  ASSERT_EQ(resent.exit_code, 0) << resent.err;
  EXPECT_EQ(resent.out, first.out);
  EXPECT_NE(resent.err.find("(1 experts)"), std::string::npos) << resent.err;
  EXPECT_EQ(resent.err.find("repairing"), std::string::npos) << resent.err;
  EXPECT_EQ(Counter(resent.err, "node " + nodes_[0]->address(), "failures"), 0) << resent.err;
  EXPECT_EQ(Counter(resent.err, "experts:", "fallback_routes"), 0) << resent.err;
}

// Runs a long generation against the nodes and SIGKILLs nodes_[victim] once it
// has served some of the decode; returns the coordinator's result.
CommandResult RunAndKill(const std::vector<std::string>& argv, NodeProcess* victim,
                         bool* killed_midway) {
  // Per-test paths: ctest runs the kill tests concurrently.
  const std::string dir = testing::MakeTempDir("kill");
  const std::string out_path = dir + "/out";
  const std::string err_path = dir + "/err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  coordinator::NodeClientOptions options;
  options.address = victim->address();
  options.control_deadline = absl::Milliseconds(500);
  auto client = coordinator::CreateGrpcNodeClient(options);
  *killed_midway = false;
  int status = 0;
  while (client.ok()) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;  // finished before the kill
    absl::StatusOr<v1::NodeStatsReply> stats = (*client)->NodeStats();
    if (stats.ok() && stats->compute_requests() >= 20) {
      victim->Stop(SIGKILL);
      *killed_midway = true;
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  return r;
}

// Returns the coordinator's stderr.
std::string KillMidGeneration(std::vector<std::unique_ptr<NodeProcess>>* nodes,
                              const std::string& addresses, int replicas,
                              const std::string& n_predict = "300",
                              const std::vector<std::string>& extra = {},
                              const std::string& model = "qwen3moe-tiny-f32") {
  const testing::GoldenCase c = [&] {
    testing::GoldenCase g;
    std::string error;
    EXPECT_TRUE(testing::LoadGoldenCase(model, "english", &g, &error)) << error;
    return g;
  }();
  std::vector<std::string> local = testing::GreedyRunArgs(c, std::stoi(n_predict));
  const CommandResult expected = testing::RunCommand(local);
  EXPECT_EQ(expected.exit_code, 0) << expected.err;
  std::vector<std::string> remote = local;
  remote.insert(remote.end(), {"--nodes", addresses, "--replicas", std::to_string(replicas)});
  remote.insert(remote.end(), extra.begin(), extra.end());
  NodeProcess* victim = (*nodes)[1].get();
  const std::string victim_address = victim->address();
  bool killed_midway = false;
  const CommandResult r = RunAndKill(remote, victim, &killed_midway);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(killed_midway) << "the generation ended before the node was killed\n" << r.err;
  EXPECT_EQ(r.out, expected.out);
  EXPECT_GE(Counter(r.err, "node " + victim_address, "failures"), 1) << r.err;
  if (replicas == 1) {
    EXPECT_GT(Counter(r.err, "experts:", "fallback_routes"), 0) << r.err;
  } else {
    EXPECT_GE(Counter(r.err, "node " + victim_address, "failovers"), 1) << r.err;
    EXPECT_EQ(Counter(r.err, "experts:", "fallback_routes"), 0) << r.err;
  }
  return r.err;
}

TEST_F(DistributedRunTest, KilledNodeWithoutReplicaFallsBackLocally) {
  StartNodes(3);
  KillMidGeneration(&nodes_, Addresses(), 1);
}

// With a short --replace-after the dead node's experts move to the others
// during the generation; the tokens stay the same.
TEST_F(DistributedRunTest, ExpertsOfANodeAwayTooLongAreReplaced) {
  StartNodes(3);
  const std::string victim = nodes_[1]->address();
  const std::string err =
      KillMidGeneration(&nodes_, Addresses(), 1, "480",
                        {"--replace-after", "0.05", "--probe-interval", "0.01"});
  EXPECT_NE(err.find("new placement in force (excluded: " + victim + ")"), std::string::npos)
      << err;
  const size_t at = err.find("re-placement: ");
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_GT(std::stoll(err.substr(at + 14)), 0) << err;
}

// With `primary` the victim computes its share until it is killed (the
// default, `fastest`, may route around it before then: partial_cluster_test
// stops a node under that choice).
TEST_F(DistributedRunTest, KilledNodeFailsOverToItsReplica) {
  StartNodes(3);
  KillMidGeneration(&nodes_, Addresses(), 2, "300", {"--replica-choice", "primary"});
}

// The same with MLA, a leading dense layer and group-limited sigmoid routing.
TEST_F(DistributedRunTest, KilledNodeFallsBackLocallyOnDeepseek2) {
  StartNodes(3);
  KillMidGeneration(&nodes_, Addresses(), 1, "300", {}, "deepseek2-tiny-q8_0");
}

// The same with partial rotary, q/k/v biases and sigmoid routing with a
// shared expert.
TEST_F(DistributedRunTest, KilledNodeFallsBackLocallyOnGlm4moe) {
  StartNodes(3);
  KillMidGeneration(&nodes_, Addresses(), 1, "300", {}, "glm4moe-tiny-q4_k_m");
}

// The same with per-expert biases, the clamped SwiGLU (version 2 expert
// records), attention sinks and sliding-window layers.
TEST_F(DistributedRunTest, KilledNodeFallsBackLocallyOnGptOss) {
  const std::vector<std::string>& models = testing::FamilyGoldenModels();
  if (std::find(models.begin(), models.end(), "gpt-oss-tiny-mxfp4") == models.end()) {
    GTEST_SKIP() << "gpt-oss-tiny-mxfp4 needs MXFP4 support";
  }
  StartNodes(3);
  KillMidGeneration(&nodes_, Addresses(), 1, "300", {}, "gpt-oss-tiny-mxfp4");
}

TEST_F(DistributedRunTest, PlanListsEveryExpertWithoutMovingAny) {
  StartNodes(3);
  const testing::GoldenCase c = Case("olmoe-tiny-f16");
  const CommandResult r = testing::RunCommand(
      {Coordinator(), "plan", "--model", c.model_path, "--nodes", Addresses(), "--replicas", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // A header, each node with its memory line, and 2 layers x 16 experts, each
  // listed with its 2 nodes.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1 + 3 * 2 + 32) << r.out;
  EXPECT_NE(r.out.find("systemd MemoryMax="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("id node-0"), std::string::npos) << r.out;
  const CommandResult offline =
      testing::RunCommand({Coordinator(), "plan", "--model", c.model_path, "--nodes", "a:1,b:2",
                           "--assume-equal", "--summary"});
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  EXPECT_NE(offline.out.find("node a:1"), std::string::npos) << offline.out;
}

TEST_F(DistributedRunTest, NodesDnsFindsTheNodesOfAName) {
  StartNodes(1);
  const testing::GoldenCase c = Case("olmoe-tiny-f16");
  const std::string port = std::to_string(nodes_[0]->port());
  const CommandResult r = testing::RunCommand({Coordinator(), "plan", "--model", c.model_path,
                                               "--nodes-dns", "127.0.0.1:" + port, "--summary"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("node 127.0.0.1:" + port), std::string::npos) << r.out;
  const CommandResult both =
      testing::RunCommand({Coordinator(), "plan", "--model", c.model_path, "--nodes-dns",
                           "127.0.0.1:" + port, "--nodes", "127.0.0.1:" + port});
  EXPECT_NE(both.exit_code, 0);
}

}  // namespace
}  // namespace colibri
