#include "common/memory_limit.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace colibri {
namespace {

class MemoryLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "/cgroup.XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    root_ = templ;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  // Writes `text` to root_/relative, making the directories.
  void Put(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = std::filesystem::path(root_) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::string root_;
};

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST_F(MemoryLimitTest, WithoutAnyLimitItIsPhysicalMemory) {
  EXPECT_EQ(MemoryLimitBytesFor(root_, "0::/user.slice/a.scope\n", 24 * kGiB), 24 * kGiB);
  Put("memory.max", "max\n");
  Put("user.slice/memory.max", "max\n");
  EXPECT_EQ(MemoryLimitBytesFor(root_, "0::/user.slice/a.scope\n", 24 * kGiB), 24 * kGiB);
}

TEST_F(MemoryLimitTest, TheSmallestLimitOnTheV2PathWins) {
  Put("system.slice/memory.max", std::to_string(8 * kGiB) + "\n");
  Put("system.slice/colibri.service/memory.max", std::to_string(12 * kGiB) + "\n");
  EXPECT_EQ(MemoryLimitBytesFor(root_, "0::/system.slice/colibri.service\n", 24 * kGiB), 8 * kGiB);
  Put("system.slice/colibri.service/memory.max", std::to_string(2 * kGiB) + "\n");
  EXPECT_EQ(MemoryLimitBytesFor(root_, "0::/system.slice/colibri.service\n", 24 * kGiB), 2 * kGiB);
}

TEST_F(MemoryLimitTest, ReadsTheV1MemoryControllerAndIgnoresItsNoLimitValue) {
  const std::string cgroup = "5:cpu,cpuacct:/x\n4:memory:/pod/c1\n0::/\n";
  Put("memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(MemoryLimitBytesFor(root_, cgroup, 24 * kGiB), 24 * kGiB);
  Put("memory/pod/c1/memory.limit_in_bytes", std::to_string(3 * kGiB) + "\n");
  EXPECT_EQ(MemoryLimitBytesFor(root_, cgroup, 24 * kGiB), 3 * kGiB);
  // Inside a container the mount is the container's own group: its top file.
  Put("memory/memory.limit_in_bytes", std::to_string(1 * kGiB) + "\n");
  EXPECT_EQ(MemoryLimitBytesFor(root_, cgroup, 24 * kGiB), 1 * kGiB);
}

TEST_F(MemoryLimitTest, UnknownPhysicalMemoryFallsBackToTheLimit) {
  Put("memory.max", std::to_string(5 * kGiB) + "\n");
  EXPECT_EQ(MemoryLimitBytesFor(root_, "0::/\n", 0), 5 * kGiB);
  EXPECT_EQ(MemoryLimitBytesFor(root_, "garbage\n", 0), 0u);
}

TEST_F(MemoryLimitTest, ThisMachineHasSome) { EXPECT_GT(MemoryLimitBytes(), 0u); }

}  // namespace
}  // namespace colibri
