#include "model/ops/activation_quant.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "model/ops/quantize.h"

namespace colibri::ops::internal {
namespace {

std::vector<float> Storage(const ActivationLayout& layout) {
  return std::vector<float>(layout.row_bytes / sizeof(float), 0.0f);
}

TEST(ActivationQuantTest, FormatPerWeightType) {
  EXPECT_EQ(ActivationFormatFor(TensorType::kQ4_0), ActivationFormat::kQ8_0);
  EXPECT_EQ(ActivationFormatFor(TensorType::kQ8_0), ActivationFormat::kQ8_0);
  EXPECT_EQ(ActivationFormatFor(TensorType::kQ5_1), ActivationFormat::kQ8_1);
  EXPECT_EQ(ActivationFormatFor(TensorType::kQ6_K), ActivationFormat::kQ8_K);
  EXPECT_EQ(ActivationFormatFor(TensorType::kF16), ActivationFormat::kFloat);
}

TEST(ActivationQuantTest, Q8_0) {
  const ActivationLayout layout = MakeActivationLayout(ActivationFormat::kQ8_0, 64);
  EXPECT_EQ(layout.row_bytes % 64, 0u);
  std::vector<float> x(64, 0.0f);
  for (int j = 0; j < 32; ++j) x[j] = 0.1f * (j - 12);  // amax 1.9 at j = 31
  x[40] = -4.0f;
  auto storage = Storage(layout);
  auto* row = reinterpret_cast<uint8_t*>(storage.data());
  QuantizeActivationRow(layout, x.data(), row);
  const QuantizedRow q = QuantizedRow::At(layout, row);
  const float amax0 = 0.1f * 19;
  EXPECT_EQ(q.d[0], Fp16ToFp32(Fp32ToFp16(amax0 / 127.0f)));
  EXPECT_EQ(q.qs[31], 127);
  EXPECT_EQ(q.qs[12], 0);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(q.qs[j], static_cast<int>(std::nearbyint(x[j] * (127.0f / amax0)))) << j;
  }
  EXPECT_EQ(q.d[1], Fp16ToFp32(Fp32ToFp16(4.0f / 127.0f)));
  EXPECT_EQ(q.qs[40], -127);
  EXPECT_EQ(q.qs[41], 0);
}

TEST(ActivationQuantTest, Q8_0RoundsHalfToEven) {
  const ActivationLayout layout = MakeActivationLayout(ActivationFormat::kQ8_0, 32);
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // scale 1: x * 127 / 127 = x
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  auto storage = Storage(layout);
  auto* row = reinterpret_cast<uint8_t*>(storage.data());
  QuantizeActivationRow(layout, x.data(), row);
  const QuantizedRow q = QuantizedRow::At(layout, row);
  EXPECT_EQ(q.qs[1], 2);
  EXPECT_EQ(q.qs[2], -4);
  EXPECT_EQ(q.qs[3], 0);
}

TEST(ActivationQuantTest, Q8_1Sum) {
  const ActivationLayout layout = MakeActivationLayout(ActivationFormat::kQ8_1, 32);
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j % 5) - 1.0f;
  auto storage = Storage(layout);
  auto* row = reinterpret_cast<uint8_t*>(storage.data());
  QuantizeActivationRow(layout, x.data(), row);
  const QuantizedRow q = QuantizedRow::At(layout, row);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += q.qs[j];
  const float d = 3.0f / 127.0f;
  EXPECT_EQ(q.s[0], Fp16ToFp32(Fp32ToFp16(d * static_cast<float>(sum))));
  EXPECT_EQ(q.d[0], Fp16ToFp32(Fp32ToFp16(d)));
}

TEST(ActivationQuantTest, Q8_KUsesSignedMaxAndBsums) {
  const ActivationLayout layout = MakeActivationLayout(ActivationFormat::kQ8_K, 512);
  std::vector<float> x(512);
  for (int j = 0; j < 256; ++j) x[j] = 0.01f * static_cast<float>((j * 7) % 61 - 30);
  x[100] = -5.0f;  // block 0: largest magnitude is negative
  for (int j = 256; j < 512; ++j) x[j] = 0.0f;  // block 1: all zero
  auto storage = Storage(layout);
  auto* row = reinterpret_cast<uint8_t*>(storage.data());
  QuantizeActivationRow(layout, x.data(), row);
  const QuantizedRow q = QuantizedRow::At(layout, row);
  const float iscale = -127.0f / -5.0f;
  EXPECT_EQ(q.d[0], 1.0f / iscale);
  EXPECT_GT(q.d[0], 0.0f);
  EXPECT_EQ(q.qs[100], -127);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += q.qs[16 * g + j];
    EXPECT_EQ(q.bsums[g], sum) << g;
  }
  EXPECT_EQ(q.d[1], 0.0f);
  for (int j = 256; j < 512; ++j) EXPECT_EQ(q.qs[j], 0);
  for (int g = 16; g < 32; ++g) EXPECT_EQ(q.bsums[g], 0);

  // A positive maximum gives a negative d (GGML maps the max to -127).
  std::vector<float> y(512, 0.0f);
  y[3] = 2.0f;
  y[4] = -1.0f;
  QuantizeActivationRow(layout, y.data(), row);
  EXPECT_LT(q.d[0], 0.0f);
  EXPECT_EQ(q.qs[3], -127);
  EXPECT_EQ(q.qs[4], 64);  // nearest_int(63.5) rounds half to even
}

}  // namespace
}  // namespace colibri::ops::internal
