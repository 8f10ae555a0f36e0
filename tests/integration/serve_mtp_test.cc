// `colibri-coordinator serve --draft mtp` as a user runs it, with real
// processes on loopback, locally and with the main layers' experts on 2
// expert nodes: concurrent gRPC requests (token-id prompts, greedy and seeded
// with penalties) batched on 4 slots, each drafting with the model's NextN
// block, give exactly the tokens that each gives alone on a plain server with
// one session; drafts are accepted on the echo model
// (tests/support/tiny_nextn_model.h), counted on /metrics. A model without
// the block is refused at start. A glm4moe file from colibri-make-model
// drafts the same way.
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/integration/node_process.h"
#include "tests/support/paths.h"
#include "tests/support/metrics_text.h"
#include "tests/support/subprocess.h"
#include "tests/support/tiny_nextn_model.h"

namespace colibri {
namespace {

using client::Client;
using client::ClientOptions;
using testing::CommandResult;
using testing::NodeProcess;
using testing::ServerProcess;

constexpr char kCurl[] = "/usr/bin/curl";

std::vector<std::string> ServeArgs(const std::string& model, int sessions) {
  return {testing::BinaryPath("coordinator/colibri-coordinator"),
          "serve",
          "--model",
          model,
          "--listen",
          "127.0.0.1:0",
          "--http-listen",
          "127.0.0.1:0",
          "--threads",
          "1",
          "--sessions",
          std::to_string(sessions)};
}

v1::GenerateRequest Request(std::vector<int32_t> prompt, int n, float temperature, uint64_t seed) {
  v1::GenerateRequest request;
  for (int32_t id : prompt) request.mutable_tokens()->add_ids(id);
  request.set_max_tokens(n);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(temperature);
  if (temperature > 0) {
    request.mutable_sampling()->set_top_k(20);
    request.mutable_sampling()->set_seed(seed);
    request.mutable_sampling()->set_has_seed(true);
    request.mutable_sampling()->set_repeat_penalty(1.1f);
  }
  return request;
}

class ServeMtpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kCurl, X_OK) != 0) GTEST_SKIP() << "curl not installed (scripts/install-deps.sh)";
  }

  bool Start(std::vector<std::string> args) {
    if (!nodes_.empty()) {
      std::vector<const NodeProcess*> views;
      for (const auto& n : nodes_) views.push_back(n.get());
      args.insert(args.end(), {"--nodes", testing::JoinAddresses(views)});
    }
    serve_ = std::make_unique<ServerProcess>();
    std::string error;
    const bool started = serve_->StartWithHttp(args, &http_, &error);
    EXPECT_TRUE(started) << error;
    return started;
  }

  std::vector<int32_t> Generate(const v1::GenerateRequest& request) {
    ClientOptions options;
    options.address = serve_->address();
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return {};
    auto r = (*client)->Generate(request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  }

  double Metric(const std::string& series) {
    const CommandResult r = testing::RunCommand({kCurl, "-sS", "http://" + http_ + "/metrics"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return testing::MetricSample(r.out, series);
  }

  // Every request alone on a plain serve, then together on a --draft mtp
  // serve; returns the drafts accepted.
  double CheckSameAsPlain(const std::string& model) {
    const std::vector<v1::GenerateRequest> requests = {
        Request({1, 7, 3, 30, 12, 5, 9, 22}, 20, 0, 0),
        Request({1, 7, 3, 30, 12, 5, 9, 22}, 20, 0.7f, 7),
        Request({8, 8, 14, 3}, 16, 0, 0),
        Request({20, 2, 19, 5, 5, 31, 0, 6, 13, 27, 11, 1}, 18, 0.9f, 11),
    };
    std::vector<std::vector<int32_t>> alone;
    if (!Start(ServeArgs(model, 1))) return 0;
    for (const auto& request : requests) {
      alone.push_back(Generate(request));
      EXPECT_EQ(alone.back().size(), static_cast<size_t>(request.max_tokens()));
    }
    serve_.reset();
    std::vector<std::string> args = ServeArgs(model, 4);
    args.insert(args.end(),
                {"--batch-size", "12", "--draft", "mtp", "--draft-max", "4", "--draft-fixed"});
    if (!Start(args)) return 0;
    std::vector<std::vector<int32_t>> together(requests.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i) {
      threads.emplace_back([&, i] { together[i] = Generate(requests[i]); });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(together[i], alone[i]) << "request " << i;
    }
    const double accepted = Metric("colibri_draft_tokens_total{outcome=\"accepted\"}");
    const double rejected = Metric("colibri_draft_tokens_total{outcome=\"rejected\"}");
    EXPECT_GT(accepted + rejected, 0);  // fixed drafts were verified
    serve_.reset();
    return accepted;
  }

  std::vector<std::unique_ptr<NodeProcess>> nodes_;
  std::unique_ptr<ServerProcess> serve_;
  std::string http_;
};

std::string WriteModel(bool echo, int n_nextn, const std::string& name) {
  testing::TinyNextnOptions options;
  options.echo = echo;
  options.n_nextn = n_nextn;
  const std::string path = testing::MakeTempDir("serve-mtp") + "/" + name + ".gguf";
  EXPECT_TRUE(testing::TinyNextnModel(options).WriteFile(path).ok());
  return path;
}

TEST_F(ServeMtpTest, ConcurrentMtpDraftingGivesThePlainTokensLocally) {
  CheckSameAsPlain(WriteModel(false, 1, "random"));
  EXPECT_GT(CheckSameAsPlain(WriteModel(true, 1, "echo")), 0);
}

TEST_F(ServeMtpTest, ConcurrentMtpDraftingGivesThePlainTokensOnTwoNodes) {
  for (int i = 0; i < 2; ++i) {
    nodes_.push_back(std::make_unique<NodeProcess>(
        testing::MakeTempDir("serve-mtp-node" + std::to_string(i)), "node-" + std::to_string(i)));
    std::string error;
    ASSERT_TRUE(nodes_.back()->Start(0, &error)) << error;
  }
  EXPECT_GT(CheckSameAsPlain(WriteModel(true, 1, "echo")), 0);
}

// A glm4moe file with a NextN block, made by colibri-make-model.
TEST_F(ServeMtpTest, ConcurrentMtpDraftingGivesThePlainTokensOnAGlm4MoeFile) {
  const std::string model = testing::MakeTempDir("serve-mtp-glm") + "/glm.gguf";
  const CommandResult made = testing::RunCommand(testing::TinyGlm4MoeMakeModelCommand(
      testing::BinaryPath("tools/colibri-make-model"), model));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  CheckSameAsPlain(model);
}

TEST_F(ServeMtpTest, AModelWithoutNextnIsRefused) {
  std::vector<std::string> args = ServeArgs(WriteModel(false, 0, "plain"), 2);
  args.insert(args.end(), {"--draft", "mtp"});
  const CommandResult r = testing::RunCommand(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("has no NextN/MTP block"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace colibri
