// Hostile HTTP clients against a real `serve` on loopback: connections that
// trickle or stall their request header, more connections from one address
// than it may have waiting, and bodies built to cost the server time or
// memory (an object with 200,000 keys, 200,000 chat messages, a prompt of
// several MiB). The server must keep answering /health and real requests,
// and refuse the hostile ones with the error that names the limit. Bounds on
// waiting are about liveness (generous), never about speed. HttpsHostileTest
// repeats the connection-level ones over TLS (--http-tls-cert/--http-tls-key).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "openssl/ssl.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using testing::CommandResult;
using testing::ServerProcess;

constexpr char kCurl[] = "/usr/bin/curl";
constexpr char kModel[] = "qwen3moe-tiny-f32";

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }
std::string ModelPath() { return testing::FixturesDir() + "/models/" + kModel + ".gguf"; }

// A TCP connection to 127.0.0.1:port, or -1.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// What the server sends until it closes the connection, waiting at most
// `seconds` in all (a liveness bound).
std::string ReadUntilClosed(int fd, int seconds) {
  std::string out;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class HttpHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    if (::access(kCurl, X_OK) != 0) GTEST_SKIP() << "curl not installed (scripts/install-deps.sh)";
  }

  void TearDown() override {
    for (int fd : open_) ::close(fd);
  }

  // serve --sessions 1 (4 * 1 + 4 = 8 connection threads) with HTTP on a
  // free port.
  void StartServe(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {Coordinator(), "serve",         "--model",
                                     ModelPath(),   "--listen",      "127.0.0.1:0",
                                     "--http-listen", "127.0.0.1:0", "--threads",
                                     "1",           "--sessions",    "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    serve_ = std::make_unique<ServerProcess>();
    std::string error;
    ASSERT_TRUE(serve_->StartWithHttp(args, &http_, &error)) << error;
    ASSERT_TRUE(absl::SimpleAtoi(http_.substr(http_.rfind(':') + 1), &port_)) << http_;
  }

  // curl with a generous --max-time (20 s: less than the 30 s a connection
  // thread waits for one read, so that a thread held by a stalled client
  // shows); status 0 when no answer came.
  std::pair<int, std::string> Curl(const std::string& method, const std::string& path,
                                   const std::string& body_file = "") {
    std::vector<std::string> argv = {kCurl, "-sS", "--max-time", "20", "-X", method,
                                     "-w",  "\n%{http_code}"};
    if (scheme_ == "https") argv.push_back("--insecure");  // the test's self-signed certificate
    if (!body_file.empty()) {
      argv.insert(argv.end(),
                  {"-H", "Content-Type: application/json", "--data-binary", "@" + body_file});
    }
    argv.push_back(scheme_ + "://" + http_ + path);
    const CommandResult r = testing::RunCommand(argv);
    const size_t nl = r.out.rfind('\n');
    if (nl == std::string::npos) return {0, r.err};
    return {std::atoi(r.out.c_str() + nl + 1), r.out.substr(0, nl)};
  }

  // Writes `body` to a file for curl (bodies of megabytes do not fit argv).
  std::string BodyFile(const std::string& name, const std::string& body) {
    const std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path, std::ios::binary) << body;
    return path;
  }

  // /health (three times) and a request that needs a thread are answered.
  void ExpectServed() {
    for (int i = 0; i < 3; ++i) {
      const auto [status, body] = Curl("GET", "/health");
      EXPECT_EQ(status, 200) << body;
    }
    const auto [status, body] =
        Curl("POST", "/tokenize", BodyFile("tokenize.json", R"({"content":"hello"})"));
    EXPECT_EQ(status, 200) << body;
  }

  // A connection that sent the start of a request header and then stalls.
  void OpenStalled(int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = Connect(port_);
      ASSERT_GE(fd, 0);
      ASSERT_TRUE(SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "));
      open_.push_back(fd);
    }
  }

  std::unique_ptr<ServerProcess> serve_;
  std::string scheme_ = "http";
  std::string http_;  // HOST:PORT
  int port_ = 0;
  std::vector<int> open_;
};

// 24 stalled headers against 8 connection threads: /health and a request
// that needs a thread are answered all the same.
TEST_F(HttpHostileTest, StalledHeadersHoldNoThread) {
  StartServe();
  OpenStalled(24);
  ExpectServed();
}

// A header sent one byte at a time never completes: the request deadline
// ends it with 408 (within the generous bound of this test).
TEST_F(HttpHostileTest, ATricklingHeaderIsCutAtTheDeadline) {
  StartServe();
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  open_.push_back(fd);
  std::atomic<bool> done{false};
  std::thread trickle([fd, &done] {
    const std::string head = "GET /v1/models HTTP/1.1\r\nX-Trickle: ";
    for (size_t i = 0; !done.load() && i < 600; ++i) {
      const char byte = i < head.size() ? head[i] : 'a';
      if (::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const std::string reply = ReadUntilClosed(fd, 90);
  done.store(true);
  trickle.join();
  EXPECT_THAT(reply, ::testing::StartsWith("HTTP/1.1 408 ")) << reply;
  const auto [status, body] = Curl("GET", "/health");
  EXPECT_EQ(status, 200) << body;
}

// Two requests sent in one write (pipelined) are both answered: the second
// one, read along with the first, is served without waiting for more bytes.
TEST_F(HttpHostileTest, PipelinedRequestsAreBothAnswered) {
  StartServe();
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  open_.push_back(fd);
  ASSERT_TRUE(SendAll(fd,
                      "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                      "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string reply = ReadUntilClosed(fd, 30);
  size_t answers = 0;
  for (size_t at = reply.find("HTTP/1.1 200 "); at != std::string::npos;
       at = reply.find("HTTP/1.1 200 ", at + 1)) {
    ++answers;
  }
  EXPECT_EQ(answers, 2u) << reply;
}

// One address may keep 64 connections sending their request; the next is
// refused at once with 429, and once they are gone the address is served.
TEST_F(HttpHostileTest, ConnectionsPerAddressAreCapped) {
  StartServe();
  OpenStalled(64);
  const int extra = Connect(port_);
  ASSERT_GE(extra, 0);
  open_.push_back(extra);
  const std::string reply = ReadUntilClosed(extra, 30);
  EXPECT_THAT(reply, ::testing::StartsWith("HTTP/1.1 429 ")) << reply;
  EXPECT_THAT(reply, HasSubstr("too many connections from this address")) << reply;
  EXPECT_THAT(reply, HasSubstr("\r\nRetry-After: 1\r\n")) << reply;
  for (int fd : open_) ::close(fd);
  open_.clear();
  // The server notices the closed connections at its next poll.
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    status = Curl("GET", "/health").first;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(status, 200);
}

// The resident set of a process, in KiB (0 when unknown).
int64_t ResidentKb(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

// {"role":"user","content":"x"} n times.
std::string Messages(int n) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, i ? "," : "", R"({"role":"user","content":"x"})");
  return out + "]";
}

// An object of 300,000 keys in a field the API ignores: refused by its key
// count, not parsed key by key (which took minutes).
TEST_F(HttpHostileTest, AnObjectWithManyKeysIsRefused) {
  StartServe();
  std::string keys = "{";
  for (int i = 0; i < 300000; ++i) absl::StrAppend(&keys, i ? "," : "", "\"", i, "\":1");
  const std::string body = R"({"prompt":"hi","max_tokens":1,"logit_bias":)" + keys + "}}";
  const auto [status, reply] = Curl("POST", "/v1/completions", BodyFile("keys.json", body));
  EXPECT_EQ(status, 400) << reply;
  EXPECT_THAT(reply, HasSubstr("an object with more than 256 keys")) << reply;
  EXPECT_EQ(Curl("GET", "/health").first, 200);
}

// Chats beyond the message limit of both front ends are refused before they
// are rendered; 200,000 messages are refused by the body's value count.
TEST_F(HttpHostileTest, ChatsWithManyMessagesAreRefused) {
  StartServe();
  auto [status, reply] = Curl("POST", "/v1/chat/completions",
                              BodyFile("5000.json", R"({"max_tokens":1,"messages":)" +
                                                        Messages(5000) + "}"));
  EXPECT_EQ(status, 400) << reply;
  EXPECT_THAT(reply, HasSubstr("the chat has 5000 messages, more than the limit of 4096"));
  EXPECT_THAT(reply, HasSubstr(R"("param":"messages")"));
  std::tie(status, reply) =
      Curl("POST", "/apply-template",
           BodyFile("5000t.json", R"({"messages":)" + Messages(5000) + "}"));
  EXPECT_EQ(status, 400) << reply;
  EXPECT_THAT(reply, HasSubstr("more than the limit of 4096"));
  std::tie(status, reply) = Curl("POST", "/v1/chat/completions",
                                 BodyFile("200k.json", R"({"max_tokens":1,"messages":)" +
                                                           Messages(200000) + "}"));
  EXPECT_EQ(status, 400) << reply;
  EXPECT_THAT(reply, HasSubstr("more than 262144 JSON values"));
}

// A prompt text beyond 1 MiB is refused by its size, before it is tokenized
// (the error names the bytes, not the tokens); /tokenize too.
TEST_F(HttpHostileTest, APromptTextBeyondTheLimitIsRefusedBeforeTokenizing) {
  StartServe();
  const std::string text(7 << 20, 'a');
  auto [status, reply] =
      Curl("POST", "/v1/completions",
           BodyFile("prompt.json", R"({"max_tokens":1,"prompt":")" + text + R"("})"));
  EXPECT_EQ(status, 400) << reply;
  EXPECT_THAT(reply, HasSubstr("the prompt text has 7340032 bytes, more than the limit of 1048576"));
  EXPECT_THAT(reply, HasSubstr(R"("param":"prompt")"));
  std::tie(status, reply) =
      Curl("POST", "/tokenize", BodyFile("tokenize-big.json", R"({"content":")" + text + R"("})"));
  EXPECT_EQ(status, 400) << reply;
  EXPECT_THAT(reply, HasSubstr("the text has 7340032 bytes"));
}

// Eight large bodies at once: refused, and the memory they took is given
// back (it stayed above 2 GiB when each parsed into 290 MiB of JSON values).
TEST_F(HttpHostileTest, MemoryOfLargeBodiesIsGivenBack) {
  StartServe();
  ASSERT_EQ(Curl("GET", "/health").first, 200);
  const int64_t before_kb = ResidentKb(serve_->pid());
  const std::string file =
      BodyFile("messages.json", R"({"max_tokens":1,"messages":)" + Messages(200000) + "}");
  std::vector<std::thread> clients;
  std::atomic<int> refused{0};
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      if (Curl("POST", "/v1/chat/completions", file).first == 400) refused.fetch_add(1);
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(refused.load(), 8);
  const int64_t after_kb = ResidentKb(serve_->pid());
  EXPECT_LT(after_kb, before_kb + 256 * 1024) << "resident " << before_kb << " KiB before, "
                                              << after_kb << " KiB after";
}

}  // namespace
}  // namespace colibri

namespace colibri {
namespace {

// A TLS client connection to 127.0.0.1:port (no certificate check: the
// server's is the test's own, self-signed).
class TlsClient {
 public:
  explicit TlsClient(int port) : ctx_(SSL_CTX_new(TLS_client_method())), fd_(Connect(port)) {
    if (ctx_ == nullptr || fd_ < 0) return;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    handshake_done_ = SSL_connect(ssl_) == 1;
  }
  ~TlsClient() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  }
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;

  bool ok() const { return handshake_done_; }
  bool Send(const std::string& data) {
    return SSL_write(ssl_, data.data(), static_cast<int>(data.size())) ==
           static_cast<int>(data.size());
  }
  // Whether the server has sent something (or closed) within `ms`.
  bool Readable(int ms) {
    if (SSL_pending(ssl_) > 0) return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }
  // What the server sends until it closes, waiting at most `seconds`.
  std::string ReadUntilClosed(int seconds) {
    std::string out;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < until) {
      if (!Readable(200)) continue;
      char buf[4096];
      const int n = SSL_read(ssl_, buf, sizeof(buf));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  SSL_CTX* const ctx_;
  const int fd_;
  SSL* ssl_ = nullptr;
  bool handshake_done_ = false;
};

class HttpsHostileTest : public HttpHostileTest {
 protected:
  void SetUp() override {
    HttpHostileTest::SetUp();
    if (IsSkipped()) return;
    cert_ = ::testing::TempDir() + "/https_hostile.crt";
    key_ = ::testing::TempDir() + "/https_hostile.key";
    const CommandResult r = testing::RunCommand(
        {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", key_, "-out", cert_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    scheme_ = "https";
  }

  void StartServe() {
    HttpHostileTest::StartServe({"--http-tls-cert", cert_, "--http-tls-key", key_});
  }

  std::string cert_, key_;
};

// 28 connections that stall their request header after the handshake and
// 20 that never begin one, against 8 connection threads (without the gate,
// each held a thread for the 10 s deadline: 6 rounds, longer than curl's
// 20 s): /health and a request that needs a thread are answered all the same.
TEST_F(HttpsHostileTest, StalledHandshakesAndHeadersHoldNoThread) {
  StartServe();
  std::vector<std::unique_ptr<TlsClient>> stalled;
  for (int i = 0; i < 28; ++i) {
    stalled.push_back(std::make_unique<TlsClient>(port_));
    ASSERT_TRUE(stalled.back()->ok());
    ASSERT_TRUE(stalled.back()->Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  }
  for (int i = 0; i < 20; ++i) {
    const int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    open_.push_back(fd);
  }
  ExpectServed();
}

// A header sent one byte at a time over TLS is cut at the request deadline
// with 408, as over plain HTTP.
TEST_F(HttpsHostileTest, ATricklingHeaderIsCutAtTheDeadline) {
  StartServe();
  TlsClient client(port_);
  ASSERT_TRUE(client.ok());
  const std::string head = "GET /v1/models HTTP/1.1\r\nX-Trickle: ";
  bool answered = false;
  for (size_t i = 0; i < 450 && !answered; ++i) {
    if (!client.Send(std::string(1, i < head.size() ? head[i] : 'a'))) break;
    answered = client.Readable(200);
  }
  ASSERT_TRUE(answered) << "no answer to a header trickled for 90 s";
  const std::string reply = client.ReadUntilClosed(30);
  EXPECT_THAT(reply, ::testing::StartsWith("HTTP/1.1 408 ")) << reply;
  const auto [status, body] = Curl("GET", "/health");
  EXPECT_EQ(status, 200) << body;
}

// A connection that never begins its handshake is closed at the deadline.
TEST_F(HttpsHostileTest, AStalledHandshakeIsClosed) {
  StartServe();
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  open_.push_back(fd);
  const auto start = std::chrono::steady_clock::now();
  const std::string reply = ReadUntilClosed(fd, 90);
  EXPECT_EQ(reply, "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(90))
      << "the connection was still open after 90 s";
}

// Two requests in one TLS write: the second, decrypted along with the first,
// is answered without more bytes arriving; then a keep-alive connection
// serves curl's two requests.
TEST_F(HttpsHostileTest, PipelinedAndKeptAliveRequestsAreAnswered) {
  StartServe();
  TlsClient client(port_);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(client.Send(
      "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string reply = client.ReadUntilClosed(30);
  size_t answers = 0;
  for (size_t at = reply.find("HTTP/1.1 200 "); at != std::string::npos;
       at = reply.find("HTTP/1.1 200 ", at + 1)) {
    ++answers;
  }
  EXPECT_EQ(answers, 2u) << reply;
  const CommandResult r = testing::RunCommand(
      {kCurl, "-sS", "--insecure", "--max-time", "20", "-o", "/dev/null", "-o", "/dev/null", "-w",
       "%{num_connects} %{http_code}\n",
       "https://" + http_ + "/v1/models", "https://" + http_ + "/v1/models"});
  EXPECT_THAT(r.out, HasSubstr("1 200\n0 200\n")) << r.out << r.err;
}

}  // namespace
}  // namespace colibri
