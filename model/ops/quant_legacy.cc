// Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0: blocks of 32 elements with one fp16 scale
// (and, for the _1 types, one fp16 minimum).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "model/ops/quant_blocks.h"
#include "model/ops/quant_reference.h"

namespace colibri::ops::internal {

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = HalfToFloat(x[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = HalfToFloat(x[i].d);
    const float m = HalfToFloat(x[i].m);
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      dst[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

namespace {

uint32_t LoadQh(const uint8_t qh[4]) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof(v));
  return v;
}

// The 5-bit quant of element j of a Q5 block.
inline int Q5Value(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

}  // namespace

void DequantizeQ5_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = HalfToFloat(x[i].d);
    const uint32_t qh = LoadQh(x[i].qh);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(Q5Value(x[i].qs, qh, j) - 16) * d;
  }
}

void DequantizeQ5_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = HalfToFloat(x[i].d);
    const float m = HalfToFloat(x[i].m);
    const uint32_t qh = LoadQh(x[i].qh);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(Q5Value(x[i].qs, qh, j)) * d + m;
  }
}

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = HalfToFloat(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// The encoders follow GGML's reference quantizers: symmetric types scale by the
// signed value of largest magnitude (so it lands exactly on the most negative
// level), asymmetric types span [min, max].

namespace {

float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void MinMax(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

// Level of x in [0, levels - 1] for the given inverse scale and offset.
inline int Level(float x, float id, float offset, int levels) {
  const int q = static_cast<int>(std::floor(x * id + offset));
  return std::clamp(q, 0, levels - 1);
}

}  // namespace

void QuantizeQ4_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float d = SignedAbsMax(src, kQK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = Level(src[j], id, 8.5f, 16);
      const int q1 = Level(src[j + 16], id, 8.5f, 16);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeQ4_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    float min, max;
    MinMax(src, kQK, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    y[i].m = FloatToHalf(min);
    for (int j = 0; j < 16; ++j) {
      const int q0 = Level(src[j] - min, id, 0.5f, 16);
      const int q1 = Level(src[j + 16] - min, id, 0.5f, 16);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

namespace {

void PackQ5(const int q[kQK], uint8_t qs[16], uint8_t qh_bytes[4]) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
  }
  for (int j = 0; j < kQK; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh_bytes, &qh, sizeof(qh));
}

}  // namespace

void QuantizeQ5_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    const float d = SignedAbsMax(src, kQK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = Level(src[j], id, 16.5f, 32);
    PackQ5(q, y[i].qs, y[i].qh);
  }
}

void QuantizeQ5_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    float min, max;
    MinMax(src, kQK, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    y[i].m = FloatToHalf(min);
    int q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = Level(src[j] - min, id, 0.5f, 32);
    PackQ5(q, y[i].qs, y[i].qh);
  }
}

void QuantizeQ8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::clamp<float>(std::round(src[j] * id), -127, 127));
    }
  }
}

}  // namespace colibri::ops::internal
