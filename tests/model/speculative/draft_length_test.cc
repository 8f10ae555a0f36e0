// The adaptive draft length: a plain step and a verify step are measured
// before the model of the cost is trusted; then long drafts when they are
// accepted and cheap, none when they are rejected or expensive, and probes.
#include "model/speculative/draft_length.h"

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

}  // namespace
}  // namespace colibri::speculative
