// DNS discovery of expert nodes (coordinator/cluster/node_discovery.h).
#include "coordinator/cluster/node_discovery.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

TEST(NodeDiscoveryTest, LiteralsResolveToThemselves) {
  absl::StatusOr<std::vector<std::string>> v4 = ResolveNodeAddresses("127.0.0.1:7100");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(*v4, std::vector<std::string>{"127.0.0.1:7100"});
  absl::StatusOr<std::vector<std::string>> v6 = ResolveNodeAddresses("[::1]:7100");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(*v6, std::vector<std::string>{"[::1]:7100"});
}

TEST(NodeDiscoveryTest, LocalhostGivesLoopbackSortedAndDistinct) {
  absl::StatusOr<std::vector<std::string>> a = ResolveNodeAddresses("localhost:7101");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_FALSE(a->empty());
  EXPECT_TRUE(std::is_sorted(a->begin(), a->end()));
  EXPECT_EQ(std::adjacent_find(a->begin(), a->end()), a->end());
  for (const std::string& address : *a) {
    EXPECT_TRUE(address == "127.0.0.1:7101" || address == "[::1]:7101") << address;
  }
}

TEST(NodeDiscoveryTest, MalformedArgumentsAreRejected) {
  for (const char* bad : {"localhost", ":7100", "localhost:", "localhost:0", "localhost:65536",
                          "localhost:port"}) {
    absl::StatusOr<std::vector<std::string>> r = ResolveNodeAddresses(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace colibri::coordinator
