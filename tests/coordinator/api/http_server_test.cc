// HttpServer before it has a model: it listens at once and answers 503 (after
// the token check) until Attach, so that probes can tell "loading" apart from
// "down".
#include "coordinator/api/http_server.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/support/auth_token.h"

namespace colibri::coordinator {
namespace {

TEST(HttpServerTest, AnswersServiceUnavailableUntilTheModelIsAttached) {
  HttpServer::Options options;
  options.listen = "127.0.0.1:0";
  const std::string token = colibri::testing::RandomAuthToken();
  options.auth_token = token;
  options.threads = 2;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result health = client.Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 503);
  const nlohmann::json body = nlohmann::json::parse(health->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << health->body;
  EXPECT_EQ(body["error"]["type"], "server_error");

  httplib::Result models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);  // the token first, so nothing leaks
  httplib::Result authorized = client.Get("/v1/models", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(authorized);
  EXPECT_EQ(authorized->status, 503);
  (*server)->Stop();
}

TEST(HttpServerTest, BadAddressesAndThreadCountsAreRefused) {
  HttpServer::Options options;
  options.listen = "127.0.0.1";
  EXPECT_EQ(HttpServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.listen = "127.0.0.1:99999";
  EXPECT_EQ(HttpServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.listen = "127.0.0.1:0";
  options.threads = 0;
  EXPECT_EQ(HttpServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// A start-up step after Start can fail at once, and the server is then
// stopped before its listener thread has run: the stop must still end it
// (cpp-httplib ignores a stop() before its accept loop runs). A hang fails
// through the watchdog rather than the test's timeout.
TEST(HttpServerTest, StopRightAfterStartEndsTheListener) {
  std::atomic<bool> done{false};
  std::thread starts([&done] {
    HttpServer::Options options;
    options.listen = "127.0.0.1:0";
    for (int i = 0; i < 300; ++i) {
      absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
      ASSERT_TRUE(server.ok()) << server.status();
    }
    done = true;
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!done && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  if (!done) {
    ADD_FAILURE() << "a server stopped right after Start did not end within 60 s";
    std::fflush(stdout);
    std::_Exit(1);  // the listener thread cannot be joined
  }
  starts.join();
}

}  // namespace
}  // namespace colibri::coordinator
