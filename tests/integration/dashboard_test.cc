// The dashboard of `serve` from real processes: two expert nodes and a
// coordinator with a token. GET /dashboard loads without the token (the page
// holds no data), GET /v1/cluster needs it and after a completion reports
// the nodes, the placement and exactly the routes and steps that the
// completion's tokens imply. Then a real browser (Debian's chromium,
// headless) opens /dashboard#token=... and the page it renders shows the
// nodes and the heat map; its screenshot is kept for a person to look at
// ($TEST_TMPDIR/dashboard.png, or the test temp dir the log names).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/node_process.h"
#include "tests/support/auth_token.h"
#include "tests/support/curl.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using json = nlohmann::json;
using testing::Curl;
using testing::HttpReply;
using testing::NodeProcess;
using testing::PostJson;
using testing::ServerProcess;

constexpr char kChromium[] = "/usr/bin/chromium";
constexpr char kModel[] = "qwen3moe-tiny-f32";

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    if (::access(testing::kCurl, X_OK) != 0) GTEST_SKIP() << "curl not installed";
    const std::string dir = testing::MakeTempDir("dashboard");
    token_file_ = dir + "/token";
    token_ = testing::WriteAuthTokenFile(token_file_);
    std::string error;
    ASSERT_TRUE(testing::StartNodes(2, "dashboard-node", nullptr, &nodes_, &error,
                                    {"--auth-token-file", token_file_}))
        << error;
    serve_ = std::make_unique<ServerProcess>();
    ASSERT_TRUE(serve_->StartWithHttp(
        {testing::BinaryPath("coordinator/colibri-coordinator"), "serve", "--model",
         testing::FixturesDir() + "/models/" + kModel + ".gguf", "--nodes",
         testing::JoinAddresses(nodes_), "--replicas", "2", "--listen", "127.0.0.1:0",
         "--http-listen", "127.0.0.1:0", "--threads", "1", "--auth-token-file", token_file_},
        &http_, &error))
        << error;
  }

  std::vector<std::string> Bearer() const { return {"-H", "Authorization: Bearer " + token_}; }

  std::string token_file_;
  std::string token_;
  std::vector<std::unique_ptr<NodeProcess>> nodes_;
  std::unique_ptr<ServerProcess> serve_;
  std::string http_;
};

TEST_F(DashboardTest, TheClusterViewHoldsWhatACompletionDidAndABrowserDrawsIt) {
  const HttpReply page = Curl(http_, "/dashboard", {"-i"});
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("Content-Type: text/html"), std::string::npos) << page.body.substr(0, 400);
  EXPECT_NE(page.body.find("Content-Security-Policy: default-src 'none'"), std::string::npos);
  EXPECT_NE(page.body.find("<title>Colibri cluster</title>"), std::string::npos);
  EXPECT_EQ(page.body.find(token_), std::string::npos);
  EXPECT_EQ(Curl(http_, "/v1/cluster").status, 401);

  const HttpReply done =
      PostJson(http_, "/v1/completions",
               {{"prompt", "The small birds of the valley"}, {"max_tokens", 6}, {"temperature", 0}},
               Bearer());
  ASSERT_EQ(done.status, 200) << done.body;
  const json usage = json::parse(done.body)["usage"];
  // The last token is sampled, never evaluated.
  const int evaluated =
      usage["prompt_tokens"].get<int>() + usage["completion_tokens"].get<int>() - 1;

  const HttpReply view = Curl(http_, "/v1/cluster", Bearer());
  ASSERT_EQ(view.status, 200) << view.body;
  const json j = json::parse(view.body);
  const json& model = j["model"];
  EXPECT_EQ(model["arch"], "qwen3moe");
  ASSERT_EQ(j["nodes"].size(), 2u);
  int64_t requests = 0;
  for (const json& n : j["nodes"]) {
    EXPECT_EQ(n["healthy"], true) << n.dump();
    requests += n["requests"].get<int64_t>();
  }
  EXPECT_GT(requests, 0);
  EXPECT_EQ(j["placement"]["replicas"], 2);
  EXPECT_EQ(j["placement"]["owners"].size(), model["layers"].get<size_t>());
  EXPECT_EQ(j["scheduler"]["active"], 0);
  int moe_layers = 0;
  for (const json& layer : j["expert_use"]["routes"]) {
    const std::vector<int64_t> counts = layer.get<std::vector<int64_t>>();
    if (counts.empty()) continue;
    ++moe_layers;
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}),
              int64_t{evaluated} * model["experts_used"].get<int>());
  }
  EXPECT_EQ(j["expert_use"]["token_layers"], int64_t{evaluated} * moe_layers);
  int steps_tokens = 0;
  for (const json& s : j["steps"]) steps_tokens += s["tokens"].get<int>();
  EXPECT_EQ(steps_tokens, evaluated);

  if (::access(kChromium, X_OK) != 0) {
    GTEST_SKIP() << "chromium not installed (scripts/install-deps.sh): the page was not drawn";
  }
  const std::string dir = testing::MakeTempDir("dashboard-browser");
  const std::string url = "http://" + http_ + "/dashboard#token=" + token_;
  const std::vector<std::string> browser = {kChromium,
                                            "--headless=new",
                                            "--no-sandbox",
                                            "--disable-gpu",
                                            "--no-first-run",
                                            "--user-data-dir=" + dir + "/profile",
                                            "--window-size=1280,1000",
                                            "--virtual-time-budget=5000"};
  std::vector<std::string> dump = browser;
  dump.insert(dump.end(), {"--dump-dom", url});
  const testing::CommandResult dom = testing::RunCommand(dump);
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  // The script ran and drew the answer: nodes, steps and the heat map.
  EXPECT_NE(dom.out.find("data-loaded=\"1\""), std::string::npos) << dom.out;
  for (const auto& node : nodes_) {
    EXPECT_NE(dom.out.find(node->address()), std::string::npos) << node->address();
  }
  EXPECT_NE(dom.out.find(">healthy<"), std::string::npos);
  EXPECT_NE(dom.out.find("layer 0 expert 0:"), std::string::npos);
  EXPECT_NE(dom.out.find("coordinator: "), std::string::npos);  // a timeline bar's title
  EXPECT_NE(dom.out.find("<span id=\"msg\"></span>"), std::string::npos);  // no error shown

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string png = (tmp != nullptr && *tmp != '\0' ? std::string(tmp) : dir) +
                          "/dashboard.png";
  std::vector<std::string> shot = browser;
  shot.insert(shot.end(), {"--hide-scrollbars", "--screenshot=" + png, url});
  const testing::CommandResult r = testing::RunCommand(shot);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat(png.c_str(), &st), 0) << png;
  EXPECT_GT(st.st_size, 20000) << "a blank page? " << png;
  std::cerr << "dashboard screenshot: " << png << "\n";
}

}  // namespace
}  // namespace colibri
