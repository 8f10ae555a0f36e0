// The node's default id (expert_node/node_identity.h).
#include "expert_node/node_identity.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node {
namespace {

using testing::TempDir;

TEST(NodeIdentityTest, CreatedOnceThenStable) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/data";  // created by the call
  absl::StatusOr<std::string> first = LoadOrCreateNodeId(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(first->size(), 9u);
  EXPECT_EQ(first->find_first_of(" \n"), std::string::npos);
  absl::StatusOr<std::string> again = LoadOrCreateNodeId(dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
}

TEST(NodeIdentityTest, TwoDataFoldersGetDifferentIds) {
  TempDir one, two;
  absl::StatusOr<std::string> a = LoadOrCreateNodeId(one.path());
  absl::StatusOr<std::string> b = LoadOrCreateNodeId(two.path());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

TEST(NodeIdentityTest, RecordedIdIsUsedAndGarbageRejected) {
  TempDir tmp;
  const std::string dir = tmp.path();
  std::ofstream(dir + "/NODE_ID") << "  rack2-node7\n";
  absl::StatusOr<std::string> id = LoadOrCreateNodeId(dir);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "rack2-node7");
  std::ofstream(dir + "/NODE_ID") << "two words\n";
  EXPECT_EQ(LoadOrCreateNodeId(dir).status().code(), absl::StatusCode::kInvalidArgument);
  std::ofstream(dir + "/NODE_ID") << "\n";
  EXPECT_EQ(LoadOrCreateNodeId(dir).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NodeIdentityTest, IdsAreShortWordsOfASafeCharset) {
  EXPECT_TRUE(ValidateNodeId("rack2-node7.a_b").ok());
  EXPECT_TRUE(ValidateNodeId(std::string(kMaxNodeIdBytes, 'a')).ok());
  for (const std::string& bad :
       {std::string(), std::string(kMaxNodeIdBytes + 1, 'a'), std::string("a/b"),
        std::string("a\x1b[0m"), std::string("caf\xc3\xa9")}) {
    absl::Status s = ValidateNodeId(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(std::string(s.message()).find('\x1b'), std::string::npos);
  }
  TempDir tmp;
  std::ofstream(tmp.path() + "/NODE_ID") << std::string(1 << 20, 'n');
  absl::StatusOr<std::string> id = LoadOrCreateNodeId(tmp.path());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("NODE_ID is damaged"), std::string::npos) << id.status();
  EXPECT_LT(id.status().message().size(), 500u);
}

}  // namespace
}  // namespace colibri::expert_node
