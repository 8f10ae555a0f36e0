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

}  // namespace
}  // namespace colibri::expert_node
