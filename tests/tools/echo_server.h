// A TCP echo server on 127.0.0.1 for the relay tests: every connection gets
// back what it sends, and a half-close once it half-closes.
#ifndef COLIBRI_TESTS_TOOLS_ECHO_SERVER_H_
#define COLIBRI_TESTS_TOOLS_ECHO_SERVER_H_

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace colibri::relay::testing {

class EchoServer {
 public:
  EchoServer();   // listens on an OS-chosen port; CHECK-fails when it cannot
  ~EchoServer();  // closes every connection and joins its threads
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void AcceptLoop();

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<int> fds_;              // guarded by mu_
  std::vector<std::thread> threads_;  // guarded by mu_
};

// A connected TCP socket to HOST:PORT (IPv4), or -1.
int ConnectTo(const std::string& address);

// Sends all of `data`; false on error.
bool SendAll(int fd, const char* data, size_t size);

}  // namespace colibri::relay::testing

#endif  // COLIBRI_TESTS_TOOLS_ECHO_SERVER_H_
