#include "expert_node/node_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri::expert_node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(NodeMetricsTest, CountersGaugesSecondsAndTheNodeLabel) {
  v1::NodeStatsReply stats;
  stats.set_node_id("node-a");
  stats.set_ram_budget_bytes(1000);
  stats.set_ram_used_bytes(250);
  stats.set_compute_requests(7);
  stats.set_disk_wait_micros(1500000);
  stats.set_in_flight(2);
  metrics::Histogram compute({0.01});
  compute.Observe(0.005);
  compute.Observe(0.5);
  const std::string text = RenderNodeMetrics(stats, compute.snapshot());

  EXPECT_THAT(text, HasSubstr("# TYPE colibri_node_info gauge\n"
                              "colibri_node_info{node=\"node-a\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE colibri_node_ram_budget_bytes gauge\n"
                              "colibri_node_ram_budget_bytes 1000\n"));
  EXPECT_THAT(text, HasSubstr("\ncolibri_node_ram_used_bytes 250\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE colibri_node_compute_requests_total counter\n"
                              "colibri_node_compute_requests_total 7\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE colibri_node_disk_wait_seconds_total counter\n"
                              "colibri_node_disk_wait_seconds_total 1.5\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE colibri_node_in_flight gauge\n"
                              "colibri_node_in_flight 2\n"));
  EXPECT_THAT(text, HasSubstr("\ncolibri_node_ram_hits_total 0\n"));
  EXPECT_THAT(text, HasSubstr("colibri_node_compute_seconds_bucket{le=\"0.01\"} 1\n"
                              "colibri_node_compute_seconds_bucket{le=\"+Inf\"} 2\n"
                              "colibri_node_compute_seconds_sum 0.505\n"
                              "colibri_node_compute_seconds_count 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("\ncolibri_node_disk_wait_micros")));
  EXPECT_THAT(text, Not(HasSubstr("\ncolibri_node_node_id")));
}

TEST(NodeMetricsTest, EveryNumericFieldOfNodeStatsIsExported) {
  const std::string text =
      RenderNodeMetrics(v1::NodeStatsReply(), metrics::Histogram({1}).snapshot());
  const google::protobuf::Descriptor* d = v1::NodeStatsReply::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string name = d->field(i)->name();
    if (name == "node_id") continue;
    std::string base = name;
    if (base.size() > 7 && base.substr(base.size() - 7) == "_micros") {
      base = base.substr(0, base.size() - 7) + "_seconds";
    }
    EXPECT_THAT(text, HasSubstr("\ncolibri_node_" + base)) << name;
  }
}

}  // namespace
}  // namespace colibri::expert_node
