// The draft policy: steps of the decoding tokens alone are measured before
// the model of the cost is trusted; then long drafts when they are accepted
// and cheap, none when they are rejected or expensive, a length that stops
// where longer steps cost more (a wider expert union), probes both ways; and
// the plan of a batched step's drafts, from synthetic per-token-count costs.
#include "model/speculative/draft_planner.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::speculative {
namespace {

DraftPlannerOptions Options(int max_draft) {
  DraftPlannerOptions o;
  o.max_draft = max_draft;
  o.initial_draft = 4;
  o.probe_interval = 1000;  // out of the way unless a test wants it
  return o;
}

// The plan for one decoding sequence of acceptance `a` that may carry `most`
// drafts.
int PlanOne(DraftPlanner& planner, double a, int most, int* undrafted) {
  const DraftCandidate c{a, most};
  return planner.Plan({&c, 1}, {undrafted, 1}, 64)[0];
}

TEST(DraftAcceptanceTest, DecayedCountsFollowTheRecentSteps) {
  DraftAcceptance acceptance;
  EXPECT_DOUBLE_EQ(acceptance.rate(), 0.5);  // the prior
  for (int i = 0; i < 10; ++i) acceptance.Observe(4, false);
  EXPECT_GT(acceptance.rate(), 0.9);
  for (int i = 0; i < 30; ++i) acceptance.Observe(0, true);
  EXPECT_LT(acceptance.rate(), 0.2);
}

TEST(DraftPlannerTest, MeasuresAPlainStepThenTriesTheInitialLength) {
  int undrafted = 0;
  DraftPlanner planner(Options(8));
  EXPECT_EQ(PlanOne(planner, 0.5, 8, &undrafted), 0);
  planner.Observe(1, 0.010);
  EXPECT_EQ(PlanOne(planner, 0.5, 8, &undrafted), 4);
  DraftPlanner small(Options(2));
  small.Observe(1, 0.010);
  EXPECT_EQ(PlanOne(small, 0.5, 2, &undrafted), 2);  // capped by max_draft
  // Two decoding sequences: a step of two tokens is measured first.
  const std::vector<DraftCandidate> two = {{0.5, 8}, {0.5, 8}};
  std::vector<int> counts(2, 0);
  EXPECT_EQ(planner.Plan(two, absl::MakeSpan(counts), 64), std::vector<int>({0, 0}));
  planner.Observe(2, 0.011);
  EXPECT_EQ(planner.Plan(two, absl::MakeSpan(counts), 64), std::vector<int>({4, 4}));
}

TEST(DraftPlannerTest, AcceptedCheapDraftsGrowToTheMaximum) {
  int undrafted = 0;
  DraftPlanner planner(Options(8));
  planner.Observe(1, 0.010);
  // A drafted token costs a tenth of a plain step, as when the round trips
  // dominate.
  for (int i = 0; i < 10; ++i) planner.Observe(5, 0.010 + 4 * 0.001);
  EXPECT_EQ(PlanOne(planner, 0.95, 8, &undrafted), 8);
}

TEST(DraftPlannerTest, RejectedDraftsStopDrafting) {
  int undrafted = 0;
  DraftPlanner planner(Options(8));
  planner.Observe(1, 0.010);
  for (int i = 0; i < 10; ++i) planner.Observe(5, 0.010 + 4 * 0.001);
  EXPECT_EQ(PlanOne(planner, 0.05, 8, &undrafted), 0);
  EXPECT_EQ(undrafted, 1);
}

TEST(DraftPlannerTest, DraftsThatCostAsMuchAsPlainStepsDoNotPay) {
  int undrafted = 0;
  DraftPlanner planner(Options(8));
  planner.Observe(1, 0.010);
  // Three in four drafts accepted, but each costs a full plain step (compute
  // bound, no round trips to save).
  for (int i = 0; i < 10; ++i) planner.Observe(3, 0.030);
  EXPECT_EQ(PlanOne(planner, 0.75, 8, &undrafted), 0);
}

TEST(DraftPlannerTest, MiddlingAcceptanceGivesAMiddlingLength) {
  int undrafted = 0;
  DraftPlanner planner(Options(16));
  planner.Observe(1, 0.010);
  // Acceptance 0.5 and cheap drafts: the yield 1 + a + a^2 + ... saturates
  // near 2, so a long draft buys little over a short one.
  for (int i = 0; i < 20; ++i) planner.Observe(3, 0.010 + 2 * 0.002);
  const int k = PlanOne(planner, 0.5, 16, &undrafted);
  EXPECT_GT(k, 0);
  EXPECT_LT(k, 16);
}

TEST(DraftPlannerTest, WithoutAdaptationEverySequenceDraftsItsCap) {
  DraftPlannerOptions o = Options(6);
  o.adaptive = false;
  DraftPlanner planner(o);
  int undrafted = 0;
  EXPECT_EQ(PlanOne(planner, 0.5, 6, &undrafted), 6);
  planner.Observe(1, 0.010);
  for (int i = 0; i < 10; ++i) planner.Observe(7, 0.100);
  EXPECT_EQ(PlanOne(planner, 0.01, 6, &undrafted), 6);
  // The budget goes to the earlier sequences first.
  const std::vector<DraftCandidate> two = {{0.5, 6}, {0.5, 6}};
  std::vector<int> counts(2, 0);
  EXPECT_EQ(planner.Plan(two, absl::MakeSpan(counts), 8), std::vector<int>({6, 2}));
}

TEST(DraftPlannerTest, ProbesAlternateWithTheChoice) {
  DraftPlannerOptions o = Options(8);
  o.probe_interval = 3;
  DraftPlanner bad(o);
  bad.Observe(1, 0.010);
  for (int i = 0; i < 10; ++i) bad.Observe(5, 0.014);
  // Drafting does not pay: plain, plain, the planner's plain probe, then the
  // sequence left without drafts for three steps drafts anyway.
  int undrafted = 0;
  EXPECT_EQ(PlanOne(bad, 0.05, 8, &undrafted), 0);
  EXPECT_EQ(PlanOne(bad, 0.05, 8, &undrafted), 0);
  EXPECT_EQ(PlanOne(bad, 0.05, 8, &undrafted), 0);
  EXPECT_EQ(PlanOne(bad, 0.05, 8, &undrafted), 4);
  DraftPlanner good(o);
  good.Observe(1, 0.010);
  for (int i = 0; i < 10; ++i) good.Observe(9, 0.014);
  // Drafting pays: every third step is plain, to keep T(1) measured.
  undrafted = 0;
  EXPECT_EQ(PlanOne(good, 0.95, 8, &undrafted), 8);
  EXPECT_EQ(PlanOne(good, 0.95, 8, &undrafted), 8);
  EXPECT_EQ(PlanOne(good, 0.95, 8, &undrafted), 0);
  EXPECT_EQ(PlanOne(good, 0.95, 8, &undrafted), 8);
}

// Steps of up to 3 tokens cost about a plain step (the drafts route to
// experts the step reads anyway); from 5 tokens on, every token adds a wide
// slice of new experts. The drafts are accepted, yet the length stays at 2.
TEST(DraftPlannerTest, StopsWhereLongerStepsCostMoreThanTheySave) {
  int undrafted = 0;
  DraftPlanner planner(Options(8));
  planner.Observe(1, 0.010);
  for (int i = 0; i < 10; ++i) {
    planner.Observe(3, 0.011);
    planner.Observe(5, 0.050);
  }
  EXPECT_EQ(PlanOne(planner, 0.95, 8, &undrafted), 2);
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
