// moe::RouteExperts on hand-computed cases: sigmoid gating, the selection bias
// (chooses, does not weight), group-limited selection, renormalisation and
// scale; and the plain options giving SelectExperts' exact bits.
#include "model/moe/router.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::moe {
namespace {

float Sigmoid(double x) { return static_cast<float>(1.0 / (1.0 + std::exp(-x))); }

TEST(RouteExpertsTest, PlainOptionsAreSelectExpertsBitwise) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int n_tokens = 5, n_expert = 16, k = 4;
  std::vector<float> logits(n_tokens * n_expert);
  for (float& v : logits) v = normal(rng);
  for (bool normalize : {false, true}) {
    std::vector<int32_t> e1(n_tokens * k), e2(n_tokens * k);
    std::vector<float> w1(n_tokens * k), w2(n_tokens * k);
    std::vector<float> scratch(RouteScratchSize(n_expert));
    SelectExperts(logits.data(), n_tokens, n_expert, k, normalize, e1.data(), w1.data());
    RoutingOptions o;
    o.normalize = normalize;
    ASSERT_TRUE(o.plain());
    RouteExperts(logits.data(), n_tokens, n_expert, k, o, scratch.data(), e2.data(), w2.data());
    EXPECT_EQ(e1, e2);
    EXPECT_EQ(w1, w2);
  }
}

// p = sigmoid(logits) = {0.5, 0.5, 0.75, 0.25}; bias {0, 0.3, 0, 0.6} makes
// the selection scores {0.5, 0.8, 0.75, 0.85}: experts 3 then 1 are chosen,
// weighted by their unbiased p = 0.25 and 0.5.
TEST(RouteExpertsTest, SelectionBiasChoosesButDoesNotWeight) {
  const float logits[4] = {0.0f, 0.0f, static_cast<float>(std::log(3.0)),
                           static_cast<float>(-std::log(3.0))};
  const float bias[4] = {0.0f, 0.3f, 0.0f, 0.6f};
  float scratch[12];
  int32_t e[2];
  float w[2];
  RoutingOptions o;
  o.sigmoid = true;
  o.selection_bias = bias;
  RouteExperts(logits, 1, 4, 2, o, scratch, e, w);
  EXPECT_EQ(e[0], 3);
  EXPECT_EQ(e[1], 1);
  EXPECT_NEAR(w[0], 0.25f, 1e-6);
  EXPECT_NEAR(w[1], 0.5f, 1e-6);

  o.normalize = true;  // {1/3, 2/3}
  RouteExperts(logits, 1, 4, 2, o, scratch, e, w);
  EXPECT_NEAR(w[0], 1.0f / 3, 1e-6);
  EXPECT_NEAR(w[1], 2.0f / 3, 1e-6);

  o.scale = 2.5f;  // {0.8333, 1.6667}
  RouteExperts(logits, 1, 4, 2, o, scratch, e, w);
  EXPECT_NEAR(w[0], 2.5f / 3, 1e-6);
  EXPECT_NEAR(w[1], 5.0f / 3, 1e-6);
}

// 8 experts in 4 groups of 2, 2 groups used. Group scores (sum of the two
// sigmoid scores): g0 = s(3) + s(-3) = 1, g1 = 2 s(1) = 1.462, g2 = 2 s(2.5)
// = 1.848, g3 = s(0) + s(-5) = 0.507. Groups 2 and 1 stay, so expert 0 (the
// single best score) is not eligible; top-3 is 4, 5, then 2 (tied with 3,
// lower id first).
TEST(RouteExpertsTest, GroupLimitedSelection) {
  const float logits[8] = {3.0f, -3.0f, 1.0f, 1.0f, 2.5f, 2.5f, 0.0f, -5.0f};
  float scratch[24];
  int32_t e[3];
  float w[3];
  RoutingOptions o;
  o.sigmoid = true;
  o.n_groups = 4;
  o.n_groups_used = 2;
  RouteExperts(logits, 1, 8, 3, o, scratch, e, w);
  EXPECT_EQ(e[0], 4);
  EXPECT_EQ(e[1], 5);
  EXPECT_EQ(e[2], 2);
  EXPECT_NEAR(w[0], Sigmoid(2.5), 1e-6);
  EXPECT_NEAR(w[1], Sigmoid(2.5), 1e-6);
  EXPECT_NEAR(w[2], Sigmoid(1.0), 1e-6);

  // One group used: only group 2 (experts 4, 5) remains for top-2.
  o.n_groups_used = 1;
  RouteExperts(logits, 1, 8, 2, o, scratch, e, w);
  EXPECT_EQ(e[0], 4);
  EXPECT_EQ(e[1], 5);

  // Without groups expert 0 wins.
  o.n_groups = 1;
  o.n_groups_used = 1;
  RouteExperts(logits, 1, 8, 1, o, scratch, e, w);
  EXPECT_EQ(e[0], 0);
}

// Softmax gating with a bias and a scale: p = softmax({0, ln 2, ln 5}) =
// {1/8, 2/8, 5/8}; bias {0.9, 0, 0} selects expert 0 then 2; weights
// {1/8, 5/8} x 2 = {0.25, 1.25}.
TEST(RouteExpertsTest, SoftmaxGatingWithBiasAndScale) {
  const float logits[3] = {0.0f, static_cast<float>(std::log(2.0)),
                           static_cast<float>(std::log(5.0))};
  const float bias[3] = {0.9f, 0.0f, 0.0f};
  float scratch[9];
  int32_t e[2];
  float w[2];
  RoutingOptions o;
  o.selection_bias = bias;
  o.scale = 2.0f;
  RouteExperts(logits, 1, 3, 2, o, scratch, e, w);
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(e[1], 2);
  EXPECT_NEAR(w[0], 0.25f, 1e-6);
  EXPECT_NEAR(w[1], 1.25f, 1e-6);
}

// Renormalisation divides by at least 6.103515625e-5 (2^-14).
TEST(RouteExpertsTest, RenormalisationHasAFloor) {
  const float logits[2] = {-20.0f, -30.0f};
  float scratch[6];
  int32_t e[1];
  float w[1];
  RoutingOptions o;
  o.sigmoid = true;
  o.normalize = true;
  RouteExperts(logits, 1, 2, 1, o, scratch, e, w);
  EXPECT_EQ(e[0], 0);
  // sigmoid(-20) = 2.0611536e-9.
  EXPECT_NEAR(w[0], 2.0611536e-9 / 6.103515625e-5, 1e-9);
}

}  // namespace
}  // namespace colibri::moe
