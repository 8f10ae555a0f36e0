#include "model/moe/routing_trace.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::moe {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "." +
         std::to_string(::getpid());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Counts calls; computes nothing.
class FakeBackend : public ExpertBackend {
 public:
  void Submit(const ExpertBatch& batch, float* out) override {
    (void)batch;
    (void)out;
    ++submits;
  }
  absl::Status Wait() override { return absl::OkStatus(); }
  void Prefetch(int layer, absl::Span<const int32_t> experts) override {
    (void)layer;
    hinted += static_cast<int>(experts.size());
  }
  ExpertBackend* SecondChannel() override {
    if (second == nullptr) second = std::make_unique<FakeBackend>();
    return second.get();
  }
  int submits = 0;
  int hinted = 0;
  std::unique_ptr<FakeBackend> second;
};

// Keeps what it is told.
class CountingObserver : public RoutingObserver {
 public:
  void OnRoutes(int layer, int64_t n_tokens, int k, const int32_t* experts) override {
    for (int64_t i = 0; i < n_tokens * k; ++i) routes.push_back({layer, experts[i]});
  }
  void OnHints(int layer, absl::Span<const int32_t> experts) override {
    for (int32_t e : experts) hints.push_back({layer, e});
  }
  std::vector<std::pair<int, int32_t>> routes;
  std::vector<std::pair<int, int32_t>> hints;
};

TEST(ObservedExpertBackendTest, EveryObserverSeesBothChannelsAndTheInnerBackendGetsEverything) {
  FakeBackend inner;
  CountingObserver a;
  CountingObserver b;
  ObservedExpertBackend observed(&inner, {&a, &b});
  const int32_t first[] = {3, 1};
  const int32_t second_half[] = {2, 2};
  const int32_t hint[] = {7};
  ExpertBatch batch;
  batch.layer = 4;
  batch.k = 2;
  batch.n_tokens = 1;
  batch.experts = first;
  observed.Prefetch(5, hint);
  observed.Submit(batch, nullptr);
  ExpertBackend* other = observed.SecondChannel();
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other, observed.SecondChannel());  // created once
  batch.experts = second_half;
  other->Submit(batch, nullptr);
  other->Prefetch(6, hint);
  const std::vector<std::pair<int, int32_t>> want_routes = {{4, 3}, {4, 1}, {4, 2}, {4, 2}};
  const std::vector<std::pair<int, int32_t>> want_hints = {{5, 7}, {6, 7}};
  for (const CountingObserver* o : {&a, &b}) {
    EXPECT_EQ(o->routes, want_routes);
    EXPECT_EQ(o->hints, want_hints);
  }
  EXPECT_EQ(inner.submits, 1);
  EXPECT_EQ(inner.hinted, 1);
  ASSERT_NE(inner.second, nullptr);
  EXPECT_EQ(inner.second->submits, 1);
  EXPECT_EQ(inner.second->hinted, 1);
}

TEST(RoutingTraceTest, RecordsStepsLayersTokenCountsAndHints) {
  const std::string path = TempPath("routing_trace_test");
  FakeBackend inner;
  {
    absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> w = RoutingTraceWriter::Open(path, {});
    ASSERT_TRUE(w.ok()) << w.status();
    ObservedExpertBackend traced(&inner, {w->get()});
    // Step 0: two tokens, top-2; step 1: one token.
    const int32_t step0_l0[] = {3, 1, 3, 2};
    const int32_t step0_l1[] = {0, 5, 5, 0};
    const int32_t step1_l0[] = {2, 1};
    const int32_t hint[] = {5, 4};
    ExpertBatch b;
    b.k = 2;
    b.layer = 0;
    b.n_tokens = 2;
    b.experts = step0_l0;
    traced.Prefetch(1, hint);
    traced.Submit(b, nullptr);
    b.layer = 1;
    b.experts = step0_l1;
    traced.Submit(b, nullptr);
    traced.Prefetch(1, hint);  // before layer 0 of step 1: for step 1
    b.layer = 0;
    b.n_tokens = 1;
    b.experts = step1_l0;
    traced.Submit(b, nullptr);
    EXPECT_EQ(inner.submits, 3);
    EXPECT_EQ(inner.hinted, 4);
  }
  EXPECT_EQ(ReadAll(path),
            "colibri-routing-trace 1\n"
            "H 0 1 5 4\n"
            "R 0 0 1:1 2:1 3:2\n"
            "R 0 1 0:2 5:2\n"
            "H 1 1 5 4\n"
            "R 1 0 1:1 2:1\n");
  absl::StatusOr<std::vector<TraceRecord>> records = ReadRoutingTrace(path);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 5u);
  EXPECT_EQ((*records)[1].kind, TraceRecord::Kind::kRoute);
  EXPECT_EQ((*records)[1].experts, (std::vector<std::pair<int32_t, int32_t>>{{1, 1}, {2, 1}, {3, 2}}));
  EXPECT_EQ((*records)[3].kind, TraceRecord::Kind::kHint);
  EXPECT_EQ((*records)[3].step, 1);
  std::remove(path.c_str());
}

// A step run as two pipelined half-batches routes each layer twice in a row
// (A0 B0 A1 B1): one step, as the format says, not a step per half.
TEST(RoutingTraceTest, HalfBatchesOfAStepAreOneStep) {
  const std::string path = TempPath("routing_trace_halves");
  {
    absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> w = RoutingTraceWriter::Open(path, {});
    ASSERT_TRUE(w.ok()) << w.status();
    const int32_t a[] = {1}, b[] = {2};
    for (int step = 0; step < 2; ++step) {
      (*w)->OnHints(0, a);  // each half hints its first layer before any layer runs
      (*w)->OnHints(0, b);
      for (int layer = 0; layer < 2; ++layer) {
        (*w)->OnRoutes(layer, 1, 1, a);
        (*w)->OnRoutes(layer, 1, 1, b);
      }
    }
  }
  EXPECT_EQ(ReadAll(path),
            "colibri-routing-trace 1\n"
            "H 0 0 1\nH 0 0 2\nR 0 0 1:1\nR 0 0 2:1\nR 0 1 1:1\nR 0 1 2:1\n"
            "H 1 0 1\nH 1 0 2\nR 1 0 1:1\nR 1 0 2:1\nR 1 1 1:1\nR 1 1 2:1\n");
  std::remove(path.c_str());
}

TEST(RoutingTraceTest, StopsAtTheByteLimitAndSaysSo) {
  const std::string path = TempPath("routing_trace_limit_test");
  RoutingTraceWriter::Options options;
  options.max_bytes = 100;
  {
    absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> w = RoutingTraceWriter::Open(path, options);
    ASSERT_TRUE(w.ok());
    const int32_t experts[] = {1, 2};
    for (int i = 0; i < 50; ++i) (*w)->OnRoutes(i % 4, 1, 2, experts);
    (*w)->Flush();
    EXPECT_GT((*w)->dropped_records(), 0u);
    EXPECT_LE((*w)->written_bytes(), 100u + 20u);
  }
  const std::string text = ReadAll(path);
  EXPECT_NE(text.find("# truncated\n"), std::string::npos);
  EXPECT_TRUE(ParseRoutingTrace(text, path).ok());
  std::remove(path.c_str());
}

TEST(RoutingTraceTest, BadInputIsRejectedWithItsLine) {
  EXPECT_EQ(ParseRoutingTrace("", "t").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseRoutingTrace("some other file\n", "t").ok());
  absl::Status s = ParseRoutingTrace("colibri-routing-trace 1\nR 0 0 3:1\nR 0 1 x:1\n", "t").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("t:3:"), absl::string_view::npos) << s;
  EXPECT_FALSE(ParseRoutingTrace("colibri-routing-trace 1\nR 0 0 3:0\n", "t").ok());
  EXPECT_FALSE(ParseRoutingTrace("colibri-routing-trace 1\nX 0 0\n", "t").ok());
  EXPECT_FALSE(ParseRoutingTrace("colibri-routing-trace 1\nH -1 0 2\n", "t").ok());
  EXPECT_EQ(ReadRoutingTrace("/nonexistent/trace").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(RoutingTraceWriter::Open("/nonexistent/dir/trace", {}).ok());
}

}  // namespace
}  // namespace colibri::moe
