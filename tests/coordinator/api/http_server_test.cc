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

TEST(HttpServerTest, ApiKeysReplaceTheTokenAndAnyOfThemIsAccepted) {
  HttpServer::Options options;
  options.listen = "127.0.0.1:0";
  options.threads = 2;
  const std::string token = colibri::testing::RandomAuthToken();
  options.auth_token = token;
  options.api_keys = {colibri::testing::RandomAuthToken(), colibri::testing::RandomAuthToken()};
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  // Past the key check, the unattached server answers 503.
  for (const std::string& key : options.api_keys) {
    httplib::Result r = client.Get("/v1/models", {{"Authorization", "Bearer " + key}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
  }
  for (const std::string& other : {token, std::string("x"), options.api_keys[0] + "x"}) {
    httplib::Result r = client.Get("/v1/models", {{"Authorization", "Bearer " + other}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << other;
  }
  (*server)->Stop();
}

TEST(HttpServerTest, CorsHeadersForAllowedOriginsAndPreflightsWithoutAKey) {
  HttpServer::Options options;
  options.listen = "127.0.0.1:0";
  options.threads = 2;
  options.auth_token = colibri::testing::RandomAuthToken();
  options.cors_origins = {"https://ui.example", "http://localhost:3000"};
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());

  httplib::Result preflight = client.Options(
      "/v1/chat/completions", {{"Origin", "https://ui.example"},
                               {"Access-Control-Request-Method", "POST"},
                               {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "https://ui.example");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Headers"),
            "authorization, content-type");
  EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Methods").find("POST"),
            std::string::npos);

  // Every answer to an allowed origin carries the header, a 401 too (so that
  // the page can read the error).
  httplib::Result refused = client.Get("/v1/models", {{"Origin", "http://localhost:3000"}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(refused->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");

  // Another origin: no header, and its preflight is refused.
  httplib::Result other = client.Get("/v1/models", {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  httplib::Result other_preflight =
      client.Options("/v1/models", {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(other_preflight);
  EXPECT_EQ(other_preflight->status, 403);
  (*server)->Stop();

  // Without cors_origins: no CORS at all.
  options.cors_origins.clear();
  server = HttpServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client plain("127.0.0.1", (*server)->port());
  httplib::Result none = plain.Options("/v1/models", {{"Origin", "https://ui.example"}});
  ASSERT_TRUE(none);
  EXPECT_NE(none->status, 204);
  EXPECT_FALSE(none->has_header("Access-Control-Allow-Origin"));
  (*server)->Stop();
}

TEST(HttpServerTest, TlsFilesMustBothBeThereAndBePem) {
  HttpServer::Options options;
  options.listen = "127.0.0.1:0";
  options.tls_cert_file = ::testing::TempDir() + "/http_tls_not_pem.crt";
  EXPECT_EQ(HttpServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.tls_key_file = ::testing::TempDir() + "/http_tls_not_pem.key";
  EXPECT_EQ(HttpServer::Start(options).status().code(), absl::StatusCode::kNotFound);
  for (const std::string& file : {options.tls_cert_file, options.tls_key_file}) {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("not PEM\n", f);
    std::fclose(f);
  }
  const absl::Status status = HttpServer::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("not a PEM certificate chain"), absl::string_view::npos)
      << status;
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
