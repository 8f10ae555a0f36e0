// Numeric command-line values of the three binaries: out-of-range, negative
// and wrapped values are usage errors (exit 2, the flag named on stderr), never
// an abort or a silently different value; the context is capped at the
// model's context length with a message. The same for the environment's knobs
// (common/process_knobs.h), read in each main. Token files the binaries must
// refuse.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/node_process.h"
#include "tests/support/auth_token.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using testing::CommandResult;

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string Node() { return testing::BinaryPath("expert_node/colibri-expert-node"); }
std::string Client() { return testing::BinaryPath("client/colibri-client"); }
std::string Model() { return testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf"; }

struct Case {
  std::vector<std::string> argv;
  std::string flag;  // named in the message
};

void ExpectUsageErrors(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    std::string line;
    for (const std::string& a : c.argv) line += a + " ";
    SCOPED_TRACE(line);
    const CommandResult r = testing::RunCommand(c.argv);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << r.err;
  }
}

TEST(CommandLineTest, CoordinatorRejectsOutOfRangeNumbers) {
  const std::string m = Model();
  const std::vector<std::string> run = {Coordinator(), "run", "--model", m, "--prompt", "hi"};
  auto with = [&run](std::vector<std::string> extra) {
    std::vector<std::string> argv = run;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  ExpectUsageErrors({
      {with({"--ctx-size", "100000000"}), "--ctx-size"},
      {with({"--ctx-size", "-5"}), "--ctx-size"},
      {with({"--threads", "100000"}), "--threads"},
      {with({"--threads", "-1"}), "--threads"},
      {with({"--n-predict", "-1"}), "--n-predict"},
      {with({"--batch-size", "0"}), "--batch-size"},
      {with({"--top-p", "1.5"}), "--top-p"},
      {with({"--top-k", "-2"}), "--top-k"},
      {with({"--temp", "-1"}), "--temp"},
      {with({"--seed", "-1"}), "--seed"},
      {with({"--repeat-last-n", "-7"}), "--repeat-last-n"},
      {with({"--prefetch-count", "-1"}), "--prefetch-count"},
      {{Coordinator(), "run", "--model", m, "--prompt-tokens", "1,,2"}, "--prompt-tokens"},
      {{Coordinator(), "run", "--model", m, "--prompt-tokens", "1,2,"}, "--prompt-tokens"},
      {{Coordinator(), "run", "--model", m, "--prompt-tokens", ",1"}, "--prompt-tokens"},
      {{Coordinator(), "run", "--model", m, "--prompt-tokens", "1,x"}, "--prompt-tokens"},
      {{Coordinator(), "detokenize", "--model", m, "--ids", "1,,2"}, "--ids"},
      {with({"--nodes", "127.0.0.1:99999"}), "--nodes"},
      {with({"--nodes", "127.0.0.1:7000,127.0.0.1:-1"}), "--nodes"},
      {with({"--nodes", "127.0.0.1:7000", "--replicas", "0"}), "--replicas"},
      {with({"--nodes", "127.0.0.1:7000", "--replica-choice", "random"}), "--replica-choice"},
      {with({"--nodes", "127.0.0.1:7000", "--probe-interval", "-1"}), "--probe-interval"},
      {with({"--nodes", "127.0.0.1:7000", "--replace-after", "-3"}), "--replace-after"},
      {{Coordinator(), "perplexity", "--model", m, "--text-file", m, "--ctx", "-1"}, "--ctx"},
      {{Coordinator(), "perplexity", "--model", m, "--text-file", m, "--threads", "100000"},
       "--threads"},
      {{Coordinator(), "perplexity", "--model", m, "--text-file", m, "--max-windows", "-2"},
       "--max-windows"},
      {{Coordinator(), "serve", "--model", m, "--http-listen", "127.0.0.1:99999"},
       "--http-listen"},
      {{Coordinator(), "serve", "--model", m, "--listen", "127.0.0.1:99999"}, "--listen"},
      {{Coordinator(), "serve", "--model", m, "--listen", "127.0.0.1:"}, "--listen"},
      {{Coordinator(), "serve", "--model", m, "--sessions", "0"}, "--sessions"},
      {{Coordinator(), "serve", "--model", m, "--pipeline-halves", "maybe"}, "--pipeline-halves"},
      {{Coordinator(), "serve", "--model", m, "--threads", "100000"}, "--threads"},
      {{Coordinator(), "serve", "--model", m, "--ctx-size", "-1"}, "--ctx-size"},
      {with({"--draft-max", "0"}), "--draft-max"},
      {with({"--draft-max", "65"}), "--draft-max"},
      {with({"--draft", "model"}), "--draft"},
      {{Coordinator(), "run", "--model", m, "--draft-max", "-1"}, "--draft-max"},
      {with({"--no-such-flag"}), "--no-such-flag"},
  });
}

TEST(CommandLineTest, ExpertNodeRejectsOutOfRangeNumbers) {
  const std::string dir = testing::MakeTempDir("cli-node");
  const std::vector<std::string> node = {Node(), "--data-dir", dir};
  auto with = [&node](std::vector<std::string> extra) {
    std::vector<std::string> argv = node;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  ExpectUsageErrors({
      {with({"--listen", "127.0.0.1:99999"}), "--listen"},
      {with({"--listen", "127.0.0.1:65536"}), "--listen"},
      {with({"--threads", "100000"}), "--threads"},
      {with({"--threads", "-2"}), "--threads"},
      {with({"--io-threads", "0"}), "--io-threads"},
      {with({"--prefetch-queue", "-1"}), "--prefetch-queue"},
      {with({"--prefetch-protect-ms", "-5"}), "--prefetch-protect-ms"},
      {with({"--ingest-idle-timeout", "0"}), "--ingest-idle-timeout"},
      {with({"--ingest-idle-timeout", "-1"}), "--ingest-idle-timeout"},
      {with({"--max-batch-tokens", "0"}), "--max-batch-tokens"},
      {with({"--max-batch-tokens", "100000"}), "--max-batch-tokens"},
  });
}

TEST(CommandLineTest, ClientRejectsOutOfRangeNumbers) {
  const std::vector<std::string> gen = {Client(), "--coordinator", "127.0.0.1:7070", "generate",
                                        "hi"};
  auto with = [&gen](std::vector<std::string> extra) {
    std::vector<std::string> argv = gen;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  ExpectUsageErrors({
      {{Client(), "--coordinator", "127.0.0.1:99999", "info"}, "--coordinator"},
      {{Client(), "--coordinator", "localhost", "info"}, "--coordinator"},
      {with({"--n-predict", "-1"}), "--n-predict"},
      {{Client(), "--coordinator", "127.0.0.1:7070", "generate", "--prompt-tokens", "1,,2"},
       "--prompt-tokens"},
      {with({"--temp", "-0.5"}), "--temp"},
      {with({"--top-p", "2"}), "--top-p"},
      {with({"--repeat-penalty", "0"}), "--repeat-penalty"},
      {with({"--seed", "-1"}), "--seed"},
  });
}

TEST(CommandLineTest, BadEnvironmentKnobsAreUsageErrors) {
  const std::string m = Model();
  const std::string dir = testing::MakeTempDir("cli-knobs");
  const std::string env = "/usr/bin/env";
  ExpectUsageErrors({
      {{env, "COLIBRI_SPIN_US=fast", Coordinator(), "run", "--model", m, "--prompt", "hi"},
       "COLIBRI_SPIN_US=\"fast\""},
      {{env, "COLIBRI_CPU=avx512", Coordinator(), "inspect", "--model", m},
       "COLIBRI_CPU=\"avx512\""},
      {{env, "COLIBRI_SPIN_US=-1", Node(), "--data-dir", dir}, "COLIBRI_SPIN_US=\"-1\""},
      {{env, "COLIBRI_CPU=native", Node(), "--data-dir", dir}, "COLIBRI_CPU=\"native\""},
  });
}

TEST(CommandLineTest, CpuCapFromTheEnvironmentReachesTheKernels) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const CommandResult r = testing::RunCommand(
      {"/usr/bin/env", "COLIBRI_CPU=portable", "COLIBRI_SPIN_US=0", Coordinator(), "run", "--model",
       Model(), "--prompt-tokens", "1,2,3", "--n-predict", "2", "--temp", "0", "--threads", "1",
       "--print-token-ids"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 threads, portable, "), std::string::npos) << r.err;
}

TEST(CommandLineTest, ContextAboveTheModelsIsCappedWithAMessage) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const CommandResult r =
      testing::RunCommand({Coordinator(), "run", "--model", Model(), "--prompt-tokens", "1,2,3",
                           "--n-predict", "600", "--ctx-size", "1000000", "--temp", "0",
                           "--ignore-eos", "--threads", "1", "--print-token-ids"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--ctx-size 1000000 is above the model's context length of 512; using 512"),
            std::string::npos)
      << r.err;
  // The context of 512 fills: 3 prompt positions, 509 fed back, one more sampled.
  EXPECT_NE(r.err.find("context of 512 positions is full"), std::string::npos) << r.err;
}

// A token file holding the repository's placeholder (k8s/base/token.example),
// a token of under 32 characters or nothing is refused by every binary before
// it serves or connects: a message naming the file and why, never the token.
// A good token works end to end in serve_test, tls_test, http_api_test and
// node_security_test.
struct BadToken {
  std::string contents;  // the file's
  std::string why;       // in the message
};

std::vector<BadToken> BadTokens() {
  return {
      {"replace-me-with-openssl-rand-hex-32\n", "placeholder"},
      {"s3cret-token\n", "12 characters, fewer than the 32 required"},
      {"\n", "empty"},
  };
}

// Runs `argv` (which names `token_file`) once per bad token in the file:
// exit code `exit_code`, stderr naming the file, the reason and how to make a
// token, and not the token itself.
void ExpectRefusals(const std::vector<std::string>& argv, const std::string& token_file,
                    int exit_code) {
  for (const BadToken& bad : BadTokens()) {
    SCOPED_TRACE(argv[0] + " with " + bad.why);
    std::ofstream(token_file) << bad.contents;
    const CommandResult r = testing::RunCommand(argv);
    EXPECT_EQ(r.exit_code, exit_code) << r.err;
    EXPECT_NE(r.err.find("token file " + token_file), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(bad.why), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("openssl rand -hex 32"), std::string::npos) << r.err;
    if (bad.contents.size() > 2) {
      EXPECT_EQ(r.err.find(bad.contents.substr(0, bad.contents.size() - 1)), std::string::npos)
          << r.err;
    }
  }
}

TEST(CommandLineTest, ExpertNodeRefusesBadTokenFiles) {
  const std::string dir = testing::MakeTempDir("token-node");
  const std::string token_file = dir + "/token";
  ExpectRefusals({Node(), "--listen", "127.0.0.1:0", "--data-dir", dir + "/data",
                  "--auth-token-file", token_file},
                 token_file, 2);
}

TEST(CommandLineTest, CoordinatorRefusesBadTokenFiles) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const std::string model = testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf";
  const std::string dir = testing::MakeTempDir("token-coordinator");
  const std::string token_file = dir + "/token";
  ExpectRefusals({Coordinator(), "serve", "--model", model, "--listen", "127.0.0.1:0",
                  "--auth-token-file", token_file},
                 token_file, 1);
  // The nodes' own token, refused before the model loads; the serving token
  // is a good one.
  const std::string good_file = dir + "/good-token";
  testing::WriteAuthTokenFile(good_file);
  ExpectRefusals(
      {Coordinator(), "serve", "--model", model, "--listen", "127.0.0.1:0", "--auth-token-file",
       good_file, "--nodes", "127.0.0.1:1", "--node-auth-token-file", token_file},
      token_file, 1);
  // `run` with nodes reads the nodes' token too.
  ExpectRefusals({Coordinator(), "run", "--model", model, "--prompt", "hi", "--nodes",
                  "127.0.0.1:1", "--auth-token-file", token_file},
                 token_file, 1);
}

TEST(CommandLineTest, ClientRefusesBadTokenFiles) {
  const std::string dir = testing::MakeTempDir("token-client");
  const std::string token_file = dir + "/token";
  ExpectRefusals(
      {Client(), "--coordinator", "127.0.0.1:1", "--auth-token-file", token_file, "health"},
      token_file, 1);
}

// `plan --project` on the fixture model over two nodes 4 ms away: the line
// scripts read, a projection no faster than one round trip per MoE layer
// allows (3 MoE layers: at most 1 / (3 x 4.3 ms) = 77.5 tok/s with the
// 0.3 ms call overhead), and shapes it cannot project named.
TEST(CommandLineTest, PlanProjectPrintsAProjectionBoundByTheRoundTrips) {
  const CommandResult r =
      testing::RunCommand({Coordinator(), "plan", "--project", "--model", Model(),
                           "--project-nodes", "2", "--project-rtt-ms", "4", "--project-drafts",
                           "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string key = "projected single-stream decode: ";
  const size_t at = r.out.find(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  const double tps = std::atof(r.out.c_str() + at + key.size());
  EXPECT_GT(tps, 0) << r.out;
  EXPECT_LE(tps, 77.6) << r.out;
  EXPECT_NE(r.out.find("network latency"), std::string::npos) << r.out;

  const CommandResult bad = testing::RunCommand(
      {Coordinator(), "plan", "--project", "--model", Model(), "--project-shape", "llama-5"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("llama-5"), std::string::npos) << bad.err;
}

TEST(CommandLineTest, ClientTakesCoordinatorAndTokenFileFromTheEnvironment) {
  const std::string dir = testing::MakeTempDir("client-env");
  const std::string token_file = dir + "/token";
  // The token file named by COLIBRI_TOKEN_FILE is read (and refused: empty)
  // before dialing the coordinator COLIBRI_COORDINATOR names.
  {
    std::ofstream(token_file) << "";
  }
  CommandResult r = testing::RunCommand({"/usr/bin/env", "COLIBRI_COORDINATOR=127.0.0.1:1",
                                         "COLIBRI_TOKEN_FILE=" + token_file, Client(), "health"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(token_file), std::string::npos) << r.err;
  // Without either, --coordinator is required.
  r = testing::RunCommand({"/usr/bin/env", "-u", "COLIBRI_COORDINATOR", "-u", "COLIBRI_TOKEN_FILE",
                           Client(), "health"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--coordinator"), std::string::npos) << r.err;
  // A bad address from the environment is a usage error naming the variable's value.
  r = testing::RunCommand({"/usr/bin/env", "COLIBRI_COORDINATOR=no-port", Client(), "health"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-port"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace colibri
