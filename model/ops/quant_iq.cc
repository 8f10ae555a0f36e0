// Reference decoders of the i-quants, GGML's dequantize_row_iq* restated with
// the same float operations in the same order (so that the floats match bit
// for bit), and simple encoders for IQ4_NL and IQ4_XS. Layouts in
// quant_blocks.h, grids in iq_grids.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/ops/iq_grids.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/quant_reference.h"

namespace colibri::ops::internal {
namespace {

uint32_t Load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint16_t Load16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float Sign(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.0f : 1.0f; }

// y[j] = db * magnitude_j * ±1 for the 8 bytes of a grid entry.
void Put8(float db, uint64_t entry, uint8_t signs, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = db * static_cast<float>(GridByte(entry, j)) * Sign(signs, j);
}

}  // namespace

void DequantizeIQ4_NL(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = HalfToFloat(x[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] & 0xF]);
      dst[j + 16] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] >> 4]);
    }
  }
}

void DequantizeIQ4_XS(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    for (int ib = 0; ib < 8; ++ib, dst += 32) {
      const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                     (((x[i].scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* qs = x[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        dst[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xF]);
        dst[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

void DequantizeIQ2_XXS(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XXS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    const auto* qs = reinterpret_cast<const uint8_t*>(x[i].qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t aux = Load32(qs + 8 * ib + 4);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, dst += 8) {
        Put8(db, kIq2xxsGrid[qs[8 * ib + l]], SignsFrom7(aux >> (7 * l)), dst);
      }
    }
  }
}

void DequantizeIQ2_XS(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_XS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    const auto* qs = reinterpret_cast<const uint8_t*>(x[i].qs);
    for (int ib = 0; ib < 8; ++ib) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[i].scales[ib] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[i].scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, dst += 8) {
        const uint16_t v = Load16(qs + 2 * (4 * ib + l));
        Put8(db[l / 2], kIq2xsGrid[v & 511], SignsFrom7(v >> 9), dst);
      }
    }
  }
}

void DequantizeIQ2_S(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ2_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[i].scales[ib] & 0xF)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[i].scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, dst += 8) {
        const int idx = x[i].qs[4 * ib + l] | ((x[i].qh[ib] << (8 - 2 * l)) & 0x300);
        Put8(db[l / 2], kIq2sGrid[idx], x[i].qs[32 + 4 * ib + l], dst);
      }
    }
  }
}

void DequantizeIQ3_XXS(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_XXS*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t aux = Load32(x[i].qs + 64 + 4 * ib);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l, dst += 8) {
        const uint64_t entry =
            kIq3xxsGrid[x[i].qs[8 * ib + 2 * l]] |
            (static_cast<uint64_t>(kIq3xxsGrid[x[i].qs[8 * ib + 2 * l + 1]]) << 32);
        Put8(db, entry, SignsFrom7(aux >> (7 * l)), dst);
      }
    }
  }
}

void DequantizeIQ3_S(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ3_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const int sc = (x[i].scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
      const float db = d * static_cast<float>(1 + 2 * sc);
      const uint8_t qh = x[i].qh[ib];
      for (int l = 0; l < 4; ++l, dst += 8) {
        const int i1 = x[i].qs[8 * ib + 2 * l] | ((qh << (8 - 2 * l)) & 256);
        const int i2 = x[i].qs[8 * ib + 2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
        const uint64_t entry = kIq3sGrid[i1] | (static_cast<uint64_t>(kIq3sGrid[i2]) << 32);
        Put8(db, entry, x[i].signs[4 * ib + l], dst);
      }
    }
  }
}

namespace {

constexpr float kIq1Shift = 0.125f;

// y[j] = dl * (grid_j + shift) for the 8 signed bytes of an IQ1 grid entry.
void PutIq1(float dl, uint64_t entry, float shift, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(GridSignedByte(entry, j)) + shift);
}

}  // namespace

void DequantizeIQ1_S(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_S*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t qh = Load16(reinterpret_cast<const uint8_t*>(x[i].qh) + 2 * ib);
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float shift = qh & 0x8000 ? -kIq1Shift : kIq1Shift;
      for (int l = 0; l < 4; ++l, dst += 8) {
        const int idx = x[i].qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
        PutIq1(dl, kIq1sGrid[idx], shift, dst);
      }
    }
  }
}

void DequantizeIQ1_M(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_M*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, sizeof(sc));
    const float d = HalfToFloat(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                      ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
    for (int ib = 0; ib < 8; ++ib) {
      const int word = sc[ib / 2] >> (6 * (ib % 2));
      const float dl[2] = {d * static_cast<float>(2 * (word & 7) + 1),
                           d * static_cast<float>(2 * ((word >> 3) & 7) + 1)};
      for (int l = 0; l < 4; ++l, dst += 8) {
        const int h = x[i].qh[2 * ib + l / 2] >> (4 * (l % 2));
        const int idx = x[i].qs[4 * ib + l] | ((h & 7) << 8);
        PutIq1(dl[l / 2], kIq1sGrid[idx], h & 8 ? -kIq1Shift : kIq1Shift, dst);
      }
    }
  }
}

// ---- Encoders (round to nearest, no importance weighting: for synthetic
// models and tests).

namespace {

// The table index whose value is nearest to v (the lower one on ties).
uint8_t NearestIq4nl(float v) {
  int best = 0;
  float best_err = std::fabs(v - static_cast<float>(kIq4nlValues[0]));
  for (int c = 1; c < 16; ++c) {
    const float err = std::fabs(v - static_cast<float>(kIq4nlValues[c]));
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

// The signed value of largest magnitude among n.
float SignedMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// 32 values as codes for the scale d (nibbles packed as in Q4_0).
void PackIq4(const float* x, float d, uint8_t qs[16]) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>(NearestIq4nl(x[j] * id) | (NearestIq4nl(x[j + 16] * id) << 4));
  }
}

}  // namespace

// The value of largest magnitude maps to -127 (the table's extreme).
void QuantizeIQ4_NL(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    y[i].d = FloatToHalf(SignedMax(x, kQK) / -127.0f);
    PackIq4(x, HalfToFloat(y[i].d), y[i].qs);
  }
}

// Each sub-block's ideal scale max/-127 is expressed as d * (ls - 32) with one
// fp16 d per super-block chosen so that the largest |scale| maps to 32.
void QuantizeIQ4_XS(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    float sub[8];
    float amax = 0.0f, max = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      sub[ib] = SignedMax(x + 32 * ib, 32) / -127.0f;
      if (std::fabs(sub[ib]) > amax) {
        amax = std::fabs(sub[ib]);
        max = sub[ib];
      }
    }
    y[i].d = FloatToHalf(max / -32.0f);
    const float d = HalfToFloat(y[i].d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].scales_h = 0;
    std::memset(y[i].scales_l, 0, sizeof(y[i].scales_l));
    for (int ib = 0; ib < 8; ++ib) {
      const int l = std::clamp(NearestInt(sub[ib] * id), -32, 31) + 32;
      y[i].scales_l[ib / 2] =
          static_cast<uint8_t>(y[i].scales_l[ib / 2] | ((l & 0xF) << (4 * (ib % 2))));
      y[i].scales_h = static_cast<uint16_t>(y[i].scales_h | ((l >> 4) << (2 * ib)));
      PackIq4(x + 32 * ib, d * static_cast<float>(l - 32), y[i].qs + 16 * ib);
    }
  }
}

}  // namespace colibri::ops::internal
