#include "model/ops/activation_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

inline float RoundedHalf(float v) { return HalfToFloat(FloatToHalf(v)); }

// Q8_0 / Q8_1 block of 32: quants into q, returns the unrounded d.
float QuantizeBlock32(const float* x, int8_t* q, int* sum) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int s = 0;
  for (int j = 0; j < kQK; ++j) {
    q[j] = static_cast<int8_t>(NearestInt(x[j] * id));
    s += q[j];
  }
  *sum = s;
  return d;
}

}  // namespace

ActivationFormat ActivationFormatFor(TensorType type) {
  switch (type) {
    case TensorType::kQ4_0:
    case TensorType::kQ5_0:
    case TensorType::kQ8_0:
    case TensorType::kMXFP4:
    case TensorType::kIQ4_NL:
      return ActivationFormat::kQ8_0;
    case TensorType::kQ4_1:
    case TensorType::kQ5_1:
      return ActivationFormat::kQ8_1;
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ2_XXS:
    case TensorType::kIQ2_XS:
    case TensorType::kIQ2_S:
    case TensorType::kIQ3_XXS:
    case TensorType::kIQ3_S:
    case TensorType::kIQ1_S:
    case TensorType::kIQ1_M:
    case TensorType::kIQ4_XS:
      return ActivationFormat::kQ8_K;
    default:
      return ActivationFormat::kFloat;
  }
}

ActivationLayout MakeActivationLayout(ActivationFormat format, int64_t cols) {
  ActivationLayout l;
  l.format = format;
  l.cols = cols;
  const uint64_t n = static_cast<uint64_t>(cols);
  switch (format) {
    case ActivationFormat::kFloat:
      l.row_bytes = AlignUp(n * sizeof(float), 64);
      break;
    case ActivationFormat::kQ8_0:
    case ActivationFormat::kQ8_1: {
      l.block = kQK;
      const uint64_t nb = n / kQK;
      l.d_offset = AlignUp(n, 64);
      l.aux_offset = l.d_offset + AlignUp(nb * sizeof(float), 32);
      const uint64_t aux = format == ActivationFormat::kQ8_1 ? nb * sizeof(float) : 0;
      l.row_bytes = AlignUp(l.aux_offset + aux, 64);
      break;
    }
    case ActivationFormat::kQ8_K: {
      l.block = kQK_K;
      const uint64_t nb = n / kQK_K;
      l.d_offset = AlignUp(n, 64);
      l.aux_offset = l.d_offset + AlignUp(nb * sizeof(float), 32);
      l.row_bytes = AlignUp(l.aux_offset + nb * 16 * sizeof(int16_t), 64);
      break;
    }
  }
  return l;
}

void QuantizeActivationRow(const ActivationLayout& layout, const float* x, uint8_t* row) {
  auto* qs = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + layout.d_offset);
  const int64_t nb = layout.cols / layout.block;
  switch (layout.format) {
    case ActivationFormat::kFloat:
      std::memcpy(row, x, static_cast<size_t>(layout.cols) * sizeof(float));
      return;
    case ActivationFormat::kQ8_0:
    case ActivationFormat::kQ8_1: {
      auto* s = reinterpret_cast<float*>(row + layout.aux_offset);
      for (int64_t b = 0; b < nb; ++b) {
        int sum;
        const float db = QuantizeBlock32(x + b * kQK, qs + b * kQK, &sum);
        d[b] = RoundedHalf(db);
        if (layout.format == ActivationFormat::kQ8_1) {
          s[b] = RoundedHalf(db * static_cast<float>(sum));
        }
      }
      return;
    }
    case ActivationFormat::kQ8_K: {
      auto* bsums = reinterpret_cast<int16_t*>(row + layout.aux_offset);
      for (int64_t b = 0; b < nb; ++b) {
        const float* xb = x + b * kQK_K;
        int8_t* qb = qs + b * kQK_K;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < kQK_K; ++j) {
          if (std::fabs(xb[j]) > amax) {
            amax = std::fabs(xb[j]);
            max = xb[j];
          }
        }
        if (amax == 0.0f) {
          d[b] = 0.0f;
          std::memset(qb, 0, kQK_K);
          std::memset(bsums + 16 * b, 0, 16 * sizeof(int16_t));
          continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < kQK_K; ++j) {
          qb[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * xb[j])));
        }
        for (int g = 0; g < 16; ++g) {
          int sum = 0;
          for (int j = 0; j < 16; ++j) sum += qb[16 * g + j];
          bsums[16 * b + g] = static_cast<int16_t>(sum);
        }
        d[b] = 1.0f / iscale;
      }
      return;
    }
  }
}

}  // namespace colibri::ops::internal
