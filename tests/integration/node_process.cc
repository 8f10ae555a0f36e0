#include "tests/integration/node_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "gtest/gtest.h"
#include "tests/support/paths.h"

namespace colibri::testing {

NodeProcess::NodeProcess(std::string data_dir, std::string node_id)
    : data_dir_(std::move(data_dir)), node_id_(std::move(node_id)) {}

NodeProcess::~NodeProcess() { Stop(SIGKILL); }

bool NodeProcess::Start(int port, std::string* error) {
  const std::string binary = BinaryPath("expert_node/colibri-expert-node");
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  int out[2];
  if (::pipe(out) != 0) {
    *error = "pipe failed";
    return false;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    *error = "fork failed";
    return false;
  }
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) ::dup2(devnull, STDERR_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::execl(binary.c_str(), binary.c_str(), "--listen", listen.c_str(), "--data-dir",
            data_dir_.c_str(), "--node-id", node_id_.c_str(), "--threads", "1",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  pid_ = pid;
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (text.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, n);
  }
  stdout_fd_ = out[0];  // kept open: a closed pipe would kill the node on its next write
  const std::string prefix = "listening on ";
  const size_t at = text.find(prefix);
  const size_t end = text.find('\n', at);
  if (at == std::string::npos || end == std::string::npos) {
    *error = "no 'listening on' line from " + binary + ": '" + text + "'";
    Stop(SIGKILL);
    return false;
  }
  address_ = text.substr(at + prefix.size(), end - at - prefix.size());
  port_ = std::atoi(address_.substr(address_.rfind(':') + 1).c_str());
  return port_ > 0;
}

void NodeProcess::Stop(int signal) {
  if (pid_ <= 0) return;
  ::kill(pid_, signal);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
}

std::string MakeTempDir(const std::string& name) {
  std::string templ = ::testing::TempDir() + "/" + name + ".XXXXXX";
  char* dir = ::mkdtemp(templ.data());
  return dir != nullptr ? std::string(dir) : std::string();
}

std::string JoinAddresses(const std::vector<const NodeProcess*>& nodes) {
  std::string out;
  for (const NodeProcess* n : nodes) {
    if (!out.empty()) out += ",";
    out += n->address();
  }
  return out;
}

}  // namespace colibri::testing
