// scripts/cluster-up.sh and cluster-down.sh: a 2-node cluster from a fixture
// model generates text, and cluster-down stops every process it recorded.
#include <signal.h>
#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

bool Alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

TEST(ClusterScriptsTest, ClusterUpGeneratesTextAndClusterDownStopsEverything) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  std::string templ = ::testing::TempDir() + "/cluster_up.XXXXXX";
  ASSERT_NE(::mkdtemp(templ.data()), nullptr);
  const std::string dir = templ + "/state";
  ::setenv("COLIBRI_BUILD_DIR", testing::BinaryPath("").c_str(), 1);
  ::setenv("COLIBRI_SKIP_BUILD", "1", 1);
  const std::string scripts = std::string(COLIBRI_SOURCE_DIR) + "/scripts/";
  const std::string model = testing::FixturesDir() + "/models/qwen2moe-tiny-q8_0.gguf";

  const testing::CommandResult up =
      testing::RunCommand({"/bin/bash", scripts + "cluster-up.sh", "--model", model, "--nodes", "2",
                           "--dir", dir, "--prompt", "Once upon a time", "--n-predict", "12"});
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
  const std::string marker = "generated through the cluster:\n";
  const size_t at = up.out.find(marker);
  ASSERT_NE(at, std::string::npos) << up.out;
  const std::string text = up.out.substr(at + marker.size());
  EXPECT_NE(text.find_first_not_of(" \n"), std::string::npos) << "no generated text: " << up.out;

  std::vector<int> pids;
  for (const std::string name : {"coordinator", "node1", "node2"}) {
    std::ifstream in(dir + "/pids/" + name + ".pid");
    int pid = 0;
    ASSERT_TRUE(in >> pid) << name;
    EXPECT_TRUE(Alive(pid)) << name;
    pids.push_back(pid);
  }

  const testing::CommandResult down =
      testing::RunCommand({"/bin/bash", scripts + "cluster-down.sh", "--dir", dir});
  ASSERT_EQ(down.exit_code, 0) << down.out << down.err;
  for (int pid : pids) EXPECT_FALSE(Alive(pid)) << pid;
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/pids"));

  const testing::CommandResult again =
      testing::RunCommand({"/bin/bash", scripts + "cluster-down.sh", "--dir", dir});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("nothing running"), std::string::npos) << again.out;
}

}  // namespace
}  // namespace colibri
