// ParseProcessKnobs: each variable's valid values and its bad ones.
#include "common/process_knobs.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace colibri {
namespace {

absl::StatusOr<ProcessKnobs> Parse(const std::map<std::string, std::string>& env) {
  return ParseProcessKnobs([&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ProcessKnobsTest, NothingSetMeansTheDefaults) {
  const absl::StatusOr<ProcessKnobs> knobs = Parse({});
  ASSERT_TRUE(knobs.ok()) << knobs.status();
  EXPECT_EQ(knobs->cpu_cap, CpuCap::kNone);
  EXPECT_FALSE(knobs->spin_us.has_value());
  EXPECT_EQ(knobs->cache_dir, "");
}

TEST(ProcessKnobsTest, CpuCaps) {
  const std::map<std::string, CpuCap> caps = {{"portable", CpuCap::kPortable},
                                              {"avx2", CpuCap::kAvx2},
                                              {"neon", CpuCap::kNeon},
                                              {"", CpuCap::kNone}};
  for (const auto& [value, cap] : caps) {
    const absl::StatusOr<ProcessKnobs> knobs = Parse({{"COLIBRI_CPU", value}});
    ASSERT_TRUE(knobs.ok()) << value << ": " << knobs.status();
    EXPECT_EQ(knobs->cpu_cap, cap) << value;
  }
}

TEST(ProcessKnobsTest, BadCpuCapNamesTheVariableAndTheValue) {
  for (const char* bad : {"avx512", "AVX2", "native", " avx2", "none"}) {
    const absl::StatusOr<ProcessKnobs> knobs = Parse({{"COLIBRI_CPU", bad}});
    ASSERT_FALSE(knobs.ok()) << bad;
    EXPECT_EQ(knobs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(knobs.status().message(), std::string("environment variable COLIBRI_CPU=\"") + bad +
                                            "\" is not one of portable, avx2, neon");
  }
}

TEST(ProcessKnobsTest, SpinMicroseconds) {
  for (const auto& [value, us] :
       std::map<std::string, int>{{"0", 0}, {"120", 120}, {"1000000", 1000000}}) {
    const absl::StatusOr<ProcessKnobs> knobs = Parse({{"COLIBRI_SPIN_US", value}});
    ASSERT_TRUE(knobs.ok()) << value << ": " << knobs.status();
    ASSERT_TRUE(knobs->spin_us.has_value()) << value;
    EXPECT_EQ(*knobs->spin_us, us);
  }
  const absl::StatusOr<ProcessKnobs> empty = Parse({{"COLIBRI_SPIN_US", ""}});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_FALSE(empty->spin_us.has_value());
}

TEST(ProcessKnobsTest, BadSpinNamesTheVariableAndTheValue) {
  for (const char* bad :
       {"fast", "20us", "-5", "+5", " 5", "5 ", "1000001", "99999999999999999999", "1.5"}) {
    const absl::StatusOr<ProcessKnobs> knobs = Parse({{"COLIBRI_SPIN_US", bad}});
    ASSERT_FALSE(knobs.ok()) << bad;
    EXPECT_EQ(knobs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(knobs.status().message(), std::string("environment variable COLIBRI_SPIN_US=\"") +
                                            bad +
                                            "\" is not a number of microseconds from 0 to 1000000");
  }
}

TEST(ProcessKnobsTest, CacheDirectoryFromItsThreeVariables) {
  EXPECT_EQ(Parse({{"HOME", "/home/u"}})->cache_dir, "/home/u/.cache/colibri");
  EXPECT_EQ(Parse({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/x"}})->cache_dir, "/x/colibri");
  EXPECT_EQ(Parse({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/x"}, {"COLIBRI_CACHE_DIR", "/c"}})
                ->cache_dir,
            "/c");
  EXPECT_EQ(Parse({{"HOME", "/home/u"}, {"COLIBRI_CACHE_DIR", ""}})->cache_dir, "");
}

}  // namespace
}  // namespace colibri
