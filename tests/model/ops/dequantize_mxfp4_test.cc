// MXFP4 decoding against values derived from the OCP microscaling definition
// (e2m1 codes: sign, 2 exponent bits, 1 mantissa bit; e8m0 block exponent with
// bias 127), independently of the decoder's doubled-table formulation, and the
// scale of the real gpt-oss fixture's MXFP4 experts.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"
#include "tests/support/paths.h"

namespace colibri::ops {
namespace {

// The e2m1 value of a 4-bit code: 0.5 * m when the exponent is 0 (subnormal),
// else (1 + m/2) * 2^(e-1).
double E2m1(int code) {
  const int sign = code >> 3, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * std::ldexp(1.0, e - 1);
  return sign ? -mag : mag;
}

// One block: exponent byte, element j < 16 in the low nibble of byte j,
// element j + 16 in the high nibble.
std::vector<uint8_t> Block(uint8_t e, const int codes[32]) {
  std::vector<uint8_t> b(17);
  b[0] = e;
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(codes[j] | (codes[j + 16] << 4));
  return b;
}

TEST(Mxfp4Test, TypeTraits) {
  const TensorTypeTraits* t = FindTensorType(39);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name, "MXFP4");
  EXPECT_EQ(t->block_size, 32);
  EXPECT_EQ(t->type_size, 17);
  EXPECT_TRUE(t->supported);
  EXPECT_EQ(*ParseTensorType("mxfp4"), TensorType::kMXFP4);
}

TEST(Mxfp4Test, HandPickedValues) {
  int codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = j % 16;
  // E = 127 is a block scale of 1: the codes decode to their e2m1 values.
  std::vector<uint8_t> row = Block(127, codes);
  // Second block: scale 2^(130-127) = 8, codes reversed.
  int rev[32];
  for (int j = 0; j < 32; ++j) rev[j] = 15 - j % 16;
  const std::vector<uint8_t> second = Block(130, rev);
  row.insert(row.end(), second.begin(), second.end());
  std::vector<float> y(64);
  DequantizeRow(TensorType::kMXFP4, row.data(), y.data(), 64);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[3], 1.5f);
  EXPECT_EQ(y[4], 2.0f);
  EXPECT_EQ(y[5], 3.0f);
  EXPECT_EQ(y[6], 4.0f);
  EXPECT_EQ(y[7], 6.0f);
  EXPECT_EQ(y[9], -0.5f);
  EXPECT_EQ(y[15], -6.0f);
  EXPECT_EQ(y[16 + 7], 6.0f);    // high nibble of byte 7
  EXPECT_EQ(y[32 + 0], -48.0f);  // code 15 (-6) * 8
  EXPECT_EQ(y[32 + 8], 48.0f);   // code 7 (6) * 8
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], E2m1(codes[j])) << j;
    EXPECT_EQ(y[32 + j], 8.0 * E2m1(rev[j])) << j;
  }
}

TEST(Mxfp4Test, ExtremeExponents) {
  int codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = j % 16;
  for (int e : {0, 1, 2, 100, 254, 255}) {
    const std::vector<uint8_t> b = Block(static_cast<uint8_t>(e), codes);
    std::vector<float> y(32);
    DequantizeRow(TensorType::kMXFP4, b.data(), y.data(), 32);
    for (int j = 0; j < 32; ++j) {
      const double want = E2m1(codes[j]) * std::ldexp(1.0, e - 127);
      // Beyond float's range the product overflows to infinity.
      const float wantf = static_cast<float>(want);
      EXPECT_EQ(y[j], wantf) << "e=" << e << " j=" << j;
    }
  }
}

TEST(Mxfp4Test, QuantizeRoundTripsRepresentableValues) {
  // Values that are exactly e2m1 codes times 2^-3: quantize, dequantize, same.
  std::vector<float> x(64);
  for (int j = 0; j < 64; ++j) x[j] = static_cast<float>(E2m1(j % 16) * 0.125);
  x[5] = 6.0f * 0.125f;  // the block maximum sets the scale
  x[40] = -6.0f * 0.125f;
  std::vector<uint8_t> q(*RowBytes(TensorType::kMXFP4, 64));
  ASSERT_TRUE(QuantizeRow(TensorType::kMXFP4, x.data(), q.data(), 64).ok());
  std::vector<float> y(64);
  DequantizeRow(TensorType::kMXFP4, q.data(), y.data(), 64);
  for (int j = 0; j < 64; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

TEST(Mxfp4Test, QuantizeErrorIsBounded) {
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) x[j] = std::sin(0.37f * j) * std::ldexp(1.0f, j % 9 - 4);
  std::vector<uint8_t> q(*RowBytes(TensorType::kMXFP4, 256));
  ASSERT_TRUE(QuantizeRow(TensorType::kMXFP4, x.data(), q.data(), 256).ok());
  std::vector<float> y(256);
  DequantizeRow(TensorType::kMXFP4, q.data(), y.data(), 256);
  for (int b = 0; b < 8; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
    // Steps are at most 2 units of 2^(k-3) for amax in [2^k, 2^(k+1)), and values
    // above 12 units are clipped to 12: the error stays within amax / 4.
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[32 * b + j] - x[32 * b + j]), amax / 4) << j;
  }
}

// The gpt-oss fixture's weights are normal samples scaled by 1/sqrt(fan-in)
// (its gate/up experts get a further factor for large activations, so they
// are not used here): the MXFP4 down experts (fan-in 96) must decode to the
// same normalised spread as the Q8_0 attention (fan-in 64). A scale off by the
// e8m0 convention's factor of 2 would give a ratio of 2 or 1/2.
TEST(Mxfp4Test, GptOssFixtureExpertsHaveTheFanInScale) {
  const std::string dir = testing::FixturesDir();
  if (dir.empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  const std::string path = dir + "/models/gpt-oss-tiny-mxfp4.gguf";
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) GTEST_SKIP() << "cannot open " << path << ": " << file.status();
  // rms(weights) * sqrt(fan-in)
  auto normalised_rms = [&](const std::string& name, TensorType want_type, int64_t fan_in) {
    for (const gguf::TensorInfo& t : (*file)->tensors()) {
      if (t.name != name) continue;
      EXPECT_EQ(t.type, want_type) << name;
      EXPECT_EQ(t.row_length(), fan_in) << name;
      std::vector<float> row(t.row_length());
      const uint64_t row_bytes = *RowBytes(t.type, t.row_length());
      double sum = 0;
      for (int64_t r = 0; r < t.rows(); ++r) {
        DequantizeRow(t.type, t.data + r * row_bytes, row.data(), t.row_length());
        for (float v : row) sum += static_cast<double>(v) * v;
      }
      return std::sqrt(sum / static_cast<double>(t.n_elements) * static_cast<double>(fan_in));
    }
    ADD_FAILURE() << "no tensor " << name;
    return 0.0;
  };
  for (const char* layer : {"blk.0.", "blk.2."}) {
    const double experts =
        normalised_rms(std::string(layer) + "ffn_down_exps.weight", TensorType::kMXFP4, 96);
    const double attention =
        normalised_rms(std::string(layer) + "attn_q.weight", TensorType::kQ8_0, 64);
    EXPECT_NEAR(attention, 1.0, 0.1) << layer;
    EXPECT_NEAR(experts, 1.0, 0.1) << layer;
  }
}

}  // namespace
}  // namespace colibri::ops
