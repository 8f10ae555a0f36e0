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

TEST(NodeConfigTest, RecognisesLoopbackAddresses) {
  for (const char* a : {"127.0.0.1:0", "127.1.2.3:7070", "localhost:7070", "[::1]:7070",
                        "unix:/tmp/node.sock", "ipv4:127.0.0.1:1"}) {
    EXPECT_TRUE(IsLoopbackListenAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:0", "[::]:7070", "10.0.0.5:7070", "node1:7070",
                        "128.0.0.1:1", "127.0.0.1.5:1", ":7070", "127.0.0:1"}) {
    EXPECT_FALSE(IsLoopbackListenAddress(a)) << a;
  }
  EXPECT_EQ(ListenHost("127.0.0.1:0"), "127.0.0.1");
  EXPECT_EQ(ListenHost("[::1]:0"), "[::1]");
}

}  // namespace
}  // namespace colibri::expert_node
