#include "expert_node/node_config.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace colibri::expert_node {
namespace {

TEST(NodeConfigTest, ParsesByteSizes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("4G"), 4ull << 30);
  EXPECT_EQ(*ParseByteSize("4g"), 4ull << 30);
  EXPECT_EQ(*ParseByteSize("4GiB"), 4ull << 30);
  EXPECT_EQ(*ParseByteSize("64KB"), 64ull << 10);
  EXPECT_EQ(*ParseByteSize("1T"), 1ull << 40);
  EXPECT_EQ(*ParseByteSize("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  for (const char* bad : {"", "G", "-1", "4X", "1e3", "nan", "99999999999999999999",
                          "20000000T", "1.2.3M"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

TEST(NodeConfigTest, AdvertiseAddressNeedsADiallableHostAndPort) {
  for (const char* good :
       {"node1.lab:7070", "10.0.0.11:7070", "[fd00::11]:7070", "a:1", "b:65535"}) {
    EXPECT_TRUE(ValidateAdvertiseAddress(good).ok()) << good;
  }
  for (const char* bad : {"", "node1", ":7070", "node1:", "node1:0", "node1:65536", "node1:x",
                          "0.0.0.0:7070", "[::]:7070", "fd00::11:7070", "[fd00::11:7070"}) {
    const absl::Status status = ValidateAdvertiseAddress(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(status.message(), "--advertise")) << bad;
  }
}

}  // namespace
}  // namespace colibri::expert_node
