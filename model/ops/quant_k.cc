// K-quants: super-blocks of 256 elements split into sub-blocks of 16 or 32,
// each with a small integer scale (and min) under fp16 super-block factors.
//
// Element e of a super-block, as laid out by GGML:
//   Q2_K / Q3_K: 2 low bits at qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32)),
//                scale index e / 16; Q3_K's third bit is hmask[e % 32] bit e / 32
//                (set means +0, clear means -4).
//   Q4_K / Q5_K: nibble of qs[32 * (e / 64) + e % 32], low for e % 64 < 32,
//                scale index e / 32; Q5_K's fifth bit is qh[e % 32] bit e / 32.
//   Q6_K:        ql[64 * (e / 128) + e % 64] nibble (low for e % 128 < 64),
//                2 high bits at qh[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32)),
//                scale index e / 16, value - 32.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/ops/quant_blocks.h"
#include "model/ops/quant_reference.h"

namespace colibri::ops::internal {

void DequantizeQ2_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    const float min = HalfToFloat(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = min * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *dst++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

void DequantizeQ3_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d_all = HalfToFloat(x[i].d);
    int8_t scales[16];
    UnpackQ3KScales(x[i].scales, scales);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    int is = 0;
    uint8_t m = 1;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(scales[is++]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *dst++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

namespace {

// Q4_K and Q5_K share everything but the fifth bit; qh is null for Q4_K.
void DequantizeQ45K(const uint16_t d_half, const uint16_t dmin_half, const uint8_t* scales,
                    const uint8_t* qs, const uint8_t* qh, float* dst) {
  const float d = HalfToFloat(d_half);
  const float min = HalfToFloat(dmin_half);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int part = 0; part < 2; ++part) {
      uint8_t sc, m;
      GetScaleMinK4(2 * chunk + part, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = min * static_cast<float>(m);
      const uint8_t hbit = static_cast<uint8_t>(1u << (2 * chunk + part));
      for (int l = 0; l < 32; ++l) {
        int v = part == 0 ? (qs[32 * chunk + l] & 0xF) : (qs[32 * chunk + l] >> 4);
        if (qh != nullptr && (qh[l] & hbit)) v += 16;
        *dst++ = d1 * static_cast<float>(v) - m1;
      }
    }
  }
}

}  // namespace

void DequantizeQ4_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    DequantizeQ45K(x[i].d, x[i].dmin, x[i].scales, x[i].qs, nullptr, dst);
  }
}

void DequantizeQ5_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    DequantizeQ45K(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh, dst);
  }
}

void DequantizeQ6_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = HalfToFloat(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// Encoders: one pass of round-to-nearest per sub-block (no search for the best
// scale, unlike llama-quantize), then the sub-block scales are themselves
// quantized and the elements re-quantized against the scales actually stored.

namespace {

// Scale and (non-negative) min of an asymmetric sub-block mapped to [0, nmax].
void AsymmetricRange(const float* x, int n, int nmax, float* scale, float* min) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);
  *scale = hi > lo ? (hi - lo) / static_cast<float>(nmax) : 0.0f;
  *min = -lo;
}

// Levels in [0, nmax] for x ≈ d * l - m.
void AsymmetricLevels(const float* x, int n, int nmax, float d, float m, uint8_t* l) {
  for (int i = 0; i < n; ++i) {
    l[i] = d != 0.0f
               ? static_cast<uint8_t>(std::clamp(NearestInt((x[i] + m) / d), 0, nmax))
               : 0;
  }
}

// Quantizes non-negative sub-block factors to [0, nmax] under one super-scale.
float QuantizeFactors(const float* v, int n, int nmax, uint8_t* q) {
  float max = 0.0f;
  for (int i = 0; i < n; ++i) max = std::max(max, v[i]);
  const float inv = max > 0.0f ? static_cast<float>(nmax) / max : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(std::min(nmax, NearestInt(inv * v[i])));
  return max / static_cast<float>(nmax);
}

// Symmetric sub-block: the signed value of largest magnitude maps to -nmax.
float SymmetricScale(const float* x, int n, int nmax) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return amax > 0.0f ? max / -static_cast<float>(nmax) : 0.0f;
}

// Packs the 2-bit fields of 256 levels as Q2_K and Q3_K store them.
void Pack2Bit(const uint8_t* l, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128) {
    for (int i = 0; i < 32; ++i) {
      qs[j / 4 + i] = static_cast<uint8_t>((l[j + i] & 3) | ((l[j + i + 32] & 3) << 2) |
                                           ((l[j + i + 64] & 3) << 4) | ((l[j + i + 96] & 3) << 6));
    }
  }
}

void PackScalesK4(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Shared by Q4_K (nmax 15, qh null) and Q5_K (nmax 31).
void QuantizeQ45K(const float* x, int nmax, uint16_t* d_half, uint16_t* dmin_half,
                  uint8_t* scales, uint8_t* qs, uint8_t* qh) {
  float sub_scale[8], sub_min[8];
  for (int j = 0; j < 8; ++j) AsymmetricRange(x + 32 * j, 32, nmax, &sub_scale[j], &sub_min[j]);
  uint8_t ls[8], lm[8];
  *d_half = FloatToHalf(QuantizeFactors(sub_scale, 8, 63, ls));
  *dmin_half = FloatToHalf(QuantizeFactors(sub_min, 8, 63, lm));
  PackScalesK4(ls, lm, scales);
  uint8_t l[kQK_K];
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    GetScaleMinK4(j, scales, &sc, &m);
    const float d = HalfToFloat(*d_half) * static_cast<float>(sc);
    const float dm = HalfToFloat(*dmin_half) * static_cast<float>(m);
    AsymmetricLevels(x + 32 * j, 32, nmax, d, dm, l + 32 * j);
  }
  if (qh != nullptr) std::memset(qh, 0, 32);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int i = 0; i < 32; ++i) {
      const uint8_t lo = l[64 * chunk + i];
      const uint8_t hi = l[64 * chunk + 32 + i];
      qs[32 * chunk + i] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if (qh != nullptr) {
        qh[i] |= static_cast<uint8_t>(((lo >> 4) & 1) << (2 * chunk));
        qh[i] |= static_cast<uint8_t>(((hi >> 4) & 1) << (2 * chunk + 1));
      }
    }
  }
}

}  // namespace

void QuantizeQ2_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    float sub_scale[16], sub_min[16];
    for (int j = 0; j < 16; ++j) AsymmetricRange(src + 16 * j, 16, 3, &sub_scale[j], &sub_min[j]);
    uint8_t ls[16], lm[16];
    y[i].d = FloatToHalf(QuantizeFactors(sub_scale, 16, 15, ls));
    y[i].dmin = FloatToHalf(QuantizeFactors(sub_min, 16, 15, lm));
    uint8_t l[kQK_K];
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
      const float d = HalfToFloat(y[i].d) * static_cast<float>(ls[j]);
      const float m = HalfToFloat(y[i].dmin) * static_cast<float>(lm[j]);
      AsymmetricLevels(src + 16 * j, 16, 3, d, m, l + 16 * j);
    }
    Pack2Bit(l, y[i].qs);
  }
}

void QuantizeQ3_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    float sub_scale[16];
    float amax = 0.0f, max_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      sub_scale[j] = SymmetricScale(src + 16 * j, 16, 4);
      if (std::fabs(sub_scale[j]) > amax) {
        amax = std::fabs(sub_scale[j]);
        max_scale = sub_scale[j];
      }
    }
    std::memset(y[i].scales, 0, 12);
    float d_all = 0.0f;
    if (amax > 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = std::clamp(NearestInt(iscale * sub_scale[j]), -32, 31) + 32;
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        }
        y[i].scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      d_all = 1.0f / iscale;
    }
    y[i].d = FloatToHalf(d_all);
    int8_t sc[16];
    UnpackQ3KScales(y[i].scales, sc);
    uint8_t l[kQK_K];
    for (int j = 0; j < 16; ++j) {
      const float d = HalfToFloat(y[i].d) * static_cast<float>(sc[j]);
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        l[e] = d != 0.0f ? static_cast<uint8_t>(std::clamp(NearestInt(src[e] / d), -4, 3) + 4) : 4;
      }
    }
    std::memset(y[i].hmask, 0, 32);
    for (int e = 0; e < kQK_K; ++e) {
      if (l[e] > 3) {
        y[i].hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
        l[e] = static_cast<uint8_t>(l[e] - 4);
      }
    }
    Pack2Bit(l, y[i].qs);
  }
}

void QuantizeQ4_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    QuantizeQ45K(src, 15, &y[i].d, &y[i].dmin, y[i].scales, y[i].qs, nullptr);
  }
}

void QuantizeQ5_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    QuantizeQ45K(src, 31, &y[i].d, &y[i].dmin, y[i].scales, y[i].qs, y[i].qh);
  }
}

void QuantizeQ6_K(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    float sub_scale[16];
    float amax = 0.0f, max_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      sub_scale[j] = SymmetricScale(src + 16 * j, 16, 32);
      if (std::fabs(sub_scale[j]) > amax) {
        amax = std::fabs(sub_scale[j]);
        max_scale = sub_scale[j];
      }
    }
    std::memset(&y[i], 0, sizeof(BlockQ6_K));
    if (amax == 0.0f) continue;
    const float iscale = -128.0f / max_scale;
    y[i].d = FloatToHalf(1.0f / iscale);
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * sub_scale[j])));
    }
    uint8_t l[kQK_K];
    for (int j = 0; j < 16; ++j) {
      const float d = HalfToFloat(y[i].d) * static_cast<float>(y[i].scales[j]);
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        l[e] = d != 0.0f ? static_cast<uint8_t>(std::clamp(NearestInt(src[e] / d), -32, 31) + 32)
                         : 32;
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int k = 0; k < 32; ++k) {
        const uint8_t* q = l + j + k;
        ql[k] = static_cast<uint8_t>((q[0] & 0xF) | ((q[64] & 0xF) << 4));
        ql[k + 32] = static_cast<uint8_t>((q[32] & 0xF) | ((q[96] & 0xF) << 4));
        qh[k] = static_cast<uint8_t>((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) |
                                     ((q[96] >> 4) << 6));
      }
    }
  }
}

}  // namespace colibri::ops::internal
