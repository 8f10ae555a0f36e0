// The parts of the generation loop that need no model: stop strings held back
// and cut, and the log-probabilities reported with each token.
#include "coordinator/generation/generation.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

// Feeds `pieces` and returns what each Push released.
std::vector<std::string> Released(StopStringFilter& filter,
                                  const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& p : pieces) out.push_back(filter.Push(p));
  return out;
}

TEST(StopStringFilterTest, WithoutStopStringsEverythingIsReleasedAtOnce) {
  StopStringFilter filter({});
  EXPECT_EQ(Released(filter, {"Hello", " world"}), (std::vector<std::string>{"Hello", " world"}));
  EXPECT_EQ(filter.Flush(), "");
  EXPECT_FALSE(filter.stopped());
}

TEST(StopStringFilterTest, APossibleStartIsHeldUntilTheNextPieceDecides) {
  StopStringFilter filter({"END"});
  EXPECT_EQ(filter.Push("the E"), "the ");
  EXPECT_EQ(filter.Push("N"), "");
  EXPECT_EQ(filter.Push("ormous"), "ENormous");
  EXPECT_FALSE(filter.stopped());
  EXPECT_EQ(filter.Push(" tail E"), " tail ");
  EXPECT_EQ(filter.Flush(), "E");
  EXPECT_EQ(filter.text(), "the ENormous tail E");
}

TEST(StopStringFilterTest, AStopStringSplitOverPiecesNeverAppears) {
  StopStringFilter filter({"</s>", "\n\n"});
  EXPECT_EQ(Released(filter, {"a<", "/", "s", ">bc"}), (std::vector<std::string>{"a", "", "", ""}));
  EXPECT_TRUE(filter.stopped());
  EXPECT_EQ(filter.text(), "a");
  EXPECT_EQ(filter.Push("more"), "");
  EXPECT_EQ(filter.Flush(), "");
}

TEST(StopStringFilterTest, TheEarliestOfSeveralStopStringsWins) {
  StopStringFilter filter({"cd", "b"});
  EXPECT_EQ(filter.Push("abcd"), "a");
  EXPECT_TRUE(filter.stopped());
  EXPECT_EQ(filter.text(), "a");
}

TEST(StopStringFilterTest, AStopStringInsideOnePieceCutsIt) {
  StopStringFilter filter({"STOP", ""});
  EXPECT_EQ(filter.Push("xxSTOPyy"), "xx");
  EXPECT_TRUE(filter.stopped());
}

TEST(StopStringFilterTest, OverlappingPrefixesAreHeldFromTheEarliestStart) {
  StopStringFilter filter({"aab"});
  EXPECT_EQ(filter.Push("xa"), "x");
  EXPECT_EQ(filter.Push("a"), "");
  EXPECT_EQ(filter.Push("a"), "a");  // "aaa": only the last "aa" may still start "aab"
  EXPECT_EQ(filter.Push("b"), "");
  EXPECT_TRUE(filter.stopped());
  EXPECT_EQ(filter.text(), "xa");
}

TEST(LogSoftmaxTest, MatchesTheDefinitionAndRanksTheTopTokens) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  double sum = 0;
  for (float x : logits) sum += std::exp(x);
  std::vector<TokenLogprob> top;
  const float lp = LogSoftmaxAt(logits, 4, 3, &top);
  EXPECT_NEAR(lp, 0.5 - std::log(sum), 1e-5);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);  // tie with 3: lower id first
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 0);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(sum), 1e-5);
  EXPECT_NEAR(top[2].logprob, 1.0 - std::log(sum), 1e-5);
}

TEST(LogSoftmaxTest, NanCountsAsMinusInfinityAndTopIsCappedByTheVocabulary) {
  const std::vector<float> logits = {NAN, 0.0f};
  std::vector<TokenLogprob> top;
  EXPECT_NEAR(LogSoftmaxAt(logits, 1, 5, &top), 0.0, 1e-6);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_TRUE(std::isinf(top[1].logprob) && top[1].logprob < 0);
  EXPECT_TRUE(std::isinf(LogSoftmaxAt(logits, 0, 0, nullptr)));
}

}  // namespace
}  // namespace colibri::coordinator
