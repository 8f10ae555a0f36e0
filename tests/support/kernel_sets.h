// Value-parameterized tests that run once per matmul kernel set (portable,
// AVX2, AVX-512, NEON, NEON with dot products). Header-only: the tests using it link colibri_ops
// already.
//
//   class MyTest : public testing::KernelSetTest {};
//   INSTANTIATE_TEST_SUITE_P(KernelSets, MyTest,
//                            ::testing::Values(ops::KernelSetChoice::kPortable, ...),
//                            testing::KernelSetParamName);
#ifndef COLIBRI_TESTS_SUPPORT_KERNEL_SETS_H_
#define COLIBRI_TESTS_SUPPORT_KERNEL_SETS_H_

#include <string>

#include "gtest/gtest.h"
#include "model/ops/matmul.h"

namespace colibri::testing {

// "portable", "avx2", "avx512", "neon", "neon-dotprod" (the names
// ops::ActiveKernelSetName() uses), or "auto".
inline std::string KernelSetChoiceName(ops::KernelSetChoice c) {
  switch (c) {
    case ops::KernelSetChoice::kPortable:
      return "portable";
    case ops::KernelSetChoice::kAvx2:
      return "avx2";
    case ops::KernelSetChoice::kAvx512:
      return "avx512";
    case ops::KernelSetChoice::kNeon:
      return "neon";
    case ops::KernelSetChoice::kNeonDotprod:
      return "neon-dotprod";
    case ops::KernelSetChoice::kAuto:
      break;
  }
  return "auto";
}

// The test name suffix of a kernel set parameter (its name with '_' for '-',
// which test names cannot hold).
inline std::string KernelSetParamName(const ::testing::TestParamInfo<ops::KernelSetChoice>& info) {
  std::string name = KernelSetChoiceName(info.param);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// Forces the parameter's kernel set for each test (skipping it when this build
// or CPU cannot run that set) and goes back to automatic choice afterwards.
class KernelSetTest : public ::testing::TestWithParam<ops::KernelSetChoice> {
 protected:
  void SetUp() override {
    if (!ops::ForceKernelSetForTesting(GetParam())) {
      GTEST_SKIP() << "kernel set " << KernelSetChoiceName(GetParam())
                   << " not available in this build or on this CPU";
    }
  }
  void TearDown() override { ops::ForceKernelSetForTesting(ops::KernelSetChoice::kAuto); }
};

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_KERNEL_SETS_H_
