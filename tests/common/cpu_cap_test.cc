// SetCpuCap: the cap reaches GetCpuFeatures when set first, and is refused
// once the features have been read. One test: the features are read once per
// process.
#include "common/cpu_features.h"
#include "gtest/gtest.h"

namespace colibri {
namespace {

TEST(CpuCapTest, CapsTheFeaturesUntilTheyAreRead) {
  ASSERT_TRUE(SetCpuCap(CpuCap::kPortable).ok());
  EXPECT_EQ(GetCpuCap(), CpuCap::kPortable);
  const CpuFeatures& features = GetCpuFeatures();
  EXPECT_FALSE(features.avx2 || features.avx512f || features.avx512_vnni || features.avx512_bf16 ||
               features.neon || features.neon_dotprod);
  EXPECT_EQ(DescribeCpuFeatures(features), "portable");
  const absl::Status late = SetCpuCap(CpuCap::kNone);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  EXPECT_EQ(GetCpuCap(), CpuCap::kPortable);
  EXPECT_EQ(&GetCpuFeatures(), &features);
  EXPECT_FALSE(GetCpuFeatures().avx2);
}

}  // namespace
}  // namespace colibri
