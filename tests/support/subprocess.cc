#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace colibri::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv) {
  CommandResult result;
  char out_template[] = "/tmp/colibri-test-out-XXXXXX";
  char err_template[] = "/tmp/colibri-test-err-XXXXXX";
  const int out_fd = ::mkstemp(out_template);
  const int err_fd = ::mkstemp(err_template);
  if (out_fd < 0 || err_fd < 0) return result;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(out_fd);
  ::close(err_fd);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = Slurp(out_template);
  result.err = Slurp(err_template);
  ::unlink(out_template);
  ::unlink(err_template);
  return result;
}

bool ServerProcess::Start(const std::vector<std::string>& argv, std::string* error) {
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
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  pid_ = pid;
  stdout_fd_ = out[0];
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (text.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, n);
  }
  const std::string prefix = "listening on ";
  const size_t at = text.find(prefix);
  const size_t end = at == std::string::npos ? at : text.find('\n', at);
  if (end == std::string::npos) {
    *error = "no 'listening on' line from " + argv[0] + ": '" + text + "'";
    Stop(SIGKILL);
    return false;
  }
  address_ = text.substr(at + prefix.size(), end - at - prefix.size());
  port_ = std::atoi(address_.substr(address_.rfind(':') + 1).c_str());
  pending_ = text.substr(end + 1);
  return true;
}

bool ServerProcess::StartWithHttp(const std::vector<std::string>& argv, std::string* http,
                                  std::string* error) {
  if (!Start(argv, error)) return false;
  *http = WaitForLine("http listening on ", error);
  return !http->empty();
}

std::string ServerProcess::WaitForLine(const std::string& prefix, std::string* error) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    for (size_t start = 0, end; (end = pending_.find('\n', start)) != std::string::npos;
         start = end + 1) {
      if (pending_.compare(start, prefix.size(), prefix) == 0) {
        std::string value = pending_.substr(start + prefix.size(), end - start - prefix.size());
        pending_.erase(0, end + 1);
        return value;
      }
    }
    if (stdout_fd_ < 0 || std::chrono::steady_clock::now() >= deadline) break;
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
    if (n <= 0) break;
    pending_.append(buf, n);
  }
  *error = "no '" + prefix + "' line: '" + pending_ + "'";
  return "";
}

int ServerProcess::Stop(int signal) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, signal);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string JoinIds(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace colibri::testing
