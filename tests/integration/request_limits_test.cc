// Request sizes against a real `serve` and `run` held to a virtual-memory
// limit (ulimit -v): a request whose sizes would make the coordinator reserve
// gigabytes is refused (or bounded by the context) before anything is
// allocated, and the server keeps serving.
#include <signal.h>

#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/support/golden.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using client::Client;
using client::ClientOptions;
using client::GenerateResult;
using testing::CommandResult;
using testing::ServerProcess;

// 3 GB of address space: serve needs under 1 GB; 2^31 tokens of 4 bytes need 8.
constexpr char kMemoryLimitKb[] = "3000000";
constexpr char kModel[] = "qwen3moe-tiny-f32";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string ModelPath() { return testing::FixturesDir() + "/models/" + kModel + ".gguf"; }

// argv run by a shell that first lowers the address-space limit.
std::vector<std::string> UnderMemoryLimit(const std::vector<std::string>& argv) {
  std::vector<std::string> out = {
      "/bin/sh", "-c", std::string("ulimit -v ") + kMemoryLimitKb + " && exec \"$@\"", "sh"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<int32_t> Prompt() {
  testing::GoldenCase c;
  std::string error;
  EXPECT_TRUE(testing::LoadGoldenCase(kModel, "english", &c, &error)) << error;
  return c.prompt_tokens;
}

v1::GenerateRequest Request(const std::vector<int32_t>& prompt, int max_tokens) {
  v1::GenerateRequest request;
  for (int32_t id : prompt) request.mutable_tokens()->add_ids(id);
  request.set_max_tokens(max_tokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);
  return request;
}

class RequestLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  }
};

TEST_F(RequestLimitsTest, ServeUnderAMemoryLimitRefusesOversizedRequestsAndKeepsServing) {
  ServerProcess serve;
  std::string error;
  ASSERT_TRUE(
      serve.Start(UnderMemoryLimit({Coordinator(), "serve", "--model", ModelPath(), "--listen",
                                    "127.0.0.1:0", "--threads", "1", "--ctx-size", "32"}),
                  &error))
      << error;
  ClientOptions options;
  options.address = serve.address();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<int32_t> prompt = Prompt();
  ASSERT_FALSE(prompt.empty());

  absl::StatusOr<GenerateResult> huge = (*client)->Generate(Request(prompt, INT_MAX));
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kOutOfRange) << huge.status();
  EXPECT_NE(huge.status().message().find("limit"), std::string::npos) << huge.status();

  v1::GenerateRequest many_stops = Request(prompt, 4);
  for (int i = 0; i < 1000; ++i) many_stops.add_stop("stop" + std::to_string(i));
  absl::StatusOr<GenerateResult> stops = (*client)->Generate(many_stops);
  EXPECT_EQ(stops.status().code(), absl::StatusCode::kOutOfRange) << stops.status();
  EXPECT_NE(stops.status().message().find("stop strings"), std::string::npos) << stops.status();

  v1::GenerateRequest long_stop = Request(prompt, 4);
  long_stop.add_stop(std::string(100000, 'x'));
  absl::StatusOr<GenerateResult> stop = (*client)->Generate(long_stop);
  EXPECT_EQ(stop.status().code(), absl::StatusCode::kOutOfRange) << stop.status();

  v1::GenerateRequest long_text;
  long_text.set_text(std::string(4 << 20, 'a'));
  absl::StatusOr<GenerateResult> text = (*client)->Generate(long_text);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kOutOfRange) << text.status();
  EXPECT_NE(text.status().message().find("bytes"), std::string::npos) << text.status();
  v1::TokenizeRequest tokenize;
  tokenize.set_text(std::string(4 << 20, 'a'));
  absl::StatusOr<v1::TokenizeReply> tokenized = (*client)->Tokenize(tokenize);
  EXPECT_EQ(tokenized.status().code(), absl::StatusCode::kOutOfRange) << tokenized.status();

  // At the limit: accepted, and bounded by the 32 positions of the context.
  absl::StatusOr<GenerateResult> at_limit = (*client)->Generate(Request(prompt, 1 << 20));
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  EXPECT_EQ(at_limit->finish_reason, v1::FINISH_REASON_CONTEXT);
  EXPECT_EQ(at_limit->tokens.size() + prompt.size(), 33u);

  absl::StatusOr<GenerateResult> good = (*client)->Generate(Request(prompt, 4));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->tokens.size(), 4u);
  EXPECT_EQ(serve.Stop(SIGTERM), 0);
}

TEST_F(RequestLimitsTest, RunUnderAMemoryLimitBoundsNPredictByTheContext) {
  std::string ids;
  for (int32_t id : Prompt()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const CommandResult r = testing::RunCommand(
      UnderMemoryLimit({Coordinator(), "run", "--model", ModelPath(), "--prompt-tokens", ids,
                        "--n-predict", std::to_string(INT_MAX), "--ctx-size", "32", "--temp", "0",
                        "--ignore-eos", "--threads", "1", "--print-token-ids"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("context of 32 positions is full"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace colibri
