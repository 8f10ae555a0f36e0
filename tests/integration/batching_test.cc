// Continuous batching in `colibri-coordinator serve`, against real processes
// on loopback, locally and with experts on 3 nodes: requests run concurrently
// (gRPC greedy and seeded sampling, an HTTP completion with logprobs, one
// joining mid-way, one cancelled) give exactly the tokens, text and logprobs
// that each gives when it runs alone on the same server. The step budget
// (--batch-size 3) is below the generations running, so prompts go in chunks
// and the decoding generations take turns. On nodes, the same holds with
// every step split into two pipelined halves (--pipeline-halves on), and
// with steps split or not as measured (auto, the default). With
// speculative decoding on (--draft ngram), the same concurrent requests give
// exactly what each gives alone on a plain server with one session, and drafts
// are accepted (counted on /metrics).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/node_process.h"
#include "tests/support/golden.h"
#include "tests/support/metrics_text.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using client::Client;
using client::ClientOptions;
using client::GenerateResult;
using json = nlohmann::json;
using testing::CommandResult;
using testing::NodeProcess;
using testing::ServerProcess;

constexpr char kCurl[] = "/usr/bin/curl";
constexpr char kModel[] = "qwen2moe-tiny-q8_0";
// Trained on the King James Bible: its greedy text repeats its prompt's
// phrases, so n-gram drafts are accepted (a random fixture's are not).
constexpr char kDemoModel[] = COLIBRI_SOURCE_DIR "/scripts/demo-model/colibri-demo-kjv-q8_0.gguf";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }

std::vector<int32_t> GoldenPrompt(const std::string& prompt) {
  testing::GoldenCase c;
  std::string error;
  EXPECT_TRUE(testing::LoadGoldenCase(kModel, prompt, &c, &error)) << error;
  return c.prompt_tokens;
}

// A request of the golden `prompt` of kModel, or on the demo model (`demo`)
// a text quoting the demo's training text.
v1::GenerateRequest Request(bool demo, const std::string& prompt, int n, float temperature,
                            uint64_t seed) {
  v1::GenerateRequest request;
  if (demo) {
    request.set_text(prompt == "english"
                         ? "And God said, Let there be light: and there was light. And God said, "
                           "Let there be"
                         : "And the LORD spake unto Moses, saying, Speak unto the children of "
                           "Israel, and say unto them, When the LORD spake unto Moses, he said");
  } else {
    for (int32_t id : GoldenPrompt(prompt)) request.mutable_tokens()->add_ids(id);
  }
  request.set_max_tokens(n);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(temperature);
  if (temperature > 0) {
    request.mutable_sampling()->set_top_k(40);
    request.mutable_sampling()->set_seed(seed);
    request.mutable_sampling()->set_has_seed(true);
    request.mutable_sampling()->set_repeat_penalty(1.3f);
    request.mutable_sampling()->set_frequency_penalty(0.2f);
  }
  return request;
}

// What a request gave, comparable across runs.
struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  std::string logprobs;  // HTTP only: the logprobs object, serialized
  bool cancelled = false;
};

class BatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    if (::access(kCurl, X_OK) != 0) GTEST_SKIP() << "curl not installed (scripts/install-deps.sh)";
  }

  void StartNodes(int n) {
    for (int i = 0; i < n; ++i) {
      nodes_.push_back(
          std::make_unique<NodeProcess>(testing::MakeTempDir("node"), "node-" + std::to_string(i)));
      std::string error;
      ASSERT_TRUE(nodes_.back()->Start(0, &error)) << error;
    }
  }

  // `serve` with `sessions` and `extra` flags (the default: batching only).
  void StartServe(int sessions = 4, const std::vector<std::string>& extra = {"--batch-size", "3"}) {
    std::vector<std::string> args = {
        Coordinator(),
        "serve",
        "--model",
        demo_ ? std::string(kDemoModel) : testing::FixturesDir() + "/models/" + kModel + ".gguf",
        "--listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--threads",
        "1",
        "--sessions",
        std::to_string(sessions)};
    args.insert(args.end(), extra.begin(), extra.end());
    if (!nodes_.empty()) {
      std::vector<const NodeProcess*> nodes;
      for (const auto& n : nodes_) nodes.push_back(n.get());
      args.insert(args.end(), {"--nodes", testing::JoinAddresses(nodes)});
    }
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    serve_ = std::make_unique<ServerProcess>();
    std::string error;
    ASSERT_TRUE(serve_->StartWithHttp(args, &http_, &error)) << error;
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions options;
    options.address = serve_->address();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // A gRPC generation; `on_reply` (may be empty) sees every reply and may
  // cancel it.
  Outcome Grpc(const v1::GenerateRequest& request,
               std::function<bool(const v1::GenerateReply&)> on_reply = {}) {
    Outcome out;
    std::unique_ptr<Client> client = Connect();
    if (client == nullptr) return out;
    absl::StatusOr<GenerateResult> r =
        on_reply ? client->Generate(request, on_reply) : client->Generate(request);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out.tokens = r->tokens;
    out.text = r->text;
    out.cancelled = r->cancelled;
    return out;
  }

  // An HTTP completion with sampling and logprobs.
  Outcome Http() {
    const json body = {{"prompt", "The small birds of the valley"},
                       {"max_tokens", 10},
                       {"temperature", 0.7},
                       {"seed", 3},
                       {"ignore_eos", true},
                       {"logprobs", 3}};
    const CommandResult r =
        testing::RunCommand({kCurl, "-sS", "-H", "Content-Type: application/json", "--data-binary",
                             body.dump(), "http://" + http_ + "/v1/completions"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json reply = json::parse(r.out, nullptr, false);
    Outcome out;
    EXPECT_TRUE(reply.is_object() && reply.contains("choices")) << r.out;
    if (!reply.is_object() || !reply.contains("choices")) return out;
    out.text = reply["choices"][0]["text"];
    out.logprobs = reply["choices"][0]["logprobs"].dump();
    return out;
  }

  // The value of a /metrics sample line starting with `series`; -1 if none.
  double Metric(const std::string& series) {
    const CommandResult r = testing::RunCommand({kCurl, "-sS", "http://" + http_ + "/metrics"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return testing::MetricSample(r.out, series);
  }

  // Runs the requests alone, then all together (one joining once another
  // has streamed 4 tokens, one cancelled after 3), and compares. With
  // `draft_flags`, the requests alone run on a plain serve with one session
  // and together on a serve with these drafting flags.
  void CheckBatchInvariance(const std::vector<std::string>& draft_flags = {}) {
    if (draft_flags.empty()) {
      StartServe();
    } else {
      StartServe(1, {});
    }
    const v1::GenerateRequest greedy = Request(demo_, "english", 16, 0, 0);
    const v1::GenerateRequest sampled = Request(demo_, "code_unicode", 16, 0.9f, 7);
    const v1::GenerateRequest joiner = Request(demo_, "long", 8, 0.8f, 11);
    const v1::GenerateRequest endless = Request(demo_, "english", 400, 0, 0);

    const Outcome greedy_alone = Grpc(greedy);
    const Outcome sampled_alone = Grpc(sampled);
    const Outcome joiner_alone = Grpc(joiner);
    const Outcome http_alone = Http();
    ASSERT_EQ(greedy_alone.tokens.size(), 16u);
    ASSERT_EQ(sampled_alone.tokens.size(), 16u);
    ASSERT_EQ(joiner_alone.tokens.size(), 8u);
    ASSERT_FALSE(http_alone.logprobs.empty());
    if (!draft_flags.empty()) {
      serve_.reset();
      StartServe(4, draft_flags);
    }

    Outcome greedy_together, sampled_together, joiner_together, http_together, cancelled;
    absl::Notification join;
    std::atomic<int> greedy_seen{0};
    std::vector<std::thread> threads;
    threads.emplace_back([&] {
      greedy_together = Grpc(greedy, [&](const v1::GenerateReply&) {
        if (++greedy_seen == 4) join.Notify();
        return true;
      });
    });
    threads.emplace_back([&] { sampled_together = Grpc(sampled); });
    threads.emplace_back([&] { http_together = Http(); });
    threads.emplace_back([&] {
      int seen = 0;
      cancelled = Grpc(endless, [&](const v1::GenerateReply&) { return ++seen < 3; });
    });
    threads.emplace_back([&] {
      join.WaitForNotification();
      joiner_together = Grpc(joiner);
    });
    for (std::thread& t : threads) t.join();

    EXPECT_EQ(greedy_together.tokens, greedy_alone.tokens);
    EXPECT_EQ(greedy_together.text, greedy_alone.text);
    EXPECT_EQ(sampled_together.tokens, sampled_alone.tokens);
    EXPECT_EQ(sampled_together.text, sampled_alone.text);
    EXPECT_EQ(joiner_together.tokens, joiner_alone.tokens);
    EXPECT_EQ(http_together.text, http_alone.text);
    EXPECT_EQ(http_together.logprobs, http_alone.logprobs);
    EXPECT_TRUE(cancelled.cancelled);
    ASSERT_EQ(cancelled.tokens.size(), 3u);
    EXPECT_EQ(cancelled.tokens,
              std::vector<int32_t>(greedy_alone.tokens.begin(), greedy_alone.tokens.begin() + 3));

    // The cancelled generation left: nothing runs, and the server still
    // gives the same tokens.
    std::unique_ptr<Client> client = Connect();
    ASSERT_NE(client, nullptr);
    absl::StatusOr<v1::ClusterStatusReply> status = client->ClusterStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->active_generations(), 0);
    EXPECT_EQ(Grpc(sampled).tokens, sampled_alone.tokens);
    // Fixed drafts must have been verified, and some accepted (the adaptive
    // length may rightly decide that drafting does not pay).
    if (std::find(draft_flags.begin(), draft_flags.end(), "--draft-fixed") != draft_flags.end()) {
      EXPECT_GT(Metric("colibri_draft_tokens_total{outcome=\"accepted\"}"), 0);
      EXPECT_GE(Metric("colibri_draft_tokens_total{outcome=\"rejected\"}"), 0);
    }
  }

  bool demo_ = false;  // serve the demo model instead of kModel

  std::vector<std::unique_ptr<NodeProcess>> nodes_;
  std::vector<std::string> extra_args_;  // more serve flags
  std::unique_ptr<ServerProcess> serve_;
  std::string http_;  // HOST:PORT of the HTTP API
};

TEST_F(BatchingTest, ConcurrentRequestsGiveWhatEachGivesAloneLocally) { CheckBatchInvariance(); }

TEST_F(BatchingTest, ConcurrentRequestsGiveWhatEachGivesAloneOnThreeNodes) {
  StartNodes(3);
  CheckBatchInvariance();
  // --pipeline-halves auto measured steps of 2-3 tokens both ways (so the
  // tokens above were checked with split and unsplit steps mixed) and decided.
  const std::string octave = "{path=\"fast\",tokens=\"2-3\"}";
  EXPECT_GT(Metric("colibri_split_batches_total"), 0);
  EXPECT_GT(Metric("colibri_pipeline_halves_steps_total" + octave),
            Metric("colibri_split_batches_total"));
  EXPECT_GE(Metric("colibri_pipeline_halves_split" + octave), 0);
  EXPECT_GT(Metric("colibri_pipeline_halves_step_time_ratio" + octave), 0);
  EXPECT_GT(Metric("colibri_pipeline_halves_step_seconds{path=\"fast\",tokens=\"2-3\","
                   "mode=\"split\"}"),
            0);
  EXPECT_GT(Metric("colibri_pipeline_halves_step_seconds{path=\"fast\",tokens=\"2-3\","
                   "mode=\"unsplit\"}"),
            0);
}

TEST_F(BatchingTest, ConcurrentRequestsGiveWhatEachGivesAloneInPipelinedHalvesOnThreeNodes) {
  StartNodes(3);
  extra_args_ = {"--pipeline-halves", "on"};
  CheckBatchInvariance();
  // Steps of several generations were split, and experts were outstanding.
  EXPECT_GT(Metric("colibri_split_batches_total"), 0);
  EXPECT_GT(Metric("colibri_expert_outstanding_seconds_total"), 0);
  EXPECT_GE(Metric("colibri_expert_wait_seconds_total"), 0);
}

// Drafts of up to 4 tokens every step (--draft-fixed, so that every step
// verifies); the budget of 12 holds the 4 decoding tokens and some drafts.
const std::vector<std::string> kDraftFlags = {"--batch-size", "12", "--draft",      "ngram",
                                              "--draft-max",  "4",  "--draft-fixed"};

TEST_F(BatchingTest, DraftingGivesThePlainTokensLocally) {
  demo_ = true;
  CheckBatchInvariance(kDraftFlags);
}

TEST_F(BatchingTest, DraftingGivesThePlainTokensOnThreeNodes) {
  demo_ = true;
  StartNodes(3);
  CheckBatchInvariance(kDraftFlags);
}

// Adaptive drafting (the default) also gives the plain tokens.
TEST_F(BatchingTest, AdaptiveDraftingGivesThePlainTokensLocally) {
  demo_ = true;
  CheckBatchInvariance({"--batch-size", "12", "--draft", "ngram"});
}

}  // namespace
}  // namespace colibri
