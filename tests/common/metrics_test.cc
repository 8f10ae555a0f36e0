#include "common/metrics.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, CounterWithoutLabelsShowsZeroBeforeUse) {
  Registry r;
  r.AddCounter("colibri_things_total", "Things seen.");
  EXPECT_EQ(r.Render(),
            "# HELP colibri_things_total Things seen.\n"
            "# TYPE colibri_things_total counter\n"
            "colibri_things_total 0\n");
}

TEST(MetricsTest, LabelledCountersAreSortedByLabelValues) {
  Registry r;
  Family<Counter>* f = r.AddCounter("colibri_requests_total", "Requests.", {"endpoint", "code"});
  f->With({"/v1/models", "200"})->Increment();
  f->With({"/health", "503"})->Increment(2);
  f->With({"/v1/models", "200"})->Increment();
  f->With({"/health", "503"})->Increment(-5);  // counters never go down
  EXPECT_EQ(r.Render(),
            "# HELP colibri_requests_total Requests.\n"
            "# TYPE colibri_requests_total counter\n"
            "colibri_requests_total{endpoint=\"/health\",code=\"503\"} 2\n"
            "colibri_requests_total{endpoint=\"/v1/models\",code=\"200\"} 2\n");
}

TEST(MetricsTest, GaugeGoesUpAndDownAndPrintsFractions) {
  Registry r;
  Gauge* g = r.AddGauge("colibri_depth", "Depth.")->With({});
  g->Add(3);
  g->Add(-1.5);
  EXPECT_THAT(r.Render(), HasSubstr("\ncolibri_depth 1.5\n"));
  g->Set(-2);
  EXPECT_THAT(r.Render(), HasSubstr("\ncolibri_depth -2\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  Histogram* h = r.AddHistogram("colibri_wait_seconds", "Wait.", {0.1, 1})->With({});
  h->Observe(0.05);
  h->Observe(0.1);  // a bound is inclusive
  h->Observe(0.5);
  h->Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP colibri_wait_seconds Wait.\n"
            "# TYPE colibri_wait_seconds histogram\n"
            "colibri_wait_seconds_bucket{le=\"0.1\"} 2\n"
            "colibri_wait_seconds_bucket{le=\"1\"} 3\n"
            "colibri_wait_seconds_bucket{le=\"+Inf\"} 4\n"
            "colibri_wait_seconds_sum 7.65\n"
            "colibri_wait_seconds_count 4\n");
}

TEST(MetricsTest, LabelledHistogramPutsLeLast) {
  Registry r;
  r.AddHistogram("colibri_t_seconds", "T.", {1}, {"node"})->With({"a"})->Observe(2);
  EXPECT_THAT(r.Render(), HasSubstr("colibri_t_seconds_bucket{node=\"a\",le=\"1\"} 0\n"
                                    "colibri_t_seconds_bucket{node=\"a\",le=\"+Inf\"} 1\n"
                                    "colibri_t_seconds_sum{node=\"a\"} 2\n"
                                    "colibri_t_seconds_count{node=\"a\"} 1\n"));
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.AddGauge("colibri_x", "a \\ b\nc", {"v"})->With({"q\"\\\n"})->Set(1);
  EXPECT_EQ(r.Render(),
            "# HELP colibri_x a \\\\ b\\nc\n"
            "# TYPE colibri_x gauge\n"
            "colibri_x{v=\"q\\\"\\\\\\n\"} 1\n");
}

TEST(MetricsTest, CollectorsWriteAfterRegisteredFamilies) {
  Registry r;
  r.AddCounter("colibri_a_total", "A.");
  r.AddCollector([](TextWriter& w) {
    w.Family("colibri_b_bytes", "B.", Type::kGauge);
    w.Sample("colibri_b_bytes", {"node"}, {"n1"}, 1e20);
  });
  EXPECT_EQ(r.Render(),
            "# HELP colibri_a_total A.\n"
            "# TYPE colibri_a_total counter\n"
            "colibri_a_total 0\n"
            "# HELP colibri_b_bytes B.\n"
            "# TYPE colibri_b_bytes gauge\n"
            "colibri_b_bytes{node=\"n1\"} 1e+20\n");
}

TEST(MetricsTest, ConcurrentIncrementsAreAllCounted) {
  Registry r;
  Family<Counter>* f = r.AddCounter("colibri_c_total", "C.", {"k"});
  Histogram* h = r.AddHistogram("colibri_h_seconds", "H.", {0.5})->With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([f, h, t] {
      for (int i = 0; i < 10000; ++i) {
        f->With({t % 2 == 0 ? "even" : "odd"})->Increment();
        h->Observe(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(f->With({"even"})->value(), 20000);
  EXPECT_EQ(f->With({"odd"})->value(), 20000);
  EXPECT_EQ(h->snapshot().count, 40000u);
  EXPECT_EQ(h->snapshot().sum, 40000);
}

TEST(MetricsTest, ExponentialBuckets) {
  EXPECT_THAT(ExponentialBuckets(0.001, 2, 4), ::testing::ElementsAre(0.001, 0.002, 0.004, 0.008));
}

TEST(MetricsDeathTest, BadNamesAndDuplicatesAreProgramBugs) {
  Registry r;
  r.AddCounter("colibri_ok_total", "");
  EXPECT_DEATH(r.AddCounter("colibri_ok_total", ""), "registered twice");
  EXPECT_DEATH(r.AddCounter("9bad", ""), "bad metric or label name");
  EXPECT_DEATH(r.AddGauge("colibri_g", "", {"le"}), "bad metric or label name");
}

}  // namespace
}  // namespace colibri::metrics
