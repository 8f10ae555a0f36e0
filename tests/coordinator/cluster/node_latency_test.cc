// LatencyEstimator: the running averages and high percentile of a node's
// replies, split into network and node work, fresh starts after staleness,
// and untrusted figures kept in bounds. Time is passed in (no clock).
#include "coordinator/cluster/node_latency.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

TEST(NodeLatencyTest, TheFirstReplySetsTheEstimateAndSplitsNetworkFromWork) {
  LatencyEstimator est;
  EXPECT_TRUE(est.Stale(kT0));
  est.Observe(kT0, /*work=*/10, /*wait_seconds=*/0.005, /*node_seconds=*/0.002);
  const LatencyEstimate& e = est.estimate();
  EXPECT_EQ(e.samples, 1);
  EXPECT_DOUBLE_EQ(e.wait_ewma, 0.005);
  EXPECT_DOUBLE_EQ(e.network_ewma, 0.003);
  EXPECT_DOUBLE_EQ(e.seconds_per_work_ewma, 0.0002);
  EXPECT_DOUBLE_EQ(e.Expected(20), 0.003 + 20 * 0.0002);
  EXPECT_FALSE(est.Stale(kT0 + absl::Milliseconds(500)));
}

TEST(NodeLatencyTest, TheRecentFigureIsTheMedianOfTheNewestThreeReplies) {
  LatencyOptions options;
  options.window = 4;  // the ring wraps: the newest three are found across it
  LatencyEstimator est(options);
  absl::Time t = kT0;
  est.Observe(t, 1, 0.004, 0.0);
  EXPECT_DOUBLE_EQ(est.estimate().network_recent, 0.004);
  est.Observe(t, 1, 0.002, 0.0);
  EXPECT_DOUBLE_EQ(est.estimate().network_recent, 0.003);  // the mean of two
  for (int i = 0; i < 6; ++i) est.Observe(t, 1, 0.001, 0.0);
  // One late reply moves the average but not the recent figure; two do.
  est.Observe(t, 1, 0.041, 0.0);
  EXPECT_GT(est.estimate().network_ewma, 0.010);
  EXPECT_DOUBLE_EQ(est.estimate().network_recent, 0.001);
  est.Observe(t, 1, 0.041, 0.0);
  EXPECT_DOUBLE_EQ(est.estimate().network_recent, 0.041);
  // Work per unit the same way: 4 units of 2 ms node work, then 1 ms.
  est.Observe(t, 4, 0.009, 0.008);
  EXPECT_DOUBLE_EQ(est.estimate().seconds_per_work_recent, 0.0);  // 0, 0, 0.002
  est.Observe(t, 4, 0.009, 0.004);
  EXPECT_DOUBLE_EQ(est.estimate().seconds_per_work_recent, 0.001);  // 0, 0.002, 0.001
}

TEST(NodeLatencyTest, TheAverageFollowsAChangeWithinAFewReplies) {
  LatencyOptions options;
  options.ewma_alpha = 0.5;
  LatencyEstimator est(options);
  absl::Time t = kT0;
  for (int i = 0; i < 10; ++i) {
    est.Observe(t, 1, 0.001, 0.0);
    t += absl::Milliseconds(10);
  }
  EXPECT_NEAR(est.estimate().network_ewma, 0.001, 1e-12);
  // The link becomes 40 ms slower: half-way after one reply, most of the way after three.
  est.Observe(t, 1, 0.041, 0.0);
  EXPECT_NEAR(est.estimate().network_ewma, 0.021, 1e-12);
  est.Observe(t, 1, 0.041, 0.0);
  est.Observe(t, 1, 0.041, 0.0);
  EXPECT_NEAR(est.estimate().network_ewma, 0.036, 1e-12);
}

TEST(NodeLatencyTest, TheHighPercentileIsOverTheNewestWindow) {
  LatencyOptions options;
  options.window = 20;
  options.percentile = 0.95;
  LatencyEstimator est(options);
  // 19 fast replies and one slow: p95 of 20 is the 19th value, still fast.
  for (int i = 0; i < 19; ++i) est.Observe(kT0, 1, 0.001, 0.0);
  est.Observe(kT0, 1, 0.100, 0.0);
  EXPECT_DOUBLE_EQ(est.estimate().wait_high, 0.001);
  // A second slow one is in the top 5 %.
  est.Observe(kT0, 1, 0.100, 0.0);
  EXPECT_DOUBLE_EQ(est.estimate().wait_high, 0.100);
  EXPECT_DOUBLE_EQ(est.estimate().network_high, 0.100);
  // 20 fast replies push both slow ones out of the window.
  for (int i = 0; i < 20; ++i) est.Observe(kT0, 1, 0.001, 0.0);
  EXPECT_DOUBLE_EQ(est.estimate().wait_high, 0.001);
  EXPECT_DOUBLE_EQ(est.estimate().High(0), 0.001);
}

TEST(NodeLatencyTest, AReplyAfterStalenessStartsAfresh) {
  LatencyOptions options;
  options.refresh_after = absl::Seconds(1);
  LatencyEstimator est(options);
  for (int i = 0; i < 5; ++i) est.Observe(kT0, 1, 0.040, 0.0);
  EXPECT_FALSE(est.Stale(kT0 + absl::Seconds(1)));
  EXPECT_TRUE(est.Stale(kT0 + absl::Milliseconds(1001)));
  // The node recovered while it was given no work: its next reply is the estimate.
  est.Observe(kT0 + absl::Seconds(2), 1, 0.001, 0.0);
  EXPECT_EQ(est.estimate().samples, 1);
  EXPECT_DOUBLE_EQ(est.estimate().network_ewma, 0.001);
  EXPECT_DOUBLE_EQ(est.estimate().network_high, 0.001);
}

TEST(NodeLatencyTest, UntrustedFiguresStayWithinTheCallsOwnWait) {
  LatencyEstimator est;
  // The node claims more work than the whole call took, then nonsense.
  est.Observe(kT0, 4, 0.002, 5.0);
  EXPECT_DOUBLE_EQ(est.estimate().network_ewma, 0.0);
  EXPECT_DOUBLE_EQ(est.estimate().seconds_per_work_ewma, 0.0005);
  est.Observe(kT0, 4, 0.002, std::numeric_limits<double>::quiet_NaN());
  est.Observe(kT0, 0, -1.0, -1.0);
  const LatencyEstimate& e = est.estimate();
  EXPECT_TRUE(std::isfinite(e.wait_ewma) && std::isfinite(e.network_ewma) &&
              std::isfinite(e.seconds_per_work_ewma) && std::isfinite(e.wait_high));
  EXPECT_GE(e.network_ewma, 0.0);
  EXPECT_GE(e.seconds_per_work_ewma, 0.0);
}

}  // namespace
}  // namespace colibri::coordinator
