// Real colibri-expert-node processes on loopback for integration tests.
#ifndef COLIBRI_TESTS_INTEGRATION_NODE_PROCESS_H_
#define COLIBRI_TESTS_INTEGRATION_NODE_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace colibri::testing {

// Starts `colibri-expert-node --listen 127.0.0.1:<port> --data-dir <dir>
// --node-id <id> --threads 1 <extra_args>` (port 0: the OS picks one) and reads
// its "listening on HOST:PORT" line. The destructor kills it (SIGKILL).
class NodeProcess {
 public:
  NodeProcess(std::string data_dir, std::string node_id,
              std::vector<std::string> extra_args = {});
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;

  // False with a message when the node did not come up within 20 s.
  bool Start(int port, std::string* error);
  // signal: SIGKILL for a crash, SIGTERM for an orderly stop. Waits for exit.
  void Stop(int signal);

  bool running() const { return process_.running(); }
  const std::string& address() const { return process_.address(); }
  int port() const { return process_.port(); }
  int pid() const { return process_.pid(); }

 private:
  const std::string data_dir_;
  const std::string node_id_;
  const std::vector<std::string> extra_args_;
  ServerProcess process_;
};

// A fresh directory below the test temp dir, removed with what is in it when
// the process exits after its tests passed (kept after a failure).
std::string MakeTempDir(const std::string& name);

// "a,b,c" of the nodes' addresses.
std::string JoinAddresses(const std::vector<const NodeProcess*>& nodes);
std::string JoinAddresses(const std::vector<std::unique_ptr<NodeProcess>>& nodes);

// Starts n nodes "node-0" .. "node-<n-1>" on ports the OS picks, node i on a
// fresh MakeTempDir(dir_prefix + i), and appends them to *nodes and their
// directories to *dirs (when not null), each with `extra_args`. False with a
// message when one does not come up; the ones started before it stay in *nodes.
bool StartNodes(int n, const std::string& dir_prefix, std::vector<std::string>* dirs,
                std::vector<std::unique_ptr<NodeProcess>>* nodes, std::string* error,
                const std::vector<std::string>& extra_args = {});

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_INTEGRATION_NODE_PROCESS_H_
