// colibri-relay end to end: bytes arrive intact both ways, the delay and the
// bandwidth cap are honoured (lower bounds only: that is the relay's function),
// a down target closes only its connection, and gRPC works through it.
#include "tools/relay/relay.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "colibri/v1/expert.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"
#include "tests/tools/echo_server.h"

namespace colibri::relay {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ConnectTo;
using testing::EchoServer;
using testing::SendAll;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// colibri-relay with one route from 127.0.0.1:0 to `target`.
class RelayProcess : public colibri::testing::ServerProcess {
 public:
  bool Start(const std::string& target, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {colibri::testing::BinaryPath("tools/relay/colibri-relay"),
                                     "--route", "127.0.0.1:0=" + target};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string error;
    const bool ok = ServerProcess::Start(argv, &error);
    if (!ok) ADD_FAILURE() << error;
    return ok;
  }
  // The line is "listening on HOST:PORT -> TARGET"; the listen address only.
  std::string listen_address() const { return address().substr(0, address().find(' ')); }
};

char PatternByte(uint32_t seed, uint64_t i) {
  const uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  return static_cast<char>(x >> 56);
}

// Sends `bytes` of a seeded pattern to `address` in uneven writes, half-closes,
// and checks that exactly the same bytes come back before the end of stream.
::testing::AssertionResult EchoThrough(const std::string& address, uint64_t bytes, uint32_t seed) {
  const int fd = ConnectTo(address);
  if (fd < 0) return ::testing::AssertionFailure() << "cannot connect to " << address;
  std::atomic<bool> send_ok{true};
  std::thread sender([&] {
    std::vector<char> buffer(200 * 1024);
    uint64_t sent = 0;
    while (sent < bytes && send_ok) {
      const uint64_t n = std::min<uint64_t>(bytes - sent, 1 + (sent * 7919 + seed) % buffer.size());
      for (uint64_t k = 0; k < n; ++k) buffer[k] = PatternByte(seed, sent + k);
      send_ok = SendAll(fd, buffer.data(), n);
      sent += n;
    }
    ::shutdown(fd, SHUT_WR);
  });
  std::vector<char> buffer(256 * 1024);
  uint64_t received = 0;
  uint64_t first_bad = UINT64_MAX;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n <= 0) break;
    for (ssize_t k = 0; k < n && first_bad == UINT64_MAX; ++k) {
      if (buffer[k] != PatternByte(seed, received + k)) first_bad = received + k;
    }
    received += static_cast<uint64_t>(n);
  }
  sender.join();
  ::close(fd);
  if (!send_ok) return ::testing::AssertionFailure() << "send failed";
  if (first_bad != UINT64_MAX)
    return ::testing::AssertionFailure() << "byte " << first_bad << " differs";
  if (received != bytes) {
    return ::testing::AssertionFailure() << "received " << received << " of " << bytes << " bytes";
  }
  return ::testing::AssertionSuccess();
}

// Round trips of one byte, in seconds, sorted.
std::vector<double> PingPong(const std::string& address, int rounds) {
  std::vector<double> rtts;
  const int fd = ConnectTo(address);
  if (fd < 0) return rtts;
  for (int i = 0; i < rounds; ++i) {
    char c = static_cast<char>(i);
    const auto start = Clock::now();
    if (!SendAll(fd, &c, 1) || ::read(fd, &c, 1) != 1) break;
    rtts.push_back(Seconds(Clock::now() - start));
  }
  ::close(fd);
  std::sort(rtts.begin(), rtts.end());
  return rtts;
}

TEST(RelayBinaryTest, EchoesALargeTransferIntactAndExitsOnSigterm) {
  EchoServer echo;
  RelayProcess relay;
  ASSERT_TRUE(relay.Start(echo.address(), {}));
  EXPECT_TRUE(EchoThrough(relay.listen_address(), 64ull << 20, 1));
  // With a connection still open.
  const int idle = ConnectTo(relay.listen_address());
  EXPECT_GE(idle, 0);
  EXPECT_EQ(relay.Stop(SIGTERM), 0);
  if (idle >= 0) ::close(idle);
}

TEST(RelayBinaryTest, ManyConcurrentConnectionsThroughADelay) {
  EchoServer echo;
  RelayProcess relay;
  ASSERT_TRUE(relay.Start(echo.address(), {"--delay-ms", "1"}));
  constexpr int kConnections = 32;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < kConnections; ++c) {
    clients.emplace_back([&, c] {
      const ::testing::AssertionResult r = EchoThrough(relay.listen_address(), 1 << 20, 100 + c);
      if (r) {
        ++ok;
      } else {
        ADD_FAILURE() << "connection " << c << ": " << r.message();
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), kConnections);
}

TEST(RelayBinaryTest, RoundTripIsAtLeastTwiceTheOneWayDelay) {
  EchoServer echo;
  for (const char* delay_ms : {"20", "0.25", "0"}) {
    RelayProcess relay;
    ASSERT_TRUE(relay.Start(echo.address(), {"--delay-ms", delay_ms}));
    const std::vector<double> rtts = PingPong(relay.listen_address(), 20);
    ASSERT_EQ(rtts.size(), 20u);
    const double floor_s = 2 * std::stod(delay_ms) / 1000;
    EXPECT_GE(rtts.front(), floor_s);
    std::printf("one-way %s ms: round trip min %.3f ms, median %.3f ms, max %.3f ms\n", delay_ms,
                rtts.front() * 1e3, rtts[rtts.size() / 2] * 1e3, rtts.back() * 1e3);
  }
}

TEST(RelayBinaryTest, BandwidthCapSlowsATransferDown) {
  EchoServer echo;
  RelayProcess relay;
  ASSERT_TRUE(relay.Start(echo.address(), {"--bandwidth", "8Mbit"}));
  const auto start = Clock::now();
  EXPECT_TRUE(EchoThrough(relay.listen_address(), 1 << 20, 7));
  const double seconds = Seconds(Clock::now() - start);
  // 1 MiB at 1 MB/s each way: at least 1.048 s.
  EXPECT_GE(seconds, 1.0);
  std::printf("1 MiB echoed through 8 Mbit/s in %.3f s\n", seconds);
}

TEST(RelayBinaryTest, DownTargetClosesTheClientAndTheRelayKeepsServing) {
  // A bound socket that does not listen: connections to its port are refused
  // until it does.
  const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  RelayProcess relay;
  ASSERT_TRUE(relay.Start("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), {}));

  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = ConnectTo(relay.listen_address());
    ASSERT_GE(fd, 0);
    timeval timeout{20, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char c;
    const ssize_t n = ::read(fd, &c, 1);
    EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "read " << n << " errno " << errno;
    ::close(fd);
  }

  ASSERT_EQ(::listen(server, 4), 0);
  const int fd = ConnectTo(relay.listen_address());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "ping", 4));
  const int accepted = ::accept(server, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  char buffer[4];
  ASSERT_EQ(::recv(accepted, buffer, 4, MSG_WAITALL), 4);
  EXPECT_EQ(std::string(buffer, 4), "ping");
  // The target closing ends the client's stream after the data.
  ASSERT_TRUE(SendAll(accepted, "pong", 4));
  ::close(accepted);
  ASSERT_EQ(::recv(fd, buffer, 4, MSG_WAITALL), 4);
  EXPECT_EQ(std::string(buffer, 4), "pong");
  EXPECT_EQ(::read(fd, buffer, 1), 0);
  ::close(fd);
  ::close(server);
  EXPECT_EQ(relay.Stop(SIGINT), 0);
}

// A listening socket on 127.0.0.1 whose port is returned in *port.
int ListenOnLoopback(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 4) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(RelayBinaryTest, StopsReadingWhenTheReceiverDoesNot) {
  int port = 0;
  const int server = ListenOnLoopback(&port);
  ASSERT_GE(server, 0);
  RelayProcess relay;
  ASSERT_TRUE(relay.Start("127.0.0.1:" + std::to_string(port), {}));
  const int fd = ConnectTo(relay.listen_address());
  ASSERT_GE(fd, 0);
  const int accepted = ::accept(server, nullptr, nullptr);  // and never read
  ASSERT_GE(accepted, 0);

  constexpr uint64_t kOffered = 256ull << 20;
  std::atomic<uint64_t> sent{0};
  std::thread sender([&] {
    std::vector<char> buffer(64 * 1024, 'x');
    while (sent < kOffered && SendAll(fd, buffer.data(), buffer.size())) sent += buffer.size();
  });
  // Wait until the sender stalls: no progress for 1 s (at most 30 s).
  uint64_t last = 0;
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (sent == last) break;
    last = sent;
  }
  // The relay's queue (4 MiB) plus the sockets' buffers on both sides: far
  // less than what was offered.
  EXPECT_LT(sent.load(), 64ull << 20);
  std::printf("the sender stalled after %.1f MiB\n", sent.load() / 1048576.0);
  ::close(accepted);  // the relay's writes fail; it closes the client
  sender.join();
  ::close(fd);
  ::close(server);
  EXPECT_EQ(relay.Stop(SIGTERM), 0);
}

TEST(RelayBinaryTest, ExpertNodeAnswersGrpcThroughTheRelay) {
  char dir_template[] = "/tmp/colibri-relay-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  colibri::testing::ServerProcess node;
  std::string error;
  ASSERT_TRUE(node.Start(
      {colibri::testing::BinaryPath("expert_node/colibri-expert-node"), "--listen", "127.0.0.1:0",
       "--data-dir", std::string(dir_template) + "/db", "--node-id", "x", "--threads", "1"},
      &error))
      << error;
  RelayProcess relay;
  ASSERT_TRUE(relay.Start(node.address(), {"--delay-ms", "2", "--bandwidth", "1Gbit"}));

  auto channel = grpc::CreateChannel(relay.listen_address(), grpc::InsecureChannelCredentials());
  auto stub = v1::ExpertService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::NodeStatsReply reply;
  const grpc::Status status = stub->NodeStats(&context, v1::NodeStatsRequest(), &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.node_id(), "x");
  node.Stop(SIGTERM);
  EXPECT_EQ(relay.Stop(SIGTERM), 0);
  std::filesystem::remove_all(dir_template);
}

// The library: several routes in one relay, each to its own target.
TEST(RelayTest, EveryRouteReachesItsOwnTarget) {
  EchoServer a, b;
  Relay::Options options;
  options.routes = {{"127.0.0.1:0", a.address()}, {"127.0.0.1:0", b.address()}};
  options.link.delay = std::chrono::microseconds(500);
  absl::StatusOr<std::unique_ptr<Relay>> relay = Relay::Start(options);
  ASSERT_TRUE(relay.ok()) << relay.status();
  ASSERT_EQ((*relay)->listen_addresses().size(), 2u);
  EXPECT_NE((*relay)->listen_addresses()[0], (*relay)->listen_addresses()[1]);
  for (const std::string& address : (*relay)->listen_addresses()) {
    EXPECT_TRUE(EchoThrough(address, 3 << 20, 5));
  }
  (*relay)->Stop();
}

TEST(RelayTest, RejectsBadRoutes) {
  Relay::Options options;
  EXPECT_EQ(Relay::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.routes = {{"127.0.0.1:0", "no-such-host.invalid:1"}};
  EXPECT_EQ(Relay::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri::relay
