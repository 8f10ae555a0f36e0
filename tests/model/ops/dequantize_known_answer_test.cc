// Dequantization of blocks assembled byte by byte from GGML's layouts
// (ggml-common.h), so that a layout mistake in the decoders fails here. Each
// test checks a few elements computed by hand and then every element against
// the layout formula restated in the test.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"

namespace colibri::ops {
namespace {

constexpr uint16_t kHalfOne = 0x3C00;      // 1.0
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25
constexpr uint16_t kHalfEighth = 0x3000;   // 0.125
constexpr uint16_t kHalfTwo = 0x4000;      // 2.0
constexpr uint16_t kHalfMinusOne = 0xBC00;

void Put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }
void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }

// Two copies of a block; the second with its scale field replaced, so that a
// decoder reading the wrong block stride fails.
std::vector<float> DecodeTwoBlocks(TensorType type, const std::vector<uint8_t>& block,
                                   size_t d_offset, uint16_t second_d, int64_t block_size) {
  std::vector<uint8_t> row(block);
  row.insert(row.end(), block.begin(), block.end());
  Put16(row, block.size() + d_offset, second_d);
  EXPECT_EQ(row.size(), RowBytesUnchecked(type, 2 * block_size));
  std::vector<float> out(2 * block_size);
  DequantizeRow(type, row.data(), out.data(), 2 * block_size);
  return out;
}

TEST(DequantizeKnownAnswer, Q4_0) {
  std::vector<uint8_t> b(18);
  Put16(b, 0, kHalfHalf);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>((j & 15) | (((3 * j + 1) & 15) << 4));
  const auto y = DecodeTwoBlocks(TensorType::kQ4_0, b, 0, kHalfOne, 32);
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[15], 3.5f);
  EXPECT_EQ(y[16], -3.5f);
  EXPECT_EQ(y[31], 3.0f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[16 + j], (((3 * j + 1) & 15) - 8) * 0.5f);
    EXPECT_EQ(y[32 + j], (j - 8) * 1.0f);
  }
}

TEST(DequantizeKnownAnswer, Q4_1) {
  std::vector<uint8_t> b(20);
  Put16(b, 0, kHalfQuarter);
  Put16(b, 2, kHalfMinusOne);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>((j & 15) | (((3 * j + 1) & 15) << 4));
  const auto y = DecodeTwoBlocks(TensorType::kQ4_1, b, 0, kHalfHalf, 32);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[15], 2.75f);
  EXPECT_EQ(y[16], -0.75f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.25f - 1.0f);
    EXPECT_EQ(y[16 + j], ((3 * j + 1) & 15) * 0.25f - 1.0f);
    EXPECT_EQ(y[32 + j], j * 0.5f - 1.0f);
  }
}

TEST(DequantizeKnownAnswer, Q5_0) {
  std::vector<uint8_t> b(22);
  Put16(b, 0, kHalfOne);
  const uint32_t qh = 0x80000001u | 0x00F00000u;  // bits 0, 20..23, 31
  Put32(b, 2, qh);
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>((j & 15) | (((3 * j + 1) & 15) << 4));
  const auto y = DecodeTwoBlocks(TensorType::kQ5_0, b, 0, kHalfTwo, 32);
  EXPECT_EQ(y[0], 0.0f);    // (0 | 16) - 16
  EXPECT_EQ(y[1], -15.0f);  // 1 - 16
  EXPECT_EQ(y[16], -15.0f); // high nibble of qs[0] = 1, bit 16 clear
  EXPECT_EQ(y[31], 14.0f);  // high nibble of qs[15] = 14, bit 31 set
  for (int e = 0; e < 32; ++e) {
    const int low = e < 16 ? (e & 15) : ((3 * (e - 16) + 1) & 15);
    const int v = (low | (((qh >> e) & 1) << 4)) - 16;
    EXPECT_EQ(y[e], static_cast<float>(v)) << e;
    EXPECT_EQ(y[32 + e], 2.0f * v) << e;
  }
}

TEST(DequantizeKnownAnswer, Q5_1) {
  std::vector<uint8_t> b(24);
  Put16(b, 0, kHalfHalf);
  Put16(b, 2, kHalfTwo);
  const uint32_t qh = 0x0000FFFFu;
  Put32(b, 4, qh);
  for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<uint8_t>((j & 15) | (((3 * j + 1) & 15) << 4));
  const auto y = DecodeTwoBlocks(TensorType::kQ5_1, b, 0, kHalfOne, 32);
  EXPECT_EQ(y[0], 10.0f);  // 16 * 0.5 + 2
  EXPECT_EQ(y[16], 2.5f);  // 1 * 0.5 + 2
  for (int e = 0; e < 32; ++e) {
    const int low = e < 16 ? (e & 15) : ((3 * (e - 16) + 1) & 15);
    const int v = low | (((qh >> e) & 1) << 4);
    EXPECT_EQ(y[e], v * 0.5f + 2.0f) << e;
    EXPECT_EQ(y[32 + e], v * 1.0f + 2.0f) << e;
  }
}

TEST(DequantizeKnownAnswer, Q8_0) {
  std::vector<uint8_t> b(34);
  Put16(b, 0, kHalfQuarter);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  b[2] = static_cast<uint8_t>(static_cast<int8_t>(-128));
  const auto y = DecodeTwoBlocks(TensorType::kQ8_0, b, 0, kHalfTwo, 32);
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[31], 3.75f);
  for (int j = 1; j < 32; ++j) {
    EXPECT_EQ(y[j], (j - 16) * 0.25f);
    EXPECT_EQ(y[32 + j], (j - 16) * 2.0f);
  }
}

// block_q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin.
TEST(DequantizeKnownAnswer, Q2_K) {
  std::vector<uint8_t> b(84);
  for (int g = 0; g < 16; ++g) b[g] = static_cast<uint8_t>(g | ((15 - g) << 4));
  for (int i = 0; i < 64; ++i) b[16 + i] = static_cast<uint8_t>((i * 37 + 11) & 255);
  Put16(b, 80, kHalfHalf);
  Put16(b, 82, kHalfQuarter);
  const auto y = DecodeTwoBlocks(TensorType::kQ2_K, b, 80, kHalfOne, 256);
  // e = 0: qs[0] = 11 = 0b1011 -> q = 3; scale 0, min 15: 0 * 3 - 3.75
  EXPECT_EQ(y[0], -3.75f);
  // e = 40: qs[8] = 51 = 0b110011, shift 2 -> q = 0; group 2: scale 2, min 13 -> -3.25
  EXPECT_EQ(y[40], -3.25f);
  // e = 255: qs[63] = 2342 & 255 = 38 = 0b00100110, shift 6 -> q = 0; group 15: scale 15, min 0
  EXPECT_EQ(y[255], 0.0f);
  // e = 129: qs[33] = 1232 & 255 = 208 = 0b11010000, shift 0 -> q = 0; group 8: scale 8, min 7
  EXPECT_EQ(y[129], -1.75f);
  for (int e = 0; e < 256; ++e) {
    const int q = (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int sc = b[e / 16] & 15, m = b[e / 16] >> 4;
    EXPECT_EQ(y[e], (0.5f * sc) * q - 0.25f * m) << e;
    EXPECT_EQ(y[256 + e], (1.0f * sc) * q - 0.25f * m) << e;
  }
}

// block_q3_K: hmask[32], qs[64], scales[12] (16 6-bit values), d.
TEST(DequantizeKnownAnswer, Q3_K) {
  std::vector<uint8_t> b(110);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<uint8_t>((i * 53 + 7) & 255);
  for (int i = 0; i < 64; ++i) b[32 + i] = static_cast<uint8_t>((i * 37 + 11) & 255);
  int s[16];
  for (int g = 0; g < 16; ++g) s[g] = (g * 5 + 2) & 63;
  uint8_t* sc = &b[96];
  for (int k = 0; k < 8; ++k) sc[k] = static_cast<uint8_t>((s[k] & 15) | ((s[k + 8] & 15) << 4));
  for (int k = 0; k < 4; ++k) {
    sc[8 + k] = static_cast<uint8_t>((s[k] >> 4) | ((s[k + 4] >> 4) << 2) | ((s[k + 8] >> 4) << 4) |
                                     ((s[k + 12] >> 4) << 6));
  }
  Put16(b, 108, kHalfTwo);
  const auto y = DecodeTwoBlocks(TensorType::kQ3_K, b, 108, kHalfHalf, 256);
  // e = 0: qs[0] = 11 -> low 3; hmask[0] = 7 bit 0 set -> q = 3; s[0] = 2 -> (2 * -30) * 3
  EXPECT_EQ(y[0], -180.0f);
  // e = 37: qs[5] = 196 = 0b11000100 shift 2 -> 1; hmask[5] = 272&255 = 16 bit 1 clear -> 1-4 = -3;
  // group 2: s = 12 -> (2 * -20) * -3 = 120
  EXPECT_EQ(y[37], 120.0f);
  for (int e = 0; e < 256; ++e) {
    const int low = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int high = (b[e % 32] >> (e / 32)) & 1;
    const int q = low - (high ? 0 : 4);
    const int scale = s[e / 16] - 32;
    EXPECT_EQ(y[e], (2.0f * scale) * q) << e;
    EXPECT_EQ(y[256 + e], (0.5f * scale) * q) << e;
  }
}

// The 12 scale bytes of Q4_K / Q5_K: 8 6-bit scales and 8 6-bit mins.
void PackK4Scales(const int sc[8], const int m[8], uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// block_q4_K: d, dmin, scales[12], qs[128].
TEST(DequantizeKnownAnswer, Q4_K) {
  std::vector<uint8_t> b(144);
  Put16(b, 0, kHalfOne);
  Put16(b, 2, kHalfHalf);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = 7 * j + 3;
    m[j] = 63 - 5 * j;
  }
  PackK4Scales(sc, m, &b[4]);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i * 13 + 5) & 255);
  const auto y = DecodeTwoBlocks(TensorType::kQ4_K, b, 0, kHalfTwo, 256);
  EXPECT_EQ(y[0], -16.5f);   // qs[0] = 5: 3 * 5 - 0.5 * 63
  EXPECT_EQ(y[32], -29.0f);  // high nibble of qs[0] = 0: 10 * 0 - 0.5 * 58
  EXPECT_EQ(y[255], 350.0f); // high nibble of qs[127] = 120 >> 4 = 7: 52 * 7 - 0.5 * 28
  for (int e = 0; e < 256; ++e) {
    const uint8_t byte = b[16 + 32 * (e / 64) + e % 32];
    const int q = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], (1.0f * sc[e / 32]) * q - 0.5f * m[e / 32]) << e;
    EXPECT_EQ(y[256 + e], (2.0f * sc[e / 32]) * q - 0.5f * m[e / 32]) << e;
  }
}

// block_q5_K: d, dmin, scales[12], qh[32], qs[128].
TEST(DequantizeKnownAnswer, Q5_K) {
  std::vector<uint8_t> b(176);
  Put16(b, 0, kHalfHalf);
  Put16(b, 2, kHalfOne);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = 63 - 6 * j;
    m[j] = 4 * j + 17;
  }
  PackK4Scales(sc, m, &b[4]);
  for (int i = 0; i < 32; ++i) b[16 + i] = static_cast<uint8_t>((i * 29) & 255);
  for (int i = 0; i < 128; ++i) b[48 + i] = static_cast<uint8_t>((i * 13 + 5) & 255);
  const auto y = DecodeTwoBlocks(TensorType::kQ5_K, b, 0, kHalfTwo, 256);
  // e = 1: qs[1] = 18 -> 2; qh[1] = 29 bit 0 set -> 18; (0.5 * 63) * 18 - 17
  EXPECT_EQ(y[1], 550.0f);
  for (int e = 0; e < 256; ++e) {
    const uint8_t byte = b[48 + 32 * (e / 64) + e % 32];
    const int q = ((e % 64) < 32 ? (byte & 15) : (byte >> 4)) + (((b[16 + e % 32] >> (e / 32)) & 1) << 4);
    EXPECT_EQ(y[e], (0.5f * sc[e / 32]) * q - 1.0f * m[e / 32]) << e;
    EXPECT_EQ(y[256 + e], (2.0f * sc[e / 32]) * q - 1.0f * m[e / 32]) << e;
  }
}

// block_q6_K: ql[128], qh[64], scales[16] (int8), d.
TEST(DequantizeKnownAnswer, Q6_K) {
  std::vector<uint8_t> b(210);
  for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>((i * 7 + 1) & 255);
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<uint8_t>((i * 11 + 3) & 255);
  int s[16];
  for (int g = 0; g < 16; ++g) {
    s[g] = 9 * g - 70;
    b[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(s[g]));
  }
  Put16(b, 208, kHalfEighth);
  const auto y = DecodeTwoBlocks(TensorType::kQ6_K, b, 208, kHalfOne, 256);
  // e = 0: ql[0] = 1 -> 1; qh[0] = 3 -> bits 0..1 = 3 -> 49 - 32 = 17; (0.125 * -70) * 17
  EXPECT_EQ(y[0], -148.75f);
  // e = 100: ql[36] = 253 high nibble 15; qh[4] = 47 = 0b00101111 bits 6..7 = 0 -> 15 - 32 = -17;
  // group 6: s = -16 -> (0.125 * -16) * -17 = 34
  EXPECT_EQ(y[100], 34.0f);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 128, w = e % 128;
    const uint8_t lbyte = b[64 * c + w % 64];
    const int low = w < 64 ? (lbyte & 15) : (lbyte >> 4);
    const int high = (b[128 + 32 * c + w % 32] >> (2 * (w / 32))) & 3;
    const int q = (low | (high << 4)) - 32;
    EXPECT_EQ(y[e], (0.125f * s[e / 16]) * q) << e;
    EXPECT_EQ(y[256 + e], (1.0f * s[e / 16]) * q) << e;
  }
}

TEST(DequantizeKnownAnswer, FloatTypes) {
  const uint16_t f16[3] = {0x3C00, 0xC000, 0x0001};
  float y[3];
  DequantizeRow(TensorType::kF16, f16, y, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 5.9604645e-8f);
  const uint16_t bf16[2] = {0x3F80, 0x4049};
  DequantizeRow(TensorType::kBF16, bf16, y, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 3.140625f);
  const float f32[2] = {1.5f, -0.25f};
  DequantizeRow(TensorType::kF32, f32, y, 2);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -0.25f);
}

}  // namespace
}  // namespace colibri::ops
