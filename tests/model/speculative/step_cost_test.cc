// The per-token-count step cost: moving averages where measured, linear
// between measured counts, the last slope above them, and bad input ignored.
#include "model/speculative/step_cost.h"

#include <limits>

#include "gtest/gtest.h"

namespace colibri::speculative {
namespace {

TEST(StepCostTest, NothingMeasuredCostsNothing) {
  StepCost cost;
  EXPECT_TRUE(cost.empty());
  EXPECT_EQ(cost.Seconds(1), 0);
  EXPECT_EQ(cost.largest_measured(), 0);
}

TEST(StepCostTest, OneCountIsFlat) {
  StepCost cost;
  cost.Observe(4, 0.02);
  EXPECT_DOUBLE_EQ(cost.Seconds(1), 0.02);
  EXPECT_DOUBLE_EQ(cost.Seconds(4), 0.02);
  EXPECT_DOUBLE_EQ(cost.Seconds(9), 0.02);
  EXPECT_EQ(cost.largest_measured(), 4);
  EXPECT_TRUE(cost.measured(4));
  EXPECT_FALSE(cost.measured(3));
}

TEST(StepCostTest, InterpolatesBetweenAndExtrapolatesAboveTheMeasuredCounts) {
  StepCost cost;
  cost.Observe(1, 0.010);
  cost.Observe(3, 0.014);
  cost.Observe(5, 0.030);
  EXPECT_DOUBLE_EQ(cost.Seconds(2), 0.012);
  EXPECT_DOUBLE_EQ(cost.Seconds(4), 0.022);
  // Above 5: the slope from 3 to 5, 8 ms per token.
  EXPECT_DOUBLE_EQ(cost.Seconds(7), 0.046);
  // A falling last segment (noise) extrapolates flat, never down.
  StepCost noisy;
  noisy.Observe(1, 0.010);
  noisy.Observe(2, 0.008);
  EXPECT_DOUBLE_EQ(noisy.Seconds(6), 0.008);
}

TEST(StepCostTest, EachCountIsAMovingAverage) {
  StepCost cost(0.5);
  cost.Observe(2, 0.010);
  cost.Observe(2, 0.020);
  EXPECT_DOUBLE_EQ(cost.Seconds(2), 0.015);
  cost.Observe(2, 0.015);
  EXPECT_DOUBLE_EQ(cost.Seconds(2), 0.015);
}

TEST(StepCostTest, BadMeasurementsAreIgnored) {
  StepCost cost;
  cost.Observe(0, 0.010);
  cost.Observe(-3, 0.010);
  cost.Observe(2, -1);
  cost.Observe(2, std::numeric_limits<double>::quiet_NaN());
  cost.Observe(2, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(cost.empty());
}

}  // namespace
}  // namespace colibri::speculative
