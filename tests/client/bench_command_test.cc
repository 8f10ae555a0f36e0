// colibri-client bench's prompts: concurrent requests carry different prompts
// of the asked length, used in rotation, against a fake target that records
// what it receives (the real server is in
// tests/integration/client_commands_test.cc).
#include "client/bench_command.h"

#include <cstdint>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/bench_prompts.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri::client {
namespace {

using ::testing::ElementsAre;
using ::testing::SizeIs;

constexpr int32_t kBos = 1;

// The fake tokenizer: one id per space-separated word, BOS first with
// add_special.
std::vector<int32_t> FakeTokens(const std::string& text, bool add_special) {
  std::vector<int32_t> ids;
  if (add_special) ids.push_back(kBos);
  for (const absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    ids.push_back(2 + static_cast<int32_t>(std::hash<std::string>()(std::string(word)) % 100003));
  }
  return ids;
}

// Records every Generate request's prompt; with `hold_until` > 0, each
// Generate waits (at most 30 s) until that many are in flight together.
class FakeTarget : public BenchTarget {
 public:
  explicit FakeTarget(int hold_until = 0) : hold_until_(hold_until) {}

  absl::StatusOr<v1::TokenizeReply> Tokenize(const v1::TokenizeRequest& request) override {
    v1::TokenizeReply reply;
    for (const int32_t id : FakeTokens(request.text(), request.add_special())) reply.add_ids(id);
    return reply;
  }

  absl::StatusOr<GenerateResult> Generate(const v1::GenerateRequest& request,
                                          const ReplyCallback& on_reply) override {
    {
      absl::MutexLock lock(&mu_);
      prompts_.emplace_back(request.tokens().ids().begin(), request.tokens().ids().end());
      ++in_flight_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      if (hold_until_ > 0) {
        mu_.AwaitWithTimeout(absl::Condition(
                                 +[](FakeTarget* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
                                   return t->max_in_flight_ >= t->hold_until_;
                                 },
                                 this),
                             absl::Seconds(30));
      }
    }
    GenerateResult result;
    for (int i = 0; i < request.max_tokens(); ++i) {
      v1::GenerateReply reply;
      reply.set_token(7);
      if (on_reply) on_reply(reply);
      result.tokens.push_back(7);
    }
    v1::GenerateReply done;
    done.set_done(true);
    if (on_reply) on_reply(done);
    absl::MutexLock lock(&mu_);
    --in_flight_;
    return result;
  }

  std::vector<std::vector<int32_t>> prompts() {
    absl::MutexLock lock(&mu_);
    return prompts_;
  }
  int max_in_flight() {
    absl::MutexLock lock(&mu_);
    return max_in_flight_;
  }

 private:
  const int hold_until_;
  absl::Mutex mu_;
  std::vector<std::vector<int32_t>> prompts_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(BenchCommandTest, ConcurrentRequestsCarryDifferentPrompts) {
  FakeTarget target(/*hold_until=*/8);
  BenchOptions options;
  options.concurrency = 8;
  options.requests = 8;
  options.prompt_tokens = 8;
  options.max_tokens = 3;
  const absl::StatusOr<BenchReport> report = RunBench(target, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->ok, 8);
  EXPECT_EQ(report->output_tokens, 24);
  EXPECT_EQ(report->distinct_prompts, 16);
  EXPECT_EQ(target.max_in_flight(), 8);
  const std::vector<std::vector<int32_t>> prompts = target.prompts();
  ASSERT_THAT(prompts, SizeIs(8));
  for (const std::vector<int32_t>& p : prompts) {
    ASSERT_THAT(p, SizeIs(8));
    EXPECT_EQ(p[0], kBos);
  }
  EXPECT_EQ(std::set<std::vector<int32_t>>(prompts.begin(), prompts.end()).size(), 8u)
      << "two of the 8 concurrent requests carried the same prompt";
}

TEST(BenchCommandTest, RequestsRotateThroughTheGivenPrompts) {
  FakeTarget target;
  BenchOptions options;
  options.concurrency = 1;  // one at a time: requests arrive in order
  options.requests = 7;
  options.prompt_tokens = 4;
  options.max_tokens = 1;
  options.prompts = {"alpha beta gamma delta epsilon", "zeta eta", "theta"};
  const absl::StatusOr<BenchReport> report = RunBench(target, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->distinct_prompts, 3);
  const auto id = [](const std::string& w) { return FakeTokens(w, false)[0]; };
  // Cut to 4 tokens; the short texts are repeated (without another BOS).
  const std::vector<int32_t> a = {kBos, id("alpha"), id("beta"), id("gamma")};
  const std::vector<int32_t> b = {kBos, id("zeta"), id("eta"), id("zeta")};
  const std::vector<int32_t> c = {kBos, id("theta"), id("theta"), id("theta")};
  EXPECT_THAT(target.prompts(), ElementsAre(a, b, c, a, b, c, a));
}

TEST(BenchCommandTest, EqualPromptsCountOnceAsDistinct) {
  FakeTarget target;
  BenchOptions options;
  options.concurrency = 2;
  options.requests = 2;
  options.prompt_tokens = 2;
  options.prompts = {"same start one", "same start two"};
  const absl::StatusOr<BenchReport> report = RunBench(target, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->distinct_prompts, 1);
}

TEST(BenchCommandTest, BadPromptsAreInvalidArgument) {
  const TokenizeFunction tokenize = [](const std::string& text, bool add_special) {
    return absl::StatusOr<std::vector<int32_t>>(FakeTokens(text, add_special));
  };
  EXPECT_EQ(TokenizeBenchPrompts({}, 4, tokenize).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenizeBenchPrompts({"a b"}, 0, tokenize).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Only BOS: nothing to repeat up to the length.
  EXPECT_EQ(TokenizeBenchPrompts({"ok text", " "}, 4, tokenize).status().code(),
            absl::StatusCode::kInvalidArgument);
  const TokenizeFunction failing = [](const std::string&, bool) {
    return absl::StatusOr<std::vector<int32_t>>(absl::UnavailableError("coordinator down"));
  };
  EXPECT_EQ(TokenizeBenchPrompts({"a"}, 4, failing).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(BenchCommandTest, APromptsFileGivesItsNonEmptyLines) {
  const std::string path = ::testing::TempDir() + "/bench_prompts.txt";
  std::ofstream(path) << "first prompt\r\n\n   \nsecond one\nthird";
  const absl::StatusOr<std::vector<std::string>> prompts = ReadBenchPrompts(path);
  ASSERT_TRUE(prompts.ok()) << prompts.status();
  EXPECT_THAT(*prompts, ElementsAre("first prompt", "second one", "third"));

  const std::string empty = ::testing::TempDir() + "/bench_prompts_empty.txt";
  std::ofstream(empty) << "\n \n";
  EXPECT_EQ(ReadBenchPrompts(empty).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadBenchPrompts(::testing::TempDir() + "/no_such_prompts.txt").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(BenchCommandTest, BuiltInPromptsStartWithDifferentWords) {
  std::set<std::string> first_words;
  for (const std::string& p : BuiltInBenchPrompts()) {
    first_words.insert(std::string(*absl::StrSplit(p, ' ').begin()));
  }
  EXPECT_EQ(first_words.size(), BuiltInBenchPrompts().size());
  EXPECT_EQ(BuiltInBenchPrompts().size(), 16u);
}

}  // namespace
}  // namespace colibri::client
