// Prompt lookup: the longest suffix (3, 2, then 1 tokens) that occurred
// before, its most recent earlier occurrence, and the tokens that followed it.
#include "model/speculative/ngram_drafter.h"

#include <vector>

#include "gtest/gtest.h"

namespace colibri::speculative {
namespace {

std::vector<int32_t> Propose(NgramDrafter& drafter, int max_tokens) {
  std::vector<int32_t> draft = {99};  // replaced, never appended to
  drafter.Propose(max_tokens, &draft);
  return draft;
}

TEST(NgramDrafterTest, NothingToMatchGivesNoDraft) {
  NgramDrafter drafter;
  EXPECT_TRUE(Propose(drafter, 4).empty());
  drafter.Accept(std::vector<int32_t>{1, 2, 3, 4});
  EXPECT_TRUE(Propose(drafter, 4).empty());  // 4 never occurred before
}

TEST(NgramDrafterTest, ContinuesAfterTheEarlierOccurrenceOfTheSuffix) {
  NgramDrafter drafter;
  drafter.Accept(std::vector<int32_t>{5, 6, 7, 8, 9, 1, 5, 6, 7});
  EXPECT_EQ(Propose(drafter, 3), (std::vector<int32_t>{8, 9, 1}));
  // The continuation may run into the suffix itself, up to the end.
  EXPECT_EQ(Propose(drafter, 10), (std::vector<int32_t>{8, 9, 1, 5, 6, 7}));
  EXPECT_TRUE(Propose(drafter, 0).empty());
}

TEST(NgramDrafterTest, TheLongestSuffixWinsOverAMoreRecentShorterOne) {
  NgramDrafter drafter;
  // "1 2 3" occurred once, followed by 40; "3" alone occurred later, followed
  // by 50; the 3-gram match is preferred.
  drafter.Accept(std::vector<int32_t>{1, 2, 3, 40, 3, 50, 1, 2, 3});
  EXPECT_EQ(Propose(drafter, 1), (std::vector<int32_t>{40}));
}

TEST(NgramDrafterTest, FallsBackToShorterSuffixes) {
  NgramDrafter drafter;
  drafter.Accept(std::vector<int32_t>{7, 2, 3, 60, 9, 9, 3});
  EXPECT_EQ(Propose(drafter, 2), (std::vector<int32_t>{60, 9}));  // "3" only
  drafter.Accept(std::vector<int32_t>{8, 2, 3});
  EXPECT_EQ(Propose(drafter, 1), (std::vector<int32_t>{60}));  // "2 3"
}

TEST(NgramDrafterTest, TheMostRecentOccurrenceWins) {
  NgramDrafter drafter;
  drafter.Accept(std::vector<int32_t>{1, 2, 10, 1, 2, 20, 1, 2});
  EXPECT_EQ(Propose(drafter, 1), (std::vector<int32_t>{20}));
  // Tokens accepted one at a time index the same way.
  for (int32_t t : {20, 1, 2}) drafter.Accept({&t, 1});
  EXPECT_EQ(Propose(drafter, 2), (std::vector<int32_t>{20, 1}));
}

TEST(NgramDrafterTest, ARunOfOneTokenDraftsMoreOfIt) {
  NgramDrafter drafter;
  drafter.Accept(std::vector<int32_t>{4, 4, 4, 4});
  EXPECT_EQ(Propose(drafter, 5), (std::vector<int32_t>{4}));  // after the earlier "4 4 4"
}

}  // namespace
}  // namespace colibri::speculative
