#include "expert_node/node_config.h"

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

}  // namespace
}  // namespace colibri::expert_node
