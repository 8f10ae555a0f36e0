#include "model/ops/iq_decode.h"

#include <cstring>

#include "model/ops/iq_grids.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal {
namespace {

uint32_t Load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Eight magnitudes of a grid entry with the signs of `signs` applied.
void PutSigned8(uint64_t entry, uint8_t signs, int8_t* q) {
  for (int j = 0; j < 8; ++j) {
    const int m = GridByte(entry, j);
    q[j] = static_cast<int8_t>((signs >> j) & 1 ? -m : m);
  }
}

void DecodeIQ2_XXS(const uint8_t* p, IqSuperBlock* s) {
  const auto& b = *reinterpret_cast<const BlockIQ2_XXS*>(p);
  s->d = HalfToFloat(b.d);
  const auto* qs = reinterpret_cast<const uint8_t*>(b.qs);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* idx = qs + 8 * ib;
    const uint32_t aux = Load32(qs + 8 * ib + 4);
    for (int l = 0; l < 4; ++l) {
      PutSigned8(kIq2xxsGrid[idx[l]], SignsFrom7(aux >> (7 * l)), s->q + 32 * ib + 8 * l);
    }
    s->scale[2 * ib] = s->scale[2 * ib + 1] = static_cast<int16_t>(2 * (aux >> 28) + 1);
  }
}

void DecodeIQ2_XS(const uint8_t* p, IqSuperBlock* s) {
  const auto& b = *reinterpret_cast<const BlockIQ2_XS*>(p);
  s->d = HalfToFloat(b.d);
  for (int k = 0; k < 32; ++k) {
    uint16_t v;
    std::memcpy(&v, reinterpret_cast<const uint8_t*>(b.qs) + 2 * k, sizeof(v));
    PutSigned8(kIq2xsGrid[v & 511], SignsFrom7(v >> 9), s->q + 8 * k);
  }
  for (int ib = 0; ib < 8; ++ib) {
    s->scale[2 * ib] = static_cast<int16_t>(2 * (b.scales[ib] & 0xF) + 1);
    s->scale[2 * ib + 1] = static_cast<int16_t>(2 * (b.scales[ib] >> 4) + 1);
  }
}

void DecodeIQ2_S(const uint8_t* p, IqSuperBlock* s) {
  const auto& b = *reinterpret_cast<const BlockIQ2_S*>(p);
  s->d = HalfToFloat(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int idx = b.qs[4 * ib + l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300);
      PutSigned8(kIq2sGrid[idx], b.qs[32 + 4 * ib + l], s->q + 32 * ib + 8 * l);
    }
    s->scale[2 * ib] = static_cast<int16_t>(2 * (b.scales[ib] & 0xF) + 1);
    s->scale[2 * ib + 1] = static_cast<int16_t>(2 * (b.scales[ib] >> 4) + 1);
  }
}

void DecodeIQ3_XXS(const uint8_t* p, IqSuperBlock* s) {
  const auto& b = *reinterpret_cast<const BlockIQ3_XXS*>(p);
  s->d = HalfToFloat(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t aux = Load32(b.qs + 64 + 4 * ib);
    for (int l = 0; l < 4; ++l) {
      const uint64_t entry = kIq3xxsGrid[b.qs[8 * ib + 2 * l]] |
                             (static_cast<uint64_t>(kIq3xxsGrid[b.qs[8 * ib + 2 * l + 1]]) << 32);
      PutSigned8(entry, SignsFrom7(aux >> (7 * l)), s->q + 32 * ib + 8 * l);
    }
    s->scale[2 * ib] = s->scale[2 * ib + 1] = static_cast<int16_t>(2 * (aux >> 28) + 1);
  }
}

void DecodeIQ3_S(const uint8_t* p, IqSuperBlock* s) {
  const auto& b = *reinterpret_cast<const BlockIQ3_S*>(p);
  s->d = HalfToFloat(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int i1 = b.qs[8 * ib + 2 * l] | ((b.qh[ib] << (8 - 2 * l)) & 256);
      const int i2 = b.qs[8 * ib + 2 * l + 1] | ((b.qh[ib] << (7 - 2 * l)) & 256);
      const uint64_t entry = kIq3sGrid[i1] | (static_cast<uint64_t>(kIq3sGrid[i2]) << 32);
      PutSigned8(entry, b.signs[4 * ib + l], s->q + 32 * ib + 8 * l);
    }
    const int sc = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF;
    s->scale[2 * ib] = s->scale[2 * ib + 1] = static_cast<int16_t>(2 * sc + 1);
  }
}

// Eight IQ1 weights in units of 1/8: 8 * grid + shift (shift ±1).
void PutIq1(uint64_t entry, int shift, int8_t* q) {
  for (int j = 0; j < 8; ++j) q[j] = static_cast<int8_t>(8 * GridSignedByte(entry, j) + shift);
}

void DecodeIQ1_S(const uint8_t* p, IqSuperBlock* s) {
  const auto& b = *reinterpret_cast<const BlockIQ1_S*>(p);
  s->d = HalfToFloat(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    uint16_t qh;
    std::memcpy(&qh, reinterpret_cast<const uint8_t*>(b.qh) + 2 * ib, sizeof(qh));
    const int shift = qh & 0x8000 ? -1 : 1;
    for (int l = 0; l < 4; ++l) {
      const int idx = b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8);
      PutIq1(kIq1sGrid[idx], shift, s->q + 32 * ib + 8 * l);
    }
    s->scale[2 * ib] = s->scale[2 * ib + 1] = static_cast<int16_t>(2 * ((qh >> 12) & 7) + 1);
  }
}

void DecodeIQ1_M(const uint8_t* p, IqSuperBlock* s) {
  const auto& b = *reinterpret_cast<const BlockIQ1_M*>(p);
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof(sc));
  const uint16_t d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                             ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  s->d = HalfToFloat(d16);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* qs = b.qs + 4 * ib;
    const uint8_t* qh = b.qh + 2 * ib;
    for (int l = 0; l < 4; ++l) {
      const int h = qh[l / 2] >> (4 * (l % 2));  // 3 index bits, then the shift sign
      const int idx = qs[l] | ((h & 7) << 8);
      PutIq1(kIq1sGrid[idx], h & 8 ? -1 : 1, s->q + 32 * ib + 8 * l);
    }
    const int word = sc[ib / 2] >> (6 * (ib % 2));
    s->scale[2 * ib] = static_cast<int16_t>(2 * (word & 7) + 1);
    s->scale[2 * ib + 1] = static_cast<int16_t>(2 * ((word >> 3) & 7) + 1);
  }
}

void DecodeIQ4_XS(const uint8_t* p, IqSuperBlock* s) {
  const auto& b = *reinterpret_cast<const BlockIQ4_XS*>(p);
  s->d = HalfToFloat(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls =
        ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    s->scale[2 * ib] = s->scale[2 * ib + 1] = static_cast<int16_t>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      s->q[32 * ib + j] = kIq4nlValues[b.qs[16 * ib + j] & 0xF];
      s->q[32 * ib + j + 16] = kIq4nlValues[b.qs[16 * ib + j] >> 4];
    }
  }
}

}  // namespace

IqTypeInfo GetIqTypeInfo(TensorType type) {
  switch (type) {
    case TensorType::kIQ2_XXS:
      return {&DecodeIQ2_XXS, sizeof(BlockIQ2_XXS), 0.125f};
    case TensorType::kIQ2_XS:
      return {&DecodeIQ2_XS, sizeof(BlockIQ2_XS), 0.125f};
    case TensorType::kIQ2_S:
      return {&DecodeIQ2_S, sizeof(BlockIQ2_S), 0.125f};
    case TensorType::kIQ3_XXS:
      return {&DecodeIQ3_XXS, sizeof(BlockIQ3_XXS), 0.25f};
    case TensorType::kIQ3_S:
      return {&DecodeIQ3_S, sizeof(BlockIQ3_S), 1.0f};
    case TensorType::kIQ1_S:
      return {&DecodeIQ1_S, sizeof(BlockIQ1_S), 0.125f};
    case TensorType::kIQ1_M:
      return {&DecodeIQ1_M, sizeof(BlockIQ1_M), 0.125f};
    case TensorType::kIQ4_XS:
      return {&DecodeIQ4_XS, sizeof(BlockIQ4_XS), 1.0f};
    default:
      return {nullptr, 0, 0.0f};
  }
}

}  // namespace colibri::ops::internal
