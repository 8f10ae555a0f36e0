#include "model/arch/rope.h"

#include <algorithm>
#include <cmath>

namespace colibri::arch {
namespace {

// YaRN's correction range, fixed by the GGUF families that use it.
constexpr double kYarnBetaFast = 32.0;
constexpr double kYarnBetaSlow = 1.0;

}  // namespace

RopeTable::RopeTable(const ModelConfig& config, int n_ctx) : c_(config) {
  const int half = c_.n_rot / 2;
  cos_.resize(static_cast<size_t>(n_ctx) * half);
  sin_.resize(static_cast<size_t>(n_ctx) * half);
  // YaRN: pair i keeps its frequency below the ramp [low, high], is
  // interpolated (divided by the factor) above it, and blended inside.
  double yarn_low = 0, yarn_high = 0;
  if (c_.yarn) {
    auto corr = [&](double beta) {
      return c_.n_rot * std::log(c_.yarn_orig_ctx / (beta * 2 * M_PI)) /
             (2 * std::log(static_cast<double>(c_.rope_freq_base)));
    };
    yarn_low = std::max(0.0, std::floor(corr(kYarnBetaFast)));
    yarn_high = std::min(c_.n_rot - 1.0, std::ceil(corr(kYarnBetaSlow)));
  }
  for (int pos = 0; pos < n_ctx; ++pos) {
    for (int i = 0; i < half; ++i) {
      const double freq = std::pow(static_cast<double>(c_.rope_freq_base), -2.0 * i / c_.n_rot);
      double theta = static_cast<double>(c_.rope_freq_scale) * pos * freq;
      double magnitude = 1.0;
      if (c_.yarn) {
        const double extrap = pos * freq;
        const double ramp =
            1.0 - std::clamp((i - yarn_low) / std::max(0.001, yarn_high - yarn_low), 0.0, 1.0);
        theta = theta * (1.0 - ramp) + extrap * ramp;
        magnitude = c_.rope_magnitude;
      }
      cos_[static_cast<size_t>(pos) * half + i] =
          static_cast<float>(std::cos(theta) * magnitude);
      sin_[static_cast<size_t>(pos) * half + i] =
          static_cast<float>(std::sin(theta) * magnitude);
    }
  }
}

void RopeTable::Apply(float* v, int n_heads, int head_stride, int pos) const {
  const int half = c_.n_rot / 2;
  const float* cs = cos_.data() + static_cast<size_t>(pos) * half;
  const float* sn = sin_.data() + static_cast<size_t>(pos) * half;
  for (int h = 0; h < n_heads; ++h) {
    float* x = v + h * head_stride;
    if (c_.rope_type == RopeType::kNorm) {
      for (int i = 0; i < half; ++i) {
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * cs[i] - x1 * sn[i];
        x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + half] = x0 * sn[i] + x1 * cs[i];
      }
    }
  }
}

}  // namespace colibri::arch
