#include "rpc/server_support.h"

#include <string>

#include "gtest/gtest.h"

namespace colibri::rpc {
namespace {

TEST(ServerSupportTest, RecognisesLoopbackAddresses) {
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

TEST(ServerSupportTest, RefusesTheNetworkWithoutATokenUnlessInsecure) {
  EXPECT_TRUE(CheckListenAllowed("127.0.0.1:7070", false, false).ok());
  EXPECT_TRUE(CheckListenAllowed("0.0.0.0:7070", true, false).ok());
  EXPECT_TRUE(CheckListenAllowed("0.0.0.0:7070", false, true).ok());
  const absl::Status refused = CheckListenAllowed("0.0.0.0:7070", false, false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("0.0.0.0:7070"), std::string::npos) << refused;
}

TEST(ServerSupportTest, BoundAddressOfUnixSocketsIsTheSocket) {
  EXPECT_EQ(BoundAddress("127.0.0.1:0", 4242), "127.0.0.1:4242");
  EXPECT_EQ(BoundAddress("[::1]:0", 4242), "[::1]:4242");
  EXPECT_EQ(BoundAddress("unix:/tmp/n.sock", 1), "unix:/tmp/n.sock");
  EXPECT_EQ(BoundAddress("unix-abstract:node", 1), "unix-abstract:node");
}

TEST(ServerSupportTest, RejectsHalfATlsKeyPair) {
  ServerTlsFiles tls;
  tls.cert_file = "cert.pem";
  EXPECT_EQ(MakeServerCredentials(tls).status().code(), absl::StatusCode::kInvalidArgument);
  ServerTlsFiles ca_only;
  ca_only.ca_file = "ca.pem";
  EXPECT_EQ(MakeServerCredentials(ca_only).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MakeServerCredentials(ServerTlsFiles()).ok());
}

}  // namespace
}  // namespace colibri::rpc
