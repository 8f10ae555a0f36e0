// The adaptive draft length: a plain step and a verify step are measured
// before the model of the cost is trusted; then long drafts when they are
// accepted and cheap, none when they are rejected or expensive, a length that
// stops where longer steps cost more (a wider expert union), and probes; and
// the plan of a batched step's drafts, from synthetic per-token-count costs.
#include "model/speculative/draft_length.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::speculative {
namespace {

DraftLengthOptions Options(int max_draft) {
  DraftLengthOptions o;
  o.max_draft = max_draft;
  o.initial_draft = 4;
  o.probe_interval = 1000;  // out of the way unless a test wants it
  return o;
}

TEST(DraftLengthTest, MeasuresAPlainStepThenTriesTheInitialLength) {
  DraftLength length(Options(8));
  EXPECT_EQ(length.Next(), 0);
  length.OnPlainStep(0.010);
  EXPECT_EQ(length.Next(), 4);
  DraftLength small(Options(2));
  small.OnPlainStep(0.010);
  EXPECT_EQ(small.Next(), 2);  // capped by max_draft
}

TEST(DraftLengthTest, AcceptedCheapDraftsGrowToTheMaximum) {
  DraftLength length(Options(8));
  length.OnPlainStep(0.010);
  // Every draft accepted; a drafted token costs a tenth of a plain step, as
  // when the round trips dominate.
  for (int i = 0; i < 10; ++i) length.OnVerifyStep(4, 4, 0.010 + 4 * 0.001);
  EXPECT_GT(length.acceptance(), 0.9);
  EXPECT_NEAR(length.draft_seconds(), 0.001, 1e-9);
  EXPECT_EQ(length.Next(), 8);
}

TEST(DraftLengthTest, RejectedDraftsStopDrafting) {
  DraftLength length(Options(8));
  length.OnPlainStep(0.010);
  for (int i = 0; i < 10; ++i) length.OnVerifyStep(4, 0, 0.010 + 4 * 0.001);
  EXPECT_LT(length.acceptance(), 0.1);
  EXPECT_EQ(length.Next(), 0);
}

TEST(DraftLengthTest, DraftsThatCostAsMuchAsPlainStepsDoNotPay) {
  DraftLength length(Options(8));
  length.OnPlainStep(0.010);
  // Half of the drafts accepted, but each costs a full plain step (compute
  // bound, no round trips to save): 1.5 tokens for the price of 2 at best.
  for (int i = 0; i < 10; ++i) {
    length.OnVerifyStep(2, 1, 0.030);
    length.OnVerifyStep(2, 2, 0.030);
  }
  EXPECT_EQ(length.Next(), 0);
}

TEST(DraftLengthTest, MiddlingAcceptanceGivesAMiddlingLength) {
  DraftLength length(Options(16));
  length.OnPlainStep(0.010);
  // Acceptance about 0.5 and cheap drafts: the yield 1 + a + a^2 + ...
  // saturates near 2, so a long draft buys little over a short one.
  for (int i = 0; i < 20; ++i) length.OnVerifyStep(2, 1, 0.010 + 2 * 0.002);
  const int k = length.Next();
  EXPECT_GT(k, 0);
  EXPECT_LT(k, 16);
}

TEST(DraftLengthTest, WithoutAdaptationEveryStepDraftsTheMaximum) {
  DraftLengthOptions o = Options(6);
  o.adaptive = false;
  DraftLength length(o);
  EXPECT_EQ(length.Next(), 6);
  length.OnPlainStep(0.010);
  for (int i = 0; i < 10; ++i) length.OnVerifyStep(6, 0, 0.100);
  EXPECT_EQ(length.Next(), 6);
}

TEST(DraftLengthTest, ProbesAlternateWithTheChoice) {
  DraftLengthOptions o = Options(8);
  o.probe_interval = 3;
  DraftLength length(o);
  length.OnPlainStep(0.010);
  for (int i = 0; i < 10; ++i) length.OnVerifyStep(4, 0, 0.014);
  // Drafting does not pay: every third step drafts anyway.
  EXPECT_EQ(length.Next(), 0);
  EXPECT_EQ(length.Next(), 0);
  EXPECT_EQ(length.Next(), 4);
  DraftLength good(o);
  good.OnPlainStep(0.010);
  for (int i = 0; i < 10; ++i) good.OnVerifyStep(4, 4, 0.014);
  // Drafting pays: every third step is plain, to keep t1 measured.
  EXPECT_EQ(good.Next(), 8);
  EXPECT_EQ(good.Next(), 8);
  EXPECT_EQ(good.Next(), 0);
}

// Steps of up to 3 tokens cost about a plain step (the drafts route to
// experts the step reads anyway); from 5 tokens on, every token adds a wide
// slice of new experts. All drafts are accepted, yet the length stays at 2.
TEST(DraftLengthTest, StopsWhereLongerStepsCostMoreThanTheySave) {
  DraftLength length(Options(8));
  length.OnPlainStep(0.010);
  for (int i = 0; i < 10; ++i) {
    length.OnVerifyStep(2, 2, 0.011);
    length.OnVerifyStep(4, 4, 0.050);
  }
  EXPECT_GT(length.acceptance(), 0.9);
  EXPECT_EQ(length.Next(), 2);
}

// T(n) of a round-trip-bound step: 10 ms, plus 1 ms per token.
StepCost LinearCost(int up_to) {
  StepCost cost;
  for (int n = 1; n <= up_to; ++n) cost.Observe(n, 0.010 + 0.001 * n);
  return cost;
}

TEST(PlanDraftsTest, NothingMeasuredPlansNothing) {
  const StepCost cost;
  const std::vector<DraftCandidate> c = {{0.9, 8}, {0.9, 8}};
  EXPECT_EQ(PlanDrafts(cost, 2, 2, c, 100), std::vector<int>({0, 0}));
}

TEST(PlanDraftsTest, DraftsGoToTheSequencesThatAcceptThem) {
  const StepCost cost = LinearCost(40);
  // Worth 0.9^j against 0.1^j: the second sequence's drafts do not pay for
  // their millisecond; the first's all do, up to its cap.
  const std::vector<DraftCandidate> c = {{0.9, 8}, {0.1, 8}};
  EXPECT_EQ(PlanDrafts(cost, 2, 2, c, 100), std::vector<int>({8, 0}));
  // Both accept: both draft.
  const std::vector<DraftCandidate> both = {{0.9, 8}, {0.9, 8}};
  const std::vector<int> plan = PlanDrafts(cost, 2, 2, both, 100);
  EXPECT_GT(plan[0], 0);
  EXPECT_EQ(plan[0], plan[1]);
}

TEST(PlanDraftsTest, TheBudgetAndEachCapHold) {
  const StepCost cost = LinearCost(40);
  const std::vector<DraftCandidate> c = {{0.95, 8}, {0.95, 2}, {0.95, 0}};
  std::vector<int> plan = PlanDrafts(cost, 3, 3, c, 5);
  EXPECT_EQ(std::accumulate(plan.begin(), plan.end(), 0), 5);
  EXPECT_LE(plan[1], 2);
  EXPECT_EQ(plan[2], 0);
  plan = PlanDrafts(cost, 3, 3, c, 0);
  EXPECT_EQ(plan, std::vector<int>({0, 0, 0}));
}

// A cold tier: up to 4 tokens, the step reads what a plain step reads; each
// token beyond adds 5 ms of disk misses. With acceptance 0.9 a single
// sequence drafts 3 (4 tokens), not its cap of 8.
TEST(PlanDraftsTest, AWideningExpertUnionStopsTheDraft) {
  StepCost cost;
  for (int n = 1; n <= 12; ++n) cost.Observe(n, n <= 4 ? 0.010 : 0.010 + 0.005 * (n - 4));
  const DraftCandidate one{0.9, 8};
  EXPECT_EQ(PlanDrafts(cost, 1, 1, {&one, 1}, 64), std::vector<int>({3}));
  // Compute-bound (every token costs a plain step): no draft pays.
  StepCost bound;
  for (int n = 1; n <= 12; ++n) bound.Observe(n, 0.010 * n);
  EXPECT_EQ(PlanDrafts(bound, 1, 1, {&one, 1}, 64), std::vector<int>({0}));
}

}  // namespace
}  // namespace colibri::speculative
