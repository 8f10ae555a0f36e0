#include "common/service_notify.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace colibri {
namespace {

// A datagram socket standing in for systemd's notification socket.
class NotifySocket {
 public:
  NotifySocket() {
    path_ = ::testing::TempDir() + "/notify-" + std::to_string(getpid());
    unlink(path_.c_str());
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~NotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }
  // The next datagram (blocks; the test's timeout ends a wait for none).
  std::string Receive() {
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, n) : std::string();
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

TEST(ServiceNotifyTest, SendsReadyThenStoppingWithAOneLineStatus) {
  NotifySocket socket;
  ASSERT_TRUE(socket.bound()) << socket.path();
  ASSERT_EQ(setenv("NOTIFY_SOCKET", socket.path().c_str(), 1), 0);
  ASSERT_TRUE(NotifyServiceReady("serving on 127.0.0.1:7070\nwith 2 nodes").ok());
  EXPECT_EQ(socket.Receive(), "READY=1\nSTATUS=serving on 127.0.0.1:7070 with 2 nodes");
  // The variable stays: the stop notification finds the socket too.
  ASSERT_TRUE(NotifyServiceStopping("shutting down").ok());
  EXPECT_EQ(socket.Receive(), "STOPPING=1\nSTATUS=shutting down");
  unsetenv("NOTIFY_SOCKET");
}

TEST(ServiceNotifyTest, NothingToTellWithoutAServiceManager) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(NotifyServiceReady("serving").ok());
}

TEST(ServiceNotifyTest, ASocketThatIsGoneIsAnError) {
  ASSERT_EQ(setenv("NOTIFY_SOCKET", (::testing::TempDir() + "/no-such-socket").c_str(), 1), 0);
  const absl::Status status = NotifyServiceReady("serving");
  unsetenv("NOTIFY_SOCKET");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

}  // namespace
}  // namespace colibri
