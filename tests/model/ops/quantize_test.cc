#include "model/ops/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/ops/tensor_type.h"

namespace colibri::ops {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---------------------------------------------------------------- fp16 / bf16

TEST(Fp16Test, KnownValues) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xC000);
  EXPECT_EQ(Fp32ToFp16(0.5f), 0x3800);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65519.99f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);  // halfway to 2^16 rounds to inf
  EXPECT_EQ(Fp32ToFp16(0.0f), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToFp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_FLOAT_EQ(Fp16ToFp32(0x3C00), 1.0f);
  EXPECT_FLOAT_EQ(Fp16ToFp32(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToFp32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp16ToFp32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(Bits(Fp16ToFp32(0x8000)), 0x80000000u);
}

TEST(Fp16Test, Subnormals) {
  const float min_sub = std::ldexp(1.0f, -24);
  EXPECT_EQ(Fp16ToFp32(0x0001), min_sub);
  EXPECT_EQ(Fp16ToFp32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0x8001), -min_sub);
  EXPECT_EQ(Fp32ToFp16(min_sub), 0x0001);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);              // tie -> even (0)
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);    // above the tie
  EXPECT_EQ(Fp32ToFp16(std::ldexp(3.0f, -25)), 0x0002);              // 1.5 ulp -> 2
  EXPECT_EQ(Fp32ToFp16(std::ldexp(5.0f, -25)), 0x0002);              // 2.5 ulp -> 2
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1023.5f, -24)), 0x0400);           // rounds up to normal
  EXPECT_EQ(Fp32ToFp16(-std::ldexp(1.0f, -30)), 0x8000);
}

TEST(Fp16Test, RoundsToNearestEven) {
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie, even stays
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(3.0f, -11)), 0x3C02);      // tie, odd rounds up
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11) * 1.01f), 0x3C01);
}

TEST(Fp16Test, NanStaysNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const uint16_t h = Fp32ToFp16(nan);
  EXPECT_EQ(h & 0x7C00, 0x7C00);
  EXPECT_NE(h & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(Fp16ToFp32(h)));
  EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(FromBits(0x7F800001u)))));  // signalling
  EXPECT_TRUE(std::isnan(Fp16ToFp32(0x7E00)));
}

TEST(Fp16Test, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(Fp32ToFp16(f), h) << std::hex << h;
  }
}

// Independent check of rounding: the nearest half found by search over every
// finite half, ties to the even code.
TEST(Fp16Test, MatchesNearestHalfSearch) {
  std::vector<double> values;  // positive finite halves, increasing with the code
  for (uint32_t h = 0; h <= 0x7BFF; ++h) values.push_back(Fp16ToFp32(static_cast<uint16_t>(h)));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-27, 15);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::ldexp(mant(rng), exp(rng));
    uint16_t expect;
    if (f >= 65520.0f) {
      expect = 0x7C00;
    } else {
      const auto it = std::lower_bound(values.begin(), values.end(), static_cast<double>(f));
      size_t hi = static_cast<size_t>(it - values.begin());
      if (hi >= values.size()) hi = values.size() - 1;
      const size_t lo = hi == 0 ? 0 : hi - 1;
      const double dlo = f - values[lo], dhi = values[hi] - f;
      size_t pick = dlo < dhi ? lo : hi;
      if (dlo == dhi) pick = (lo % 2 == 0) ? lo : hi;
      expect = static_cast<uint16_t>(pick);
    }
    ASSERT_EQ(Fp32ToFp16(f), expect) << f;
    ASSERT_EQ(Fp32ToFp16(-f), expect | 0x8000) << f;
  }
}

TEST(Bf16Test, KnownValuesAndRounding) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Fp32ToBf16(-2.0f), 0xC000);
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7F7FFFFFu)), 0x7F80);  // max float rounds to inf
  // Subnormals are rounded, not flushed (GGML's current conversion).
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x80010000u)), 0x8001);
  EXPECT_EQ(Bf16ToFp32(0x0001), FromBits(0x00010000u));
  const uint16_t nan = Fp32ToBf16(FromBits(0x7F800001u));
  EXPECT_TRUE(std::isnan(Bf16ToFp32(nan)));
  EXPECT_NE(nan & 0x0040, 0);  // forced quiet
}

// ------------------------------------------------------------- round trips

struct RoundTripCase {
  TensorType type;
  double max_rel_rmse;  // rmse(error) / rms(x) on Gaussian data
};

class RoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTripTest, ErrorIsBounded) {
  const TensorType type = GetParam().type;
  const int64_t n = 1024;
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  double err2 = 0, x2 = 0;
  for (int row = 0; row < 16; ++row) {
    std::vector<float> x(n);
    const float scale = std::ldexp(1.0f, row - 8);  // magnitudes 2^-8 .. 2^7
    for (float& v : x) v = dist(rng) * scale;
    if (row == 3) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
    if (row == 5) std::fill(x.begin(), x.begin() + 256, 0.75f * scale);  // a constant block
    std::vector<uint8_t> q(RowBytesUnchecked(type, n));
    ASSERT_TRUE(QuantizeRow(type, x.data(), q.data(), n).ok());
    std::vector<float> y(n);
    DequantizeRow(type, q.data(), y.data(), n);
    double row_err2 = 0, row_x2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i]));
      row_err2 += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
      row_x2 += static_cast<double>(x[i]) * x[i];
    }
    if (row == 3) {
      for (int64_t i = 256; i < 512; ++i) EXPECT_EQ(y[i], 0.0f) << i;
    }
    err2 += row_err2 / row_x2;
    x2 += 1;
  }
  const double rel_rmse = std::sqrt(err2 / x2);
  EXPECT_LE(rel_rmse, GetParam().max_rel_rmse) << TypeName(type);
  if (type != TensorType::kF32) {
    EXPECT_GT(rel_rmse, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, RoundTripTest,
    ::testing::Values(RoundTripCase{TensorType::kF32, 0.0}, RoundTripCase{TensorType::kF16, 4e-4},
                      RoundTripCase{TensorType::kBF16, 3e-3},
                      RoundTripCase{TensorType::kQ8_0, 0.01},
                      RoundTripCase{TensorType::kQ4_0, 0.13},
                      RoundTripCase{TensorType::kQ4_1, 0.11},
                      RoundTripCase{TensorType::kQ5_0, 0.065},
                      RoundTripCase{TensorType::kQ5_1, 0.055},
                      RoundTripCase{TensorType::kQ2_K, 0.45},
                      RoundTripCase{TensorType::kQ3_K, 0.25},
                      RoundTripCase{TensorType::kQ4_K, 0.11},
                      RoundTripCase{TensorType::kQ5_K, 0.055},
                      RoundTripCase{TensorType::kQ6_K, 0.03},
                      RoundTripCase{TensorType::kMXFP4, 0.17},
                      RoundTripCase{TensorType::kIQ4_NL, 0.12},
                      RoundTripCase{TensorType::kIQ4_XS, 0.12}),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) {
      return std::string(TypeName(info.param.type));
    });

TEST(QuantizeRowTest, RejectsUnsupportedTypeAndBadLength) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_EQ(QuantizeRow(TensorType::kTQ1_0, x.data(), q.data(), 256).code(),
            absl::StatusCode::kInvalidArgument);
  // Decoded and dotted, but no encoder.
  EXPECT_EQ(QuantizeRow(TensorType::kIQ2_XXS, x.data(), q.data(), 256).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(QuantizeRow(TensorType::kQ8_K, x.data(), q.data(), 256).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(TensorType::kQ4_K, x.data(), q.data(), 128).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRow(TensorType::kQ4_0, x.data(), q.data(), 48).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(QuantizeRow(TensorType::kF16, x.data(), q.data(), 7).ok());
}

}  // namespace
}  // namespace colibri::ops
