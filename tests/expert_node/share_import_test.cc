// A node's own share (expert_node/share_import.h) against an argmax of the
// rendezvous scores computed here.
#include "expert_node/share_import.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "placement/placement.h"
#include "tests/support/patched_gguf.h"

namespace colibri::expert_node {
namespace {

TEST(ShareImportTest, ShareIsTheExpertsWhereTheNodeScoresHighest) {
  const std::vector<int> experts = {8, 0, 8, 8};
  const std::vector<std::string> ids = {"colibri-node-0", "colibri-node-1", "colibri-node-2"};
  size_t total = 0;
  for (const std::string& self : ids) {
    absl::StatusOr<std::vector<std::pair<int, int>>> share = ShareOf(experts, ids, self, 1);
    ASSERT_TRUE(share.ok()) << share.status();
    std::vector<std::pair<int, int>> expected;
    for (int l = 0; l < static_cast<int>(experts.size()); ++l) {
      for (int e = 0; e < experts[l]; ++e) {
        std::string best;
        double best_score = -1;
        for (const std::string& id : ids) {
          placement::PlacementNode node;
          node.id = id;
          const double score = placement::RendezvousScore(node, l, e);
          if (score > best_score) {
            best_score = score;
            best = id;
          }
        }
        if (best == self) expected.emplace_back(l, e);
      }
    }
    EXPECT_EQ(*share, expected) << self;
    total += share->size();
  }
  EXPECT_EQ(total, 24u);
  // Two copies: every expert on two of the three.
  size_t copies = 0;
  for (const std::string& self : ids) copies += ShareOf(experts, ids, self, 2)->size();
  EXPECT_EQ(copies, 48u);
}

TEST(ShareImportTest, BadMembersAreInvalidArgument) {
  const std::vector<int> experts = {8};
  EXPECT_TRUE(absl::IsInvalidArgument(ShareOf(experts, {"a", "b"}, "c", 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ShareOf(experts, {"a", "a"}, "a", 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ShareOf(experts, {"a", "b"}, "a", 3).status()));
  EXPECT_FALSE(ShareImportRequest("/nonexistent.gguf", {"a"}, "a", 1).ok());
}

// The node opens the GGUF to count its experts: a header count the tensors
// cannot back is an error, not an allocation.
TEST(ShareImportTest, AbsurdBlockCountIsInvalidArgument) {
  const std::string path = testing::PatchedFixture("qwen2moe-tiny-q8_0.gguf", "qwen2moe.block_count",
                                                    2147483647, "share-block-count.gguf");
  if (path.empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const absl::StatusOr<v1::ImportRequest> request = ShareImportRequest(path, {"a"}, "a", 1);
  ASSERT_TRUE(absl::IsInvalidArgument(request.status())) << request.status();
  EXPECT_THAT(request.status().message(),
              ::testing::HasSubstr("block_count 2147483647 but the file has tensors for 3 layers"));
}

}  // namespace
}  // namespace colibri::expert_node
