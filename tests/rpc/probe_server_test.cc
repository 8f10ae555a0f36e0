#include "rpc/probe_server.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace colibri::rpc {
namespace {

using ::testing::HasSubstr;

struct Reply {
  int status = 0;
  std::string body;
};

Reply Get(const ProbeServer& server, const std::string& path) {
  const std::string& address = server.address();
  httplib::Client client(address.substr(0, address.rfind(':')),
                         std::stoi(address.substr(address.rfind(':') + 1)));
  httplib::Result res = client.Get(path.c_str());
  if (!res) return Reply{-1, absl::StrCat("no reply: ", httplib::to_string(res.error()))};
  return Reply{res->status, res->body};
}

std::unique_ptr<ProbeServer> StartOrDie(bool metrics) {
  ProbeServer::Options options;
  options.listen = "127.0.0.1:0";
  options.metrics = metrics;
  absl::StatusOr<std::unique_ptr<ProbeServer>> server = ProbeServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(ProbeServerTest, StartingUntilMarkedStarted) {
  std::unique_ptr<ProbeServer> server = StartOrDie(/*metrics=*/true);
  ASSERT_NE(server, nullptr);
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
    const Reply r = Get(*server, path);
    EXPECT_EQ(r.status, 503) << path;
    EXPECT_EQ(r.body, "starting\n") << path;
  }
  server->MarkStarted(nullptr, [] { return std::string("colibri_up 1\n"); });
  EXPECT_EQ(Get(*server, "/healthz").status, 200);
  EXPECT_EQ(Get(*server, "/readyz").body, "ready\n");
  EXPECT_EQ(Get(*server, "/metrics").body, "colibri_up 1\n");
}

TEST(ProbeServerTest, ReadinessFollowsTheCheckAndSaysWhy) {
  std::unique_ptr<ProbeServer> server = StartOrDie(/*metrics=*/false);
  ASSERT_NE(server, nullptr);
  std::atomic<bool> healthy_node{false};
  server->MarkStarted(
      [&healthy_node] {
        return healthy_node.load() ? absl::OkStatus()
                                   : absl::UnavailableError("no expert node is healthy");
      },
      nullptr);
  Reply r = Get(*server, "/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "no expert node is healthy\n");
  // Liveness does not depend on readiness: a restart would not bring a node back.
  EXPECT_EQ(Get(*server, "/healthz").status, 200);
  healthy_node = true;
  r = Get(*server, "/readyz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ready\n");
}

TEST(ProbeServerTest, AnswersNothingElse) {
  std::unique_ptr<ProbeServer> server = StartOrDie(/*metrics=*/false);
  ASSERT_NE(server, nullptr);
  server->MarkStarted(nullptr, [] { return std::string("secret-free but not asked for\n"); });
  for (const char* path : {"/metrics", "/", "/v1/models", "/health"}) {
    EXPECT_EQ(Get(*server, path).status, 404) << path;
  }
}

TEST(ProbeServerTest, BadAddressNamesTheFlag) {
  ProbeServer::Options options;
  options.listen = "localhost";
  absl::StatusOr<std::unique_ptr<ProbeServer>> server = ProbeServer::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("--health-listen: 'localhost'"));
}

}  // namespace
}  // namespace colibri::rpc
