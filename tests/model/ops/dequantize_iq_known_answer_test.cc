// The i-quants decoded from blocks assembled byte by byte from GGML's layouts
// (ggml-common.h), with the expected values worked out by hand from the
// published grid entries quoted here (iq2xxs_grid[1] = 0x080808080808082b:
// byte j is the magnitude of weight j). A second copy of each block with a
// different scale checks the block stride.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"

namespace colibri::ops {
namespace {

constexpr uint16_t kHalfOne = 0x3C00;
constexpr uint16_t kHalfHalf = 0x3800;
constexpr uint16_t kHalfQuarter = 0x3400;
constexpr uint16_t kHalfTwo = 0x4000;

// GGML's kvalues_iq4nl.
constexpr int kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};

void Put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }
void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }

// Decodes `block` twice in a row, the second copy with its fp16 scale at
// d_offset set to 2.0 (or, for IQ1_M, `second` given whole); checks that the
// second copy is the first times 2.0 / first_d.
std::vector<float> Decode(TensorType type, const std::vector<uint8_t>& block, size_t d_offset,
                          float first_d, int64_t n) {
  std::vector<uint8_t> row(block);
  row.insert(row.end(), block.begin(), block.end());
  Put16(row, block.size() + d_offset, kHalfTwo);
  EXPECT_EQ(row.size(), RowBytesUnchecked(type, 2 * n));
  std::vector<float> out(2 * n);
  DequantizeRow(type, row.data(), out.data(), 2 * n);
  for (int64_t e = 0; e < n; ++e) EXPECT_EQ(out[n + e], out[e] * (2.0f / first_d)) << e;
  out.resize(n);
  return out;
}

void ExpectRange(const std::vector<float>& y, int from, std::vector<float> want) {
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(y[from + k], want[k]) << "element " << from + k;
}

void ExpectFill(const std::vector<float>& y, int from, int to, float v) {
  for (int e = from; e < to; ++e) EXPECT_EQ(y[e], v) << "element " << e;
}

TEST(DequantizeIqKnownAnswer, IQ4_NL) {
  std::vector<uint8_t> b(18);
  Put16(b, 0, kHalfHalf);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = Decode(TensorType::kIQ4_NL, b, 0, 0.5f, 32);
  EXPECT_EQ(y[0], -63.5f);
  EXPECT_EQ(y[15], 56.5f);
  EXPECT_EQ(y[16], 56.5f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * kIq4nl[j]);
    EXPECT_EQ(y[16 + j], 0.5f * kIq4nl[15 - j]);
  }
}

TEST(DequantizeIqKnownAnswer, IQ4_XS) {
  std::vector<uint8_t> b(136);
  Put16(b, 0, kHalfQuarter);
  const int ls[8] = {0, 63, 32, 33, 31, 40, 20, 1};  // 6-bit scales, value ls - 32
  uint16_t high = 0;
  for (int ib = 0; ib < 8; ++ib) {
    b[4 + ib / 2] = static_cast<uint8_t>(b[4 + ib / 2] | ((ls[ib] & 0xF) << (4 * (ib % 2))));
    high = static_cast<uint16_t>(high | ((ls[ib] >> 4) << (2 * ib)));
    for (int j = 0; j < 16; ++j) b[8 + 16 * ib + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  Put16(b, 2, high);
  const auto y = Decode(TensorType::kIQ4_XS, b, 0, 0.25f, 256);
  EXPECT_EQ(y[0], 1016.0f);    // 0.25 * -32 * -127
  EXPECT_EQ(y[32], -984.25f);  // 0.25 * 31 * -127
  EXPECT_EQ(y[64], 0.0f);      // ls 32
  for (int ib = 0; ib < 8; ++ib) {
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[32 * ib + j], 0.25f * (ls[ib] - 32) * kIq4nl[j]) << ib << " " << j;
      EXPECT_EQ(y[32 * ib + 16 + j], 0.25f * (ls[ib] - 32) * kIq4nl[15 - j]) << ib << " " << j;
    }
  }
}

// Grid entries used below (GGML's tables):
//   iq2xxs_grid[0] = 0x0808080808080808, [1] = 0x080808080808082b,
//   [2] = 0x0808080808081919, [255] = 0x2b2b2b1908081908;
//   iq2xs_grid[0] = iq2s_grid[0] = 0x0808080808080808,
//   iq2xs_grid[511] = iq2s_grid[1023] = 0x2b2b2b2b2b2b2b2b;
//   iq3xxs_grid[0] = 0x04040404, [1] = 0x04040414, [255] = 0x3e341c04;
//   iq3s_grid[0] = 0x01010101, [1] = 0x01010103, [511] = 0x0f0f0101;
//   iq1s_grid[0] = 0xffffffffffffffff, [1] = 0xffffffffffffff01,
//   [2047] = 0x0101010101010101.
// 7-bit sign fields gain bit 7 when they have an odd number of bits set.

TEST(DequantizeIqKnownAnswer, IQ2_XXS) {
  std::vector<uint8_t> b(66);
  Put16(b, 0, kHalfOne);
  b[2] = 0, b[3] = 1, b[4] = 2, b[5] = 255;  // grid indices of sub-block 0
  // signs: group 0 field 1 (weights 0, 7), group 1 none, group 2 field 127
  // (all 8), group 3 field 3 (weights 0, 1); scale 5: 1 * (0.5 + 5) / 4 = 1.375.
  Put32(b, 6, 1u | (0u << 7) | (127u << 14) | (3u << 21) | (5u << 28));
  const auto y = Decode(TensorType::kIQ2_XXS, b, 0, 1.0f, 256);
  ExpectRange(y, 0, {-11, 11, 11, 11, 11, 11, 11, -11});
  ExpectRange(y, 8, {59.125f, 11, 11, 11, 11, 11, 11, 11});
  ExpectRange(y, 16, {-34.375f, -34.375f, -11, -11, -11, -11, -11, -11});
  ExpectRange(y, 24, {-11, -34.375f, 11, 11, 34.375f, 59.125f, 59.125f, 59.125f});
  ExpectFill(y, 32, 256, 1.0f);  // index 0, scale 0: 8 * 0.5 / 4
}

TEST(DequantizeIqKnownAnswer, IQ2_XS) {
  std::vector<uint8_t> b(74);
  Put16(b, 0, kHalfHalf);
  Put16(b, 2, 511 | (1 << 9));  // group 0: index 511, sign field 1 (weights 0, 7)
  Put16(b, 6, 0 | (127 << 9));  // group 2: index 0, all negative
  b[66] = 0x21;  // sub-block 0: groups 0-1 scale 1 (0.5 * 1.5 / 4), groups 2-3 scale 2
  const auto y = Decode(TensorType::kIQ2_XS, b, 0, 0.5f, 256);
  ExpectRange(y, 0, {-8.0625f, 8.0625f, 8.0625f, 8.0625f, 8.0625f, 8.0625f, 8.0625f, -8.0625f});
  ExpectFill(y, 8, 16, 1.5f);
  ExpectFill(y, 16, 24, -2.5f);
  ExpectFill(y, 24, 32, 2.5f);
  ExpectFill(y, 32, 256, 0.5f);
}

TEST(DequantizeIqKnownAnswer, IQ2_S) {
  std::vector<uint8_t> b(82);
  Put16(b, 0, kHalfOne);
  b[2 + 0] = 0xFF;      // group 0 low index bits; qh[0] bits 0-1 add 0x300: index 1023
  b[2 + 4 + 3] = 0xFF;  // sub-block 1 group 3; qh[1] bits 6-7: index 1023
  b[66] = 0x03;
  b[67] = 0xC0;
  b[2 + 32 + 0] = 0x80;  // sign bytes of sub-block 0
  b[2 + 32 + 2] = 0xFF;
  b[2 + 32 + 3] = 0x01;
  b[74] = 0x10;  // sub-block 0 scales 0 (1 * 0.5 / 4) and 1 (1.5 / 4)
  const auto y = Decode(TensorType::kIQ2_S, b, 0, 1.0f, 256);
  ExpectRange(y, 0, {5.375f, 5.375f, 5.375f, 5.375f, 5.375f, 5.375f, 5.375f, -5.375f});
  ExpectFill(y, 8, 16, 1.0f);
  ExpectFill(y, 16, 24, -3.0f);
  ExpectRange(y, 24, {-3, 3, 3, 3, 3, 3, 3, 3});
  ExpectFill(y, 32, 56, 1.0f);
  ExpectFill(y, 56, 64, 5.375f);
  ExpectFill(y, 64, 256, 1.0f);
}

TEST(DequantizeIqKnownAnswer, IQ3_XXS) {
  std::vector<uint8_t> b(98);
  Put16(b, 0, kHalfOne);
  b[2 + 1] = 1;    // group 0: entries 0 | 1
  b[2 + 2] = 255;  // group 1: entries 255 | 0
  // group 0 sign field 2 (weights 1, 7); scale 1: 1 * 1.5 / 2 = 0.75
  Put32(b, 2 + 64, 2u | (1u << 28));
  const auto y = Decode(TensorType::kIQ3_XXS, b, 0, 1.0f, 256);
  ExpectRange(y, 0, {3, -3, 3, 3, 15, 3, 3, -3});
  ExpectRange(y, 8, {3, 21, 39, 46.5f, 3, 3, 3, 3});
  ExpectFill(y, 16, 32, 3.0f);
  ExpectFill(y, 32, 256, 1.0f);  // scale 0: 4 * 0.5 / 2
}

TEST(DequantizeIqKnownAnswer, IQ3_S) {
  std::vector<uint8_t> b(110);
  Put16(b, 0, kHalfHalf);
  b[2 + 0] = 1;     // group 0 first half: entry 1 (qh[0] bit 0 clear)
  b[2 + 1] = 0xFF;  // second half: 255 | 256 from qh[0] bit 1
  b[66] = 0x02;
  b[74] = 0x11;   // signs of group 0: weights 0 and 4
  b[106] = 0x32;  // sub-block 0 scale 2: 0.5 * 5; sub-block 1 scale 3: 0.5 * 7
  const auto y = Decode(TensorType::kIQ3_S, b, 0, 0.5f, 256);
  ExpectRange(y, 0, {-7.5f, 2.5f, 2.5f, 2.5f, -2.5f, 2.5f, 37.5f, 37.5f});
  ExpectFill(y, 8, 32, 2.5f);
  ExpectFill(y, 32, 64, 3.5f);
  ExpectFill(y, 64, 256, 0.5f);
}

TEST(DequantizeIqKnownAnswer, IQ1_S) {
  std::vector<uint8_t> b(50);
  Put16(b, 0, kHalfOne);
  b[2 + 0] = 0xFF;  // group 0: 0xFF | 7 << 8 = entry 2047
  b[2 + 1] = 1;     // group 1: entry 1
  // qh[0]: group 0 high bits 7, scale 2 (2 * 2 + 1 = 5), shift -1/8
  Put16(b, 34, static_cast<uint16_t>(7 | (2 << 12) | 0x8000));
  const auto y = Decode(TensorType::kIQ1_S, b, 0, 1.0f, 256);
  ExpectFill(y, 0, 8, 4.375f);  // 5 * (1 - 0.125)
  ExpectRange(y, 8, {4.375f, -5.625f, -5.625f, -5.625f, -5.625f, -5.625f, -5.625f, -5.625f});
  ExpectFill(y, 16, 32, -5.625f);
  ExpectFill(y, 32, 256, -0.875f);  // entry 0, scale 1, shift +1/8
}

TEST(DequantizeIqKnownAnswer, IQ1_M) {
  std::vector<uint8_t> b(56);
  b[0] = 0xFF;          // group 0: 0xFF | (qh[0] & 7) << 8 = entry 2047
  b[1] = 1;             // group 1: entry 1
  b[32] = 0x07 | 0x80;  // qh[0]: group 0 high bits 7, shift +; group 1 high 0, shift -
  b[33] = 0x08;         // qh[1]: group 2 shift -, group 3 shift +
  // Scale words: sub-block 0 scales 1 and 2 (3 and 5); d = 1.0 = 0x3C00 in the
  // top nibbles of words 0..3 (low nibble first).
  Put16(b, 48, static_cast<uint16_t>(1 | (2 << 3)));
  Put16(b, 50, 0x0000);
  Put16(b, 52, 0xC000);
  Put16(b, 54, 0x3000);
  std::vector<uint8_t> row(b);
  row.insert(row.end(), b.begin(), b.end());
  row[56 + 55] = 0x40;  // second block: d = 0x4C00 = 16.0
  std::vector<float> y(512);
  DequantizeRow(TensorType::kIQ1_M, row.data(), y.data(), 512);
  ExpectFill(y, 0, 8, 3.375f);  // 3 * (1 + 0.125)
  ExpectRange(y, 8, {2.625f, -3.375f, -3.375f, -3.375f, -3.375f, -3.375f, -3.375f, -3.375f});
  ExpectFill(y, 16, 24, -5.625f);  // 5 * (-1 - 0.125)
  ExpectFill(y, 24, 32, -4.375f);  // 5 * (-1 + 0.125)
  ExpectFill(y, 32, 256, -0.875f);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[256 + e], 16.0f * y[e]) << e;
}

}  // namespace
}  // namespace colibri::ops
