#include "model/ops/vector_ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/cpu_features.h"
#include "gtest/gtest.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(VectorOpsTest, RmsNorm) {
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, -4.0f};
  const std::vector<float> w = {1.0f, 0.5f, 2.0f, 1.0f};
  std::vector<float> out(4);
  RmsNorm(x.data(), w.data(), 1e-6f, 4, out.data());
  const double inv = 1.0 / std::sqrt(30.0 / 4 + 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] * inv * w[i], 1e-6);
  RmsNorm(x.data(), nullptr, 1e-6f, 4, out.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] * inv, 1e-6);
  std::vector<float> in_place = x;
  RmsNorm(in_place.data(), w.data(), 1e-6f, 4, in_place.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(in_place[i], x[i] * inv * w[i], 1e-6);
}

TEST(VectorOpsTest, SoftmaxIsStableAndNormalised) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f, -1e30f};
  Softmax(x.data(), 4);
  const double e0 = std::exp(-1.0), e2 = std::exp(-2.0), sum = e0 + 1.0 + e2;
  EXPECT_NEAR(x[0], e0 / sum, 1e-6);
  EXPECT_NEAR(x[1], 1.0 / sum, 1e-6);
  EXPECT_NEAR(x[2], e2 / sum, 1e-6);
  EXPECT_EQ(x[3], 0.0f);
  std::vector<float> one = {-5.0f};
  Softmax(one.data(), 1);
  EXPECT_EQ(one[0], 1.0f);
}

TEST(VectorOpsTest, SiluAndElementWise) {
  const std::vector<float> a = {-3.0f, 0.0f, 0.5f, 8.0f};
  const std::vector<float> b = {2.0f, -1.0f, 4.0f, 0.25f};
  std::vector<float> out(4);
  Silu(a.data(), out.data(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], a[i] / (1.0 + std::exp(-a[i])), 1e-6);
  SiluMul(a.data(), b.data(), out.data(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], a[i] / (1.0 + std::exp(-a[i])) * b[i], 1e-6);
  Mul(a.data(), b.data(), out.data(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], a[i] * b[i]);
  Add(a.data(), b.data(), out.data(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  std::vector<float> y = b;
  AddScaled(a.data(), 0.5f, y.data(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], b[i] + 0.5f * a[i]);
  Scale(y.data(), 2.0f, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], 2.0f * (b[i] + 0.5f * a[i]));
}

// Dot follows the canonical order on every kernel set.
TEST(VectorOpsTest, DotIsCanonicalOnEveryKernelSet) {
  for (int64_t n : {0, 1, 7, 8, 9, 100, 4099}) {
    const std::vector<float> a = Random(n, 1), b = Random(n, 2);
    float lanes[8] = {};
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      lanes[i % 8] = lanes[i % 8] + a[i] * b[i];
      exact += static_cast<double>(a[i]) * b[i];
      mag += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    const float want = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
                       ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    const float got = Dot(a.data(), b.data(), n);
    EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << n;
    EXPECT_LE(std::fabs(got - exact), 1e-6 * mag + 1e-30) << n;
    const float portable = internal::PortableKernels().dot(a.data(), b.data(), n);
    EXPECT_EQ(std::memcmp(&portable, &want, 4), 0) << n;
    for (const internal::KernelSet* set :
         {internal::Avx2Kernels(), internal::Avx512Kernels(), internal::NeonKernels(),
          internal::NeonDotprodKernels()}) {
      if (set == nullptr) continue;  // not built, or not for this CPU
      const float got_set = set->dot(a.data(), b.data(), n);
      EXPECT_EQ(std::memcmp(&got_set, &want, 4), 0) << set->name << " " << n;
    }
  }
}

}  // namespace
}  // namespace colibri::ops
