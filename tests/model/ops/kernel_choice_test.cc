// ConfigureKernelChoice: the calibration keeps its choice in the configured
// cache directory, and the choice cannot be configured once MatMul has chosen.
// One test: the choice is made once per process.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "model/ops/kernel_calibration.h"
#include "model/ops/matmul.h"

namespace colibri::ops {
namespace {

TEST(KernelChoiceTest, CacheDirectoryUntilTheFirstChoice) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/colibri-choice-" +
                          std::to_string(::getpid());
  KernelChoiceOptions options;
  options.cpu_cap = GetCpuCap();  // ctest's COLIBRI_CPU, as the test main set it
  options.cache_dir = dir;
  ASSERT_TRUE(ConfigureKernelChoice(options).ok());
  const char* chosen = internal::CalibratedKernels().name;
  EXPECT_STREQ(ActiveKernelSetName(), chosen);
  // Calibrated (no cap, several sets): the choice is in the cache directory.
  const bool calibrated =
      options.cpu_cap == CpuCap::kNone && internal::RunnableKernelSets().size() > 1;
  EXPECT_EQ(std::filesystem::exists(dir + "/kernels-v5-" + internal::CpuModelForCache() + ".txt"),
            calibrated);
  const absl::Status late = ConfigureKernelChoice(KernelChoiceOptions());
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace colibri::ops
