// moe::ExpertFfn with biases and gpt-oss's clamped SwiGLU, on a hand-computed
// case; and the plain SiLU form.
#include "model/moe/expert_ffn.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::moe {
namespace {

ops::WeightMatrix Identity2(std::vector<float>* storage) {
  *storage = {1.0f, 0.0f, 0.0f, 1.0f};
  ops::WeightMatrix m;
  m.type = ops::TensorType::kF32;
  m.data = reinterpret_cast<const uint8_t*>(storage->data());
  m.rows = 2;
  m.cols = 2;
  m.row_bytes = 2 * sizeof(float);
  return m;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Identity matrices, x = {10, 0.5}: g = x + {0, 0.5} = {10, 1} is clamped above
// to {7, 1}; u = x + {-1, 8} = {9, 8.5} is clamped to {7, 7}; the output is
// g * sigmoid(1.702 g) * (u + 1) + {0.25, -0.25}.
TEST(ExpertFfnTest, ClampedSwigluWithBiases) {
  std::vector<float> a, b, c;
  ExpertWeights w{Identity2(&a), Identity2(&b), Identity2(&c)};
  const float gate_bias[2] = {0.0f, 0.5f};
  const float up_bias[2] = {-1.0f, 8.0f};
  const float down_bias[2] = {0.25f, -0.25f};
  w.gate_bias = gate_bias;
  w.up_bias = up_bias;
  w.down_bias = down_bias;
  w.activation = Activation::kSwigluOai;
  const float x[2] = {10.0f, 0.5f};
  float out[2];
  ExpertFfnScratch scratch;
  ExpertFfn(w, x, 1, out, ops::NumericPath::kExact, nullptr, &scratch);
  EXPECT_NEAR(out[0], 7 * Sigmoid(1.702 * 7) * 8 + 0.25, 1e-4);  // 56.24963
  EXPECT_NEAR(out[1], 1 * Sigmoid(1.702) * 8 - 0.25, 1e-5);      // 6.51637
}

// Without biases and with the default activation: silu(x) * x.
TEST(ExpertFfnTest, PlainSiluMul) {
  std::vector<float> a, b, c;
  const ExpertWeights w{Identity2(&a), Identity2(&b), Identity2(&c)};
  EXPECT_FALSE(w.has_bias());
  const float x[2] = {2.0f, -1.0f};
  float out[2];
  ExpertFfnScratch scratch;
  ExpertFfn(w, x, 1, out, ops::NumericPath::kExact, nullptr, &scratch);
  EXPECT_NEAR(out[0], 2 * Sigmoid(2) * 2, 1e-5);
  EXPECT_NEAR(out[1], -1 * Sigmoid(-1) * -1, 1e-5);
}

}  // namespace
}  // namespace colibri::moe
