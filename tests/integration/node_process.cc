#include "tests/integration/node_process.h"

#include <stdlib.h>

#include <filesystem>
#include <mutex>
#include <system_error>

#include "gtest/gtest.h"
#include "tests/support/paths.h"

namespace colibri::testing {

NodeProcess::NodeProcess(std::string data_dir, std::string node_id,
                         std::vector<std::string> extra_args)
    : data_dir_(std::move(data_dir)),
      node_id_(std::move(node_id)),
      extra_args_(std::move(extra_args)) {}

bool NodeProcess::Start(int port, std::string* error) {
  std::vector<std::string> argv = {BinaryPath("expert_node/colibri-expert-node"),
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(port),
                                   "--data-dir",
                                   data_dir_,
                                   "--node-id",
                                   node_id_,
                                   "--threads",
                                   "1"};
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  return process_.Start(argv, error);
}

void NodeProcess::Stop(int signal) { process_.Stop(signal); }

namespace {

// The directories MakeTempDir made in this process. A node's store holds a
// preallocated RocksDB log of ~72 MB however little it stores, and ctest runs
// a few hundred of these tests: left behind, they filled a CI disk.
struct MadeDirs {
  std::mutex mu;
  std::vector<std::string> dirs;
  bool cleanup_registered = false;
};

MadeDirs& Made() {
  static MadeDirs* made = new MadeDirs;
  return *made;
}

// At exit (each test runs in a process of its own under ctest), after the
// fixtures have stopped their nodes: the directories of a passing run go, a
// failing run's stay for a look.
void RemoveMadeDirs() {
  if (!::testing::UnitTest::GetInstance()->Passed()) return;
  MadeDirs& made = Made();
  std::lock_guard<std::mutex> lock(made.mu);
  for (const std::string& dir : made.dirs) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  made.dirs.clear();
}

}  // namespace

std::string MakeTempDir(const std::string& name) {
  std::string templ = ::testing::TempDir() + "/" + name + ".XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return std::string();
  MadeDirs& made = Made();
  std::lock_guard<std::mutex> lock(made.mu);
  if (!made.cleanup_registered) {
    std::atexit(RemoveMadeDirs);
    made.cleanup_registered = true;
  }
  made.dirs.push_back(templ);
  return templ;
}

std::string JoinAddresses(const std::vector<const NodeProcess*>& nodes) {
  std::string out;
  for (const NodeProcess* n : nodes) {
    if (!out.empty()) out += ",";
    out += n->address();
  }
  return out;
}

std::string JoinAddresses(const std::vector<std::unique_ptr<NodeProcess>>& nodes) {
  std::vector<const NodeProcess*> raw;
  for (const auto& n : nodes) raw.push_back(n.get());
  return JoinAddresses(raw);
}

bool StartNodes(int n, const std::string& dir_prefix, std::vector<std::string>* dirs,
                std::vector<std::unique_ptr<NodeProcess>>* nodes, std::string* error,
                const std::vector<std::string>& extra_args) {
  for (int i = 0; i < n; ++i) {
    const std::string dir = MakeTempDir(dir_prefix + std::to_string(i));
    if (dirs != nullptr) dirs->push_back(dir);
    nodes->push_back(
        std::make_unique<NodeProcess>(dir, "node-" + std::to_string(i), extra_args));
    if (!nodes->back()->Start(0, error)) return false;
  }
  return true;
}

}  // namespace colibri::testing
