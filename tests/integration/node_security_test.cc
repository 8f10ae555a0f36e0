// A real colibri-expert-node process with a token, attacked by callers
// without one.
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/node_process.h"

namespace colibri {
namespace {

using testing::NodeProcess;

const char kToken[] = "node-security-test-token-0123456789";

// The peak resident set (VmHWM) of process `pid` in KiB, -1 when unreadable.
int64_t PeakRssKiB(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      int64_t kib = -1;
      fields >> kib;
      return kib;
    }
  }
  return -1;
}

// One unary call of `method` with `body` as the raw request bytes.
grpc::Status CallRaw(grpc::GenericStub* stub, const std::string& method, grpc::ByteBuffer* body,
                     const std::string& token) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  grpc::ByteBuffer response;
  grpc::Status status;
  bool done = false;
  std::mutex mu;
  std::condition_variable cv;
  stub->UnaryCall(&context, method, grpc::StubOptions(), body, &response, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

// Four 100 MiB requests without the token used to be received and parsed
// before the handler refused them (RSS grew by GBs). The token is now checked
// on the call's metadata, before the body is read: the node's peak RSS stays
// put. (A memory bound, not a timing one.)
TEST(NodeSecurityTest, UnauthenticatedLargeRequestsDoNotGrowTheNodesMemory) {
  const std::string dir = testing::MakeTempDir("node-security");
  ASSERT_FALSE(dir.empty());
  const std::string token_file = dir + "/token";
  std::ofstream(token_file) << kToken << "\n";
  NodeProcess node(dir + "/data", "secure-node", {"--auth-token-file", token_file});
  std::string error;
  ASSERT_TRUE(node.Start(0, &error)) << error;
  auto channel = grpc::CreateChannel(node.address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  // A small authenticated call first, so that the node's baseline includes a
  // served call.
  {
    grpc::Slice empty("");
    grpc::ByteBuffer body(&empty, 1);
    const grpc::Status s = CallRaw(&stub, "/colibri.v1.ExpertService/NodeStats", &body, kToken);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const int64_t before = PeakRssKiB(node.pid());
  ASSERT_GT(before, 0);

  const std::string payload(size_t{100} << 20, '\x01');
  for (const char* method : {"ComputeLayer", "Import", "Inventory", "ComputeLayer"}) {
    grpc::Slice slice(payload);
    grpc::ByteBuffer body(&slice, 1);
    const grpc::Status s =
        CallRaw(&stub, std::string("/colibri.v1.ExpertService/") + method, &body, "");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << method << ": " << s.error_message();
  }
  const int64_t after = PeakRssKiB(node.pid());
  std::printf("node VmHWM: %lld KiB before, %lld KiB after 4 unauthenticated 100 MiB requests\n",
              static_cast<long long>(before), static_cast<long long>(after));
  EXPECT_LT(after - before, 50 * 1024)
      << "the node's peak RSS grew by " << (after - before) << " KiB";
  // The node still serves callers with the token.
  grpc::Slice empty("");
  grpc::ByteBuffer body(&empty, 1);
  EXPECT_TRUE(CallRaw(&stub, "/colibri.v1.ExpertService/NodeStats", &body, kToken).ok());
}

}  // namespace
}  // namespace colibri
