// MatMulReference: the canonical arithmetic of vec_dot.h written as directly as
// possible, element by element, from the layout facts in quant_k.cc's header.
#include <cmath>
#include <cstring>
#include <vector>

#include "model/ops/activation_quant.h"
#include "model/ops/matmul.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/quantize.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops {
namespace {

using internal::QuantizedRow;

float ReferenceFloatDot(const float* w, const float* x, int64_t n) {
  float lanes[8] = {};
  for (int64_t c = 0; c < n; ++c) lanes[c % 8] = lanes[c % 8] + w[c] * x[c];
  return internal::ReduceLanes(lanes);
}

// Element e of a 32-element block: integer quant, and the block's d (and m).
struct Block32 {
  int q[32];
  float d;
  float m;  // 0 for the symmetric types
};

Block32 DecodeBlock32(TensorType type, const uint8_t* b) {
  Block32 out{};
  if (type == TensorType::kMXFP4 || type == TensorType::kIQ4_NL) {
    // The block's values are d * integer: recover the integers from the
    // dequantized floats (exact, since the quotient is a small integer).
    float v[32];
    DequantizeRow(type, b, v, 32);
    if (type == TensorType::kMXFP4) {
      out.d = std::ldexp(1.0f, b[0] - 128);
    } else {
      uint16_t d;
      std::memcpy(&d, b, 2);
      out.d = Fp16ToFp32(d);
    }
    for (int e = 0; e < 32; ++e) {
      out.q[e] = out.d != 0.0f ? static_cast<int>(std::lround(static_cast<double>(v[e]) / out.d)) : 0;
    }
    return out;
  }
  uint16_t d, m = 0;
  std::memcpy(&d, b, 2);
  const uint8_t* qs = nullptr;
  uint32_t qh = 0;
  switch (type) {
    case TensorType::kQ4_0: qs = b + 2; break;
    case TensorType::kQ4_1: std::memcpy(&m, b + 2, 2); qs = b + 4; break;
    case TensorType::kQ5_0: std::memcpy(&qh, b + 2, 4); qs = b + 6; break;
    case TensorType::kQ5_1: std::memcpy(&m, b + 2, 2); std::memcpy(&qh, b + 4, 4); qs = b + 8; break;
    case TensorType::kQ8_0:
      for (int e = 0; e < 32; ++e) out.q[e] = static_cast<int8_t>(b[2 + e]);
      break;
    default: break;
  }
  if (type != TensorType::kQ8_0) {
    for (int e = 0; e < 32; ++e) {
      int v = e < 16 ? (qs[e] & 0xF) : (qs[e - 16] >> 4);
      if (type == TensorType::kQ5_0 || type == TensorType::kQ5_1) v += ((qh >> e) & 1) * 16;
      if (type == TensorType::kQ4_0) v -= 8;
      if (type == TensorType::kQ5_0) v -= 16;
      out.q[e] = v;
    }
  }
  out.d = Fp16ToFp32(d);
  out.m = Fp16ToFp32(m);
  return out;
}

float ReferenceDot32(TensorType type, const uint8_t* row, uint64_t block_bytes,
                     const QuantizedRow& a, int64_t cols) {
  float acc = 0.0f;
  float summs = 0.0f;
  const bool has_min = type == TensorType::kQ4_1 || type == TensorType::kQ5_1;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const Block32 blk = DecodeBlock32(type, row + b * block_bytes);
    int p = 0;
    for (int e = 0; e < 32; ++e) p += blk.q[e] * a.qs[32 * b + e];
    acc = acc + (blk.d * a.d[b]) * static_cast<float>(p);
    if (has_min) summs = summs + blk.m * a.s[b];
  }
  return acc + summs;
}

// Element e of a K-quant super-block: signed quant, integer scale and min.
struct SuperBlock {
  int q[256];
  int scale[256];
  int min[256];
  float d;
  float dmin;
};

int Bits(uint8_t byte, int shift, int mask) { return (byte >> shift) & mask; }

SuperBlock DecodeSuperBlock(TensorType type, const uint8_t* b) {
  SuperBlock s{};
  uint16_t d = 0, dmin = 0;
  for (int e = 0; e < 256; ++e) {
    const int c128 = e / 128, w128 = e % 128;
    switch (type) {
      case TensorType::kQ2_K: {  // scales[16] qs[64] d dmin
        s.q[e] = Bits(b[16 + 32 * c128 + e % 32], 2 * (w128 / 32), 3);
        s.scale[e] = b[e / 16] & 0xF;
        s.min[e] = b[e / 16] >> 4;
        break;
      }
      case TensorType::kQ3_K: {  // hmask[32] qs[64] scales[12] d
        const int low = Bits(b[32 + 32 * c128 + e % 32], 2 * (w128 / 32), 3);
        const int high = Bits(b[e % 32], e / 32, 1);
        s.q[e] = low - (high ? 0 : 4);
        const int g = e / 16;
        const uint8_t* sc = b + 96;
        const int lo4 = g < 8 ? (sc[g] & 0xF) : (sc[g - 8] >> 4);
        const int hi2 = Bits(sc[8 + g % 4], 2 * (g / 4), 3);
        s.scale[e] = (lo4 | (hi2 << 4)) - 32;
        break;
      }
      case TensorType::kQ4_K:    // d dmin scales[12] qs[128]
      case TensorType::kQ5_K: {  // d dmin scales[12] qh[32] qs[128]
        const bool q5 = type == TensorType::kQ5_K;
        const uint8_t* qs = b + (q5 ? 48 : 16);
        int v = Bits(qs[32 * (e / 64) + e % 32], (e % 64) < 32 ? 0 : 4, 0xF);
        if (q5) v += Bits(b[16 + e % 32], e / 32, 1) * 16;
        s.q[e] = v;
        uint8_t sc, m;
        GetScaleMinK4(e / 32, b + 4, &sc, &m);
        s.scale[e] = sc;
        s.min[e] = m;
        break;
      }
      case TensorType::kQ6_K: {  // ql[128] qh[64] scales[16] d
        const int low = Bits(b[64 * c128 + w128 % 64], w128 < 64 ? 0 : 4, 0xF);
        const int high = Bits(b[128 + 32 * c128 + e % 32], 2 * (w128 / 32), 3);
        s.q[e] = (low | (high << 4)) - 32;
        s.scale[e] = static_cast<int8_t>(b[192 + e / 16]);
        break;
      }
      default: break;
    }
  }
  switch (type) {
    case TensorType::kQ2_K: std::memcpy(&d, b + 80, 2); std::memcpy(&dmin, b + 82, 2); break;
    case TensorType::kQ3_K: std::memcpy(&d, b + 108, 2); break;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: std::memcpy(&d, b, 2); std::memcpy(&dmin, b + 2, 2); break;
    case TensorType::kQ6_K: std::memcpy(&d, b + 208, 2); break;
    default: break;
  }
  s.d = Fp16ToFp32(d);
  s.dmin = Fp16ToFp32(dmin);
  return s;
}

float ReferenceDotK(TensorType type, const uint8_t* row, uint64_t block_bytes,
                    const QuantizedRow& a, int64_t cols) {
  const bool has_min =
      type == TensorType::kQ2_K || type == TensorType::kQ4_K || type == TensorType::kQ5_K;
  float acc = 0.0f;
  for (int64_t b = 0; b < cols / 256; ++b) {
    const SuperBlock s = DecodeSuperBlock(type, row + b * block_bytes);
    int isum = 0, summs = 0;
    for (int e = 0; e < 256; ++e) {
      isum += s.scale[e] * s.q[e] * a.qs[256 * b + e];
      summs += s.min[e] * a.qs[256 * b + e];
    }
    acc = acc + (s.d * a.d[b]) * static_cast<float>(isum);
    if (has_min) acc = acc - (s.dmin * a.d[b]) * static_cast<float>(summs);
  }
  return acc;
}

// The 256-element i-quants: every weight is d * kFinal * (an integer w), with
// d the block's fp16 scale and kFinal = 1/8 (IQ1_*, IQ2_*), 1/4 (IQ3_XXS) or 1
// (IQ3_S, IQ4_XS); w is recovered exactly from the dequantized floats, and the
// dot is acc += (d * da) * float(Σ w * qa) per block, times kFinal at the end.
bool IsIqSuperBlock(TensorType type) {
  switch (type) {
    case TensorType::kIQ2_XXS: case TensorType::kIQ2_XS: case TensorType::kIQ2_S:
    case TensorType::kIQ3_XXS: case TensorType::kIQ3_S: case TensorType::kIQ1_S:
    case TensorType::kIQ1_M: case TensorType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

float ReferenceDotIq(TensorType type, const uint8_t* row, uint64_t block_bytes,
                     const QuantizedRow& a, int64_t cols) {
  float final_scale = 1.0f;
  if (type == TensorType::kIQ3_XXS) final_scale = 0.25f;
  if (type != TensorType::kIQ3_XXS && type != TensorType::kIQ3_S && type != TensorType::kIQ4_XS) {
    final_scale = 0.125f;
  }
  float acc = 0.0f;
  float v[256];
  for (int64_t b = 0; b < cols / 256; ++b) {
    const uint8_t* blk = row + b * block_bytes;
    uint16_t d16;
    if (type == TensorType::kIQ1_M) {  // the top nibbles of the four scale words at 48
      uint16_t sc[4];
      std::memcpy(sc, blk + 48, 8);
      d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 12) << 4) | ((sc[2] >> 12) << 8) |
                                  ((sc[3] >> 12) << 12));
    } else {
      std::memcpy(&d16, blk, 2);
    }
    const float d = Fp16ToFp32(d16);
    DequantizeRow(type, blk, v, 256);
    const double unit = static_cast<double>(d) * final_scale;
    int isum = 0;
    for (int e = 0; e < 256; ++e) {
      const int w = unit != 0.0 ? static_cast<int>(std::lround(v[e] / unit)) : 0;
      isum += w * a.qs[256 * b + e];
    }
    acc = acc + (d * a.d[b]) * static_cast<float>(isum);
  }
  return acc * final_scale;
}

}  // namespace

void MatMulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                     int64_t y_stride, NumericPath path) {
  const internal::ActivationFormat format = internal::ActivationFormatFor(w.type);
  const bool quantized = path == NumericPath::kFast && format != internal::ActivationFormat::kFloat;
  const internal::ActivationLayout layout = internal::MakeActivationLayout(format, w.cols);
  const uint64_t block_bytes = static_cast<uint64_t>(GetTraits(w.type).type_size);
  // The quantized row is read through float / int16 pointers: keep it aligned.
  std::vector<float> act_storage(layout.row_bytes / sizeof(float) + 1);
  auto* act = reinterpret_cast<uint8_t*>(act_storage.data());
  std::vector<float> wrow(static_cast<size_t>(w.cols));
  // Interleaved rows back in GGUF order, group by group.
  std::vector<uint8_t> in_order;
  if (w.layout != WeightLayout::kRows) {
    in_order.assign(w.data, w.data + w.rows * w.row_bytes);
    for (int64_t g = 0; g + kInterleaveRows <= w.rows; g += kInterleaveRows) {
      DeinterleaveGroup(w.type, w.data + g * w.row_bytes, w.row_bytes,
                        in_order.data() + g * w.row_bytes);
    }
  }
  const uint8_t* data = in_order.empty() ? w.data : in_order.data();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * w.cols;
    if (quantized) internal::QuantizeActivationRow(layout, xt, act);
    const QuantizedRow a = QuantizedRow::At(layout, act);
    for (int64_t r = 0; r < w.rows; ++r) {
      const uint8_t* row = data + r * w.row_bytes;
      float v;
      if (!quantized) {
        DequantizeRow(w.type, row, wrow.data(), w.cols);
        v = ReferenceFloatDot(wrow.data(), xt, w.cols);
      } else if (IsIqSuperBlock(w.type)) {
        v = ReferenceDotIq(w.type, row, block_bytes, a, w.cols);
      } else if (layout.block == 32) {
        v = ReferenceDot32(w.type, row, block_bytes, a, w.cols);
      } else {
        v = ReferenceDotK(w.type, row, block_bytes, a, w.cols);
      }
      y[t * y_stride + r] = v;
    }
  }
}

}  // namespace colibri::ops
