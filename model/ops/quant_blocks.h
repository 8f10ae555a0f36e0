// GGML block layouts (ggml-common.h) and the scalar helpers shared by the
// reference and fast kernels. Internal to model/ops.
//
// A block is read in place from a row of RowBytes(type, n) bytes: rows start on
// at least 2-byte boundaries (GGUF aligns tensor data to 32), and every block
// below has 2-byte alignment, so casting a row pointer to a block pointer is
// well aligned.
#ifndef COLIBRI_MODEL_OPS_QUANT_BLOCKS_H_
#define COLIBRI_MODEL_OPS_QUANT_BLOCKS_H_

#include <cstdint>
#include <cstring>

namespace colibri::ops {

inline constexpr int kQK = 32;    // elements per block of the legacy types
inline constexpr int kQK_K = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;       // fp16 scale
  uint8_t qs[16];   // element j: low nibble of qs[j]; element j + 16: high nibble
};
struct BlockQ4_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 minimum
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j (little-endian uint32) is bit 4 of element j
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ2_K {
  uint8_t scales[16];  // low nibble: scale, high nibble: min, per 16 elements
  uint8_t qs[64];      // 2-bit quants
  uint16_t d;          // super-block scale of the scales
  uint16_t dmin;       // super-block scale of the mins
};
struct BlockQ3_K {
  uint8_t hmask[32];   // high bit of each quant
  uint8_t qs[64];      // low 2 bits
  uint8_t scales[12];  // 16 6-bit scales
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // 8 6-bit scales and 8 6-bit mins (GetScaleMinK4)
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];  // low 4 bits
  uint8_t qh[64];   // high 2 bits
  int8_t scales[16];
  uint16_t d;
};

// MXFP4: e8m0 exponent E, value = kMxfp4Values[code] * 2^(E - 128) (the table
// holds doubled e2m1 values, hence -128 rather than -127); element j < 16 is
// the low nibble of qs[j], element j + 16 the high nibble.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
// IQ4_NL: value = d * kIq4nlValues[code], nibbles as in Q4_0.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales ls (low 4 bits in scales_l, two
// per byte; high 2 bits in scales_h, two bits per sub-block); value =
// d * (ls - 32) * kIq4nlValues[code], nibbles per sub-block as in Q4_0.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
// IQ2_XXS: per 32 elements two uint32: four 8-bit grid indices, then four
// 7-bit sign fields and a 4-bit scale (top bits) of the sub-block.
struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[32];
};
// IQ2_XS: per 8 elements a 9-bit grid index and a 7-bit sign field; a 4-bit
// scale per 16 elements.
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[32];
  uint8_t scales[8];
};
// IQ2_S: 10-bit grid indices (low 8 bits in qs[0..31], high 2 in qh), 8 full
// sign bytes (qs[32..63]), a 4-bit scale per 16 elements.
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t scales[8];
};
// IQ3_XXS: 64 8-bit grid indices (4 elements each), then per 32 elements a
// uint32 of four 7-bit sign fields and a 4-bit scale.
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[96];
};
// IQ3_S: 9-bit grid indices (low 8 in qs, high bit in qh), sign bytes, a
// 4-bit scale per 32 elements.
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t signs[32];
  uint8_t scales[4];
};
// IQ1_S: 11-bit indices into a ternary grid (low 8 in qs, high 3 in qh), per
// 32 elements a 3-bit scale (qh bits 12..14) and the sign of a +-1/8 shift
// (bit 15).
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[32];
  uint16_t qh[8];
};
// IQ1_M: like IQ1_S with a 3-bit scale per 16 elements, a shift sign per 8
// elements (qh bits 3 and 7), and the fp16 super-block scale spread over the
// top nibbles of the four scale words.
struct BlockIQ1_M {
  uint8_t qs[32];
  uint8_t qh[16];
  uint8_t scales[8];
};

static_assert(sizeof(BlockMXFP4) == 17, "MXFP4 layout");
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL layout");
static_assert(sizeof(BlockIQ4_XS) == 136, "IQ4_XS layout");
static_assert(sizeof(BlockIQ2_XXS) == 66, "IQ2_XXS layout");
static_assert(sizeof(BlockIQ2_XS) == 74, "IQ2_XS layout");
static_assert(sizeof(BlockIQ2_S) == 82, "IQ2_S layout");
static_assert(sizeof(BlockIQ3_XXS) == 98, "IQ3_XXS layout");
static_assert(sizeof(BlockIQ3_S) == 110, "IQ3_S layout");
static_assert(sizeof(BlockIQ1_S) == 50, "IQ1_S layout");
static_assert(sizeof(BlockIQ1_M) == 56, "IQ1_M layout");
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 layout");
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 layout");
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 layout");
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 layout");
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 layout");
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K layout");
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K layout");
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K layout");
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K layout");
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K layout");

// IEEE half <-> float, exact (decode) and round-to-nearest-even (encode), in
// plain integer code so that every kernel set decodes scales identically.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal: mant * 2^-24, exact in float.
      float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
      std::memcpy(&bits, &v, sizeof(bits));
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) {  // NaN: keep it quiet, truncate the payload (as F16C does)
    return static_cast<uint16_t>(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx >= 0x38800000u) {  // normal half
    const uint32_t mant = absx & 0x7fffffu;
    uint32_t r = (((absx >> 23) - 112) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  if (absx <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to zero
  // Subnormal half: value in units of 2^-24.
  const uint32_t e = absx >> 23;
  const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

inline float BfloatToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// GGML's conversion: round to nearest even, NaN forced quiet, subnormals kept.
inline uint16_t FloatToBfloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// Scale and min j (0..7) of a Q4_K / Q5_K super-block: 6 bits each, packed in 12 bytes.
inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// The 16 signed 6-bit scales of a Q3_K super-block (value - 32 applied).
inline void UnpackQ3KScales(const uint8_t* packed, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

// 2^(e - 128), exactly (subnormal for e < 2): the scale of an MXFP4 block,
// half the e8m0 value because the code table is doubled.
inline float E8M0Half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The doubled e2m1 values of the MXFP4 codes.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// The non-linear 4-bit values of IQ4_NL and IQ4_XS.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Round half to even for |v| < 2^22 (GGML's nearest_int).
inline int NearestInt(float v) {
  float f = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &f, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace colibri::ops

#endif  // COLIBRI_MODEL_OPS_QUANT_BLOCKS_H_
