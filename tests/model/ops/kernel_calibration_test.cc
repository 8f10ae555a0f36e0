#include "model/ops/kernel_calibration.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/cpu_features.h"
#include "gtest/gtest.h"
#include "model/ops/matmul.h"

namespace colibri::ops::internal {
namespace {

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base != nullptr ? base : "/tmp") + "/colibri-calib-" + name + "-" +
         std::to_string(getpid());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  in >> s;
  return s;
}

bool IsIn(const KernelSet* set, const std::vector<const KernelSet*>& sets) {
  for (const KernelSet* s : sets) {
    if (s == set) return true;
  }
  return false;
}

TEST(KernelCalibrationTest, MeasuresOnceThenReadsTheCache) {
  const std::vector<const KernelSet*> sets = RunnableKernelSets();
  const std::string dir = TempDir("once") + "/nested";
  const Calibration first = CalibrateKernels(sets, dir, "Test_CPU_1");
  ASSERT_NE(first.set, nullptr);
  EXPECT_TRUE(IsIn(first.set, sets));
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(first.cache_path, dir + "/kernels-v5-Test_CPU_1.txt");
  EXPECT_EQ(ReadFile(first.cache_path), first.set->name);

  const Calibration second = CalibrateKernels(sets, dir, "Test_CPU_1");
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.set, first.set);
  std::remove(first.cache_path.c_str());
}

TEST(KernelCalibrationTest, TheCachedChoiceWinsWhenItCanRun) {
  // The portable set never measures fastest where a SIMD set runs: reading it
  // back shows the file, not a measurement, decided.
  const std::string dir = TempDir("cached");
  const std::vector<const KernelSet*> sets = RunnableKernelSets();
  ASSERT_EQ(CalibrateKernels(sets, dir, "Test_CPU_2").from_cache, false);
  {
    std::ofstream out(dir + "/kernels-v5-Test_CPU_2.txt", std::ios::trunc);
    out << "portable\n";
  }
  const Calibration c = CalibrateKernels(sets, dir, "Test_CPU_2");
  EXPECT_TRUE(c.from_cache);
  EXPECT_EQ(c.set, &PortableKernels());
  std::remove(c.cache_path.c_str());
}

TEST(KernelCalibrationTest, AnUnknownOrUnrunnableCachedNameIsMeasuredAgain) {
  const std::string dir = TempDir("unknown");
  const std::vector<const KernelSet*> only_portable = {&PortableKernels()};
  ASSERT_FALSE(CalibrateKernels(only_portable, dir, "Test_CPU_3").from_cache);
  for (const char* name : {"amx9000", "avx512"}) {
    {
      std::ofstream out(dir + "/kernels-v5-Test_CPU_3.txt", std::ios::trunc);
      out << name << "\n";
    }
    // "avx512" is not among the candidates here, so it cannot be taken.
    const Calibration c = CalibrateKernels(only_portable, dir, "Test_CPU_3");
    EXPECT_FALSE(c.from_cache) << name;
    EXPECT_EQ(c.set, &PortableKernels()) << name;
    EXPECT_EQ(ReadFile(c.cache_path), "portable") << name;
  }
}

TEST(KernelCalibrationTest, NoCacheDirectoryStillChooses) {
  const std::vector<const KernelSet*> sets = RunnableKernelSets();
  const Calibration c = CalibrateKernels(sets, "", "Test_CPU_4");
  EXPECT_TRUE(IsIn(c.set, sets));
  EXPECT_TRUE(c.cache_path.empty());
  EXPECT_FALSE(c.from_cache);
}

TEST(KernelCalibrationTest, MatMulDefaultIsARunnableSet) {
  const std::vector<const KernelSet*> sets = RunnableKernelSets();
  EXPECT_TRUE(IsIn(&CalibratedKernels(), sets));
  if (sets.size() > 1 && GetCpuCap() == CpuCap::kNone) {
    EXPECT_NE(&CalibratedKernels(), &PortableKernels());
  }
  ASSERT_TRUE(ForceKernelSetForTesting(KernelSetChoice::kAuto));
  EXPECT_EQ(std::string(ActiveKernelSetName()), CalibratedKernels().name);
}

TEST(KernelCalibrationTest, CpuModelFromCpuinfoOfX86AndArm) {
  std::istringstream x86(
      "processor\t: 0\nvendor_id\t: AuthenticAMD\n"
      "model name\t: AMD EPYC 9R14 96-Core Processor\nflags\t\t: fpu vme\n");
  EXPECT_EQ(CpuModelFromCpuinfo(x86), "AMD_EPYC_9R14_96-Core_Processor");
  // A Raspberry Pi 5 (Cortex-A76): no model name, the first core's codes.
  std::istringstream arm(
      "processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd asimddp\n"
      "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\n"
      "CPU part\t: 0xd0b\nCPU revision\t: 1\n\nprocessor\t: 1\n"
      "CPU implementer\t: 0x41\nCPU part\t: 0xd05\n");
  EXPECT_EQ(CpuModelFromCpuinfo(arm), "arm-0x41-0xd0b");
  std::istringstream empty("processor\t: 0\n");
  EXPECT_EQ(CpuModelFromCpuinfo(empty), "unknown-cpu");
}

TEST(KernelCalibrationTest, CpuModelNameIsAFileNamePart) {
  const std::string name = CpuModelForCache();
  ASSERT_FALSE(name.empty());
  for (char c : name) {
    EXPECT_TRUE(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') << name;
  }
}

}  // namespace
}  // namespace colibri::ops::internal
