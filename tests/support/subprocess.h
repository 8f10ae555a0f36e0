// Running the project's binaries from tests.
#ifndef COLIBRI_TESTS_SUPPORT_SUBPROCESS_H_
#define COLIBRI_TESTS_SUPPORT_SUBPROCESS_H_

#include <csignal>
#include <string>
#include <vector>

#include "tests/support/paths.h"

namespace colibri::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv (no shell) and captures both streams.
CommandResult RunCommand(const std::vector<std::string>& argv);

// A server started in the background that announces itself with a line
// "listening on HOST:PORT" on stdout (colibri-expert-node does). Its stderr goes
// to /dev/null; its stdout stays open so later writes do not kill it. The
// destructor kills it (SIGKILL).
class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess() { Stop(SIGKILL); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Runs argv (argv[0] is the binary) and waits at most 20 s for the line.
  // False with a message when it does not come.
  bool Start(const std::vector<std::string>& argv, std::string* error);
  // Sends `signal`, waits for the exit; returns the exit code, 128 + the
  // signal that ended it, or -1 when nothing was running.
  int Stop(int signal);

  // Waits at most 20 s for a later stdout line starting with `prefix` and
  // returns the rest of it; "" with *error set when it does not come.
  std::string WaitForLine(const std::string& prefix, std::string* error);
  // Start, then WaitForLine("http listening on ") into *http (`serve` with
  // --http-listen announces its HTTP address so). False with *error set.
  bool StartWithHttp(const std::vector<std::string>& argv, std::string* http, std::string* error);
  bool running() const { return pid_ > 0; }
  // The process id while running, else -1 (to signal it without stopping it).
  int pid() const { return pid_; }
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  int pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  std::string address_;
  std::string pending_;  // stdout read after the "listening on" line
};

// "1,2,3"
std::string JoinIds(const std::vector<int>& ids);

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_SUBPROCESS_H_
