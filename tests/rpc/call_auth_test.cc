// The token check of MakeTokenCheckedServerCredentials on a real server.
#include "rpc/call_auth.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "colibri/v1/inference.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "rpc/client_support.h"
#include "tests/support/raw_call.h"

namespace colibri::rpc {
namespace {

using testing::CallRaw;

const char kToken[] = "call-auth-test-token-0123456789abcdef";

TEST(CallAuthTest, CallAllowedNeedsTheTokenExceptForOpenMethods) {
  const std::vector<std::string> open = DefaultOpenMethodPrefixes();
  EXPECT_TRUE(CallAllowed("/a.B/C", "", "", open));  // no token configured
  EXPECT_FALSE(CallAllowed("/a.B/C", "", kToken, open));
  EXPECT_FALSE(CallAllowed("/a.B/C", kToken, kToken, open));  // no "Bearer "
  EXPECT_FALSE(CallAllowed("/a.B/C", std::string("Bearer ") + kToken + "x", kToken, open));
  EXPECT_TRUE(CallAllowed("/a.B/C", std::string("Bearer ") + kToken, kToken, open));
  EXPECT_TRUE(CallAllowed("/grpc.health.v1.Health/Check", "", kToken, open));
  EXPECT_FALSE(CallAllowed("/grpc.health.v1.HealthX/Check", "", kToken, open));
}

// Plaintext: the check runs in gRPC's auth filter, before the handler, so a
// method the service does not implement is UNAUTHENTICATED without the token
// (UNIMPLEMENTED with it), and health checks need no token.
TEST(CallAuthTest, PlaintextCallsAreCheckedBeforeTheServerLooksAtThem) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeTokenCheckedServerCredentials(ServerTlsFiles(), kToken);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  v1::Inference::CallbackService unimplemented;  // every method UNIMPLEMENTED
  builder.RegisterService(&unimplemented);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", *credentials, &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(port, 0);
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  const std::string bearer = std::string("Bearer ") + kToken;
  EXPECT_EQ(CallRaw(&stub, "/colibri.v1.Inference/Tokenize", "x", "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CallRaw(&stub, "/colibri.v1.Inference/Tokenize", "x", "Bearer wrong").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(CallRaw(&stub, "/colibri.v1.Inference/Tokenize", "x", bearer).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  absl::StatusOr<bool> serving = CheckHealth(&stub, &context, "", "test server");
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  server->Shutdown();
}

TEST(CallAuthTest, WithoutATokenTheCredentialsArePlain) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeTokenCheckedServerCredentials(ServerTlsFiles(), "");
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  ServerTlsFiles half;
  half.cert_file = "/nonexistent.pem";
  EXPECT_EQ(MakeTokenCheckedServerCredentials(half, kToken).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri::rpc
