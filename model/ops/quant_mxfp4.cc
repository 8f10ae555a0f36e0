// MXFP4 (OCP microscaling FP4): blocks of 32 e2m1 codes sharing one e8m0
// power-of-two scale. Layout and value table in quant_blocks.h.
#include <cmath>
#include <cstdlib>

#include "model/ops/quant_blocks.h"
#include "model/ops/quant_reference.h"

namespace colibri::ops::internal {

void DequantizeMXFP4(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = E8M0Half(x[i].e);
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(kMxfp4Values[x[i].qs[j] & 0x0F]) * d;
      dst[j + 16] = static_cast<float>(kMxfp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

namespace {

// The code whose value times d is nearest to v (the first on ties).
uint8_t NearestMxfp4Code(float v, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - v);
  for (int c = 1; c < 16; ++c) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[c]) * d - v);
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

}  // namespace

// GGML's reference rule: with amax in [2^k, 2^(k+1)), the block scale is
// 2^(k-3), so the largest magnitude lands on the codes for 8 or 12; each value
// then takes its nearest code. k comes from frexp (exact) rather than log2f.
void QuantizeMXFP4(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    int e = 0;
    if (amax > 0.0f && std::isfinite(amax)) {
      int exp2;
      std::frexp(amax, &exp2);  // amax = m * 2^exp2, m in [0.5, 1): k = exp2 - 1
      e = exp2 - 1 - 2 + 127;
      e = e < 0 ? 0 : (e > 254 ? 254 : e);
    }
    y[i].e = static_cast<uint8_t>(e);
    const float d = E8M0Half(y[i].e);
    for (int j = 0; j < 16; ++j) {
      y[i].qs[j] =
          static_cast<uint8_t>(NearestMxfp4Code(x[j], d) | (NearestMxfp4Code(x[j + 16], d) << 4));
    }
  }
}

}  // namespace colibri::ops::internal
