// HttpServer before it has a model: it listens at once and answers 503 (after
// the token check) until Attach, so that probes can tell "loading" apart from
// "down".
#include "coordinator/http_server.h"

#include <memory>

#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {
namespace {

TEST(HttpServerTest, AnswersServiceUnavailableUntilTheModelIsAttached) {
  HttpServer::Options options;
  options.listen = "127.0.0.1:0";
  options.auth_token = "tok";
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
  httplib::Result authorized = client.Get("/v1/models", {{"Authorization", "Bearer tok"}});
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

}  // namespace
}  // namespace colibri::coordinator
