// The attention products on every kernel set against plain loops written
// here from the canonical order of model/ops/attend.h: bitwise equal.
#include "model/ops/attend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/ops/quantize.h"
#include "tests/support/kernel_sets.h"

namespace colibri::ops {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Eight lanes over the columns in order, then ((0+4)+(2+6)) + ((1+5)+(3+7)).
float CanonicalDot(const float* a, const float* b, int n) {
  float lanes[8] = {};
  for (int c = 0; c < n; ++c) {
    const float product = a[c] * b[c];
    lanes[c % 8] = lanes[c % 8] + product;
  }
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
         ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

class AttendTest : public testing::KernelSetTest {};

TEST_P(AttendTest, DotsAreTheCanonicalDots) {
  for (int dim : {8, 12, 40, 64, 128, 136, 256}) {
    for (int n_q : {1, 2, 3, 7, 8, 9, 16}) {
      for (int n_keys : {1, 3, 4, 5, 16, 17, 70}) {
        const int64_t q_stride = dim + 8, key_stride = 3 * dim + 16, dots_stride = n_keys + 5;
        const std::vector<float> q = Random(n_q * q_stride, 1 + dim + n_q);
        const std::vector<float> keys = Random(n_keys * key_stride, 2 + dim + n_keys);
        std::vector<float> dots(n_q * dots_stride, -7.0f);
        AttendDots(q.data(), q_stride, n_q, keys.data(), key_stride, n_keys, dim, dots.data(),
                   dots_stride);
        for (int t = 0; t < n_q; ++t) {
          for (int j = 0; j < n_keys; ++j) {
            const float want =
                CanonicalDot(q.data() + t * q_stride, keys.data() + j * key_stride, dim);
            ASSERT_EQ(Bits(dots[t * dots_stride + j]), Bits(want))
                << "dim " << dim << " queries " << n_q << " keys " << n_keys << " at " << t << ", "
                << j;
          }
          for (int j = n_keys; j < dots_stride; ++j) {
            ASSERT_EQ(dots[t * dots_stride + j], -7.0f) << "wrote past key " << n_keys - 1;
          }
        }
      }
    }
  }
}

TEST_P(AttendTest, ValuesAreSequentialWeightedSums) {
  for (int dim : {16, 24, 64, 128, 144, 256}) {
    for (int n_q : {1, 2, 3, 5, 16, 19}) {
      const int64_t stride = dim + 32;
      const int max_keys = 150;  // past AttendValues' blocks of 64 rows
      const std::vector<float> values = Random(max_keys * stride, 3 + dim);
      std::vector<std::vector<float>> p(n_q), out(n_q), want(n_q);
      std::vector<int> n(n_q);
      std::vector<const float*> p_ptr(n_q);
      std::vector<float*> out_ptr(n_q);
      for (int i = 0; i < n_q; ++i) {
        n[i] = (i * 13 + 7) % max_keys;  // uneven lengths, zero for some
        p[i] = Random(max_keys, 4 + i);
        out[i] = Random(dim, 5 + i);  // a sum so far: added to, not replaced
        want[i] = out[i];
        for (int j = 0; j < n[i]; ++j) {
          for (int e = 0; e < dim; ++e) {
            const float product = p[i][j] * values[j * stride + e];
            want[i][e] = want[i][e] + product;
          }
        }
        p_ptr[i] = p[i].data();
        out_ptr[i] = out[i].data();
      }
      AttendValues(p_ptr.data(), n.data(), n_q, values.data(), stride, dim, out_ptr.data());
      for (int i = 0; i < n_q; ++i) {
        for (int e = 0; e < dim; ++e) {
          ASSERT_EQ(Bits(out[i][e]), Bits(want[i][e]))
              << "dim " << dim << " queries " << n_q << " query " << i << " column " << e;
        }
      }
    }
  }
}

TEST_P(AttendTest, ValuesSplitIntoRunsEqualOneCall) {
  const int dim = 128, n_keys = 37, cut = 20;
  const int64_t stride = 4 * dim;
  const std::vector<float> values = Random(n_keys * stride, 9);
  const std::vector<float> p = Random(n_keys, 10);
  std::vector<float> whole(dim, 0.0f), split(dim, 0.0f);
  const float* pp = p.data();
  float* o = whole.data();
  AttendValues(&pp, &n_keys, 1, values.data(), stride, dim, &o);
  const int first = cut, second = n_keys - cut;
  o = split.data();
  AttendValues(&pp, &first, 1, values.data(), stride, dim, &o);
  const float* rest = p.data() + cut;
  AttendValues(&rest, &second, 1, values.data() + cut * stride, stride, dim, &o);
  for (int e = 0; e < dim; ++e) ASSERT_EQ(Bits(whole[e]), Bits(split[e])) << "column " << e;
}

// Random values rounded to half floats: the halves, and the floats they widen to.
struct HalfRows {
  std::vector<uint16_t> halves;
  std::vector<float> widened;
  const uint16_t* rows() const { return halves.data(); }
};

HalfRows RandomHalves(size_t n, uint32_t seed) {
  HalfRows r;
  for (float x : Random(n, seed)) {
    r.halves.push_back(Fp32ToFp16(x));
    r.widened.push_back(Fp16ToFp32(r.halves.back()));
  }
  return r;
}

// Random rows (row r at element r * stride) quantized to q8_0 blocks, and
// the floats they dequantize to; n a multiple of 32.
struct Q8Rows {
  std::vector<BlockQ8_0> blocks;
  std::vector<float> widened;
  Q8_0Rows rows() { return {blocks.data()}; }
};

Q8Rows RandomQ8(size_t n, uint32_t seed) {
  Q8Rows r;
  std::vector<float> x = Random(n, seed);
  for (size_t i = 0; i < n; ++i) x[i] *= 1 + static_cast<float>(i / 32 % 7);  // scales differ
  r.blocks.resize(n / 32);
  StoreQ8_0Row(x.data(), static_cast<int>(n), {r.blocks.data()});
  r.widened.resize(n);
  DequantizeRow(TensorType::kQ8_0, r.blocks.data(), r.widened.data(), static_cast<int64_t>(n));
  return r;
}

// AttendDots over stored keys (make(n, seed): HalfRows or Q8Rows) against
// the canonical dots over the floats they hold, for every dim, query count
// and key count given; key strides are multiples of 32.
template <typename Make>
void ExpectDotsOfTheirFloats(Make make, const std::vector<int>& dims,
                             const std::vector<int>& queries, const std::vector<int>& key_counts) {
  for (int dim : dims) {
    for (int n_q : queries) {
      for (int n_keys : key_counts) {
        const int64_t q_stride = dim + 8, key_stride = 2 * dim + 32, dots_stride = n_keys + 3;
        const std::vector<float> q = Random(n_q * q_stride, 11 + dim + n_q);
        auto keys = make(n_keys * key_stride, 12 + dim + n_keys);
        std::vector<float> dots(n_q * dots_stride, -7.0f);
        AttendDots(q.data(), q_stride, n_q, keys.rows(), key_stride, n_keys, dim, dots.data(),
                   dots_stride);
        for (int t = 0; t < n_q; ++t) {
          for (int j = 0; j < dots_stride; ++j) {
            const float want = j < n_keys ? CanonicalDot(q.data() + t * q_stride,
                                                         keys.widened.data() + j * key_stride, dim)
                                          : -7.0f;
            ASSERT_EQ(Bits(dots[t * dots_stride + j]), Bits(want))
                << "dim " << dim << " queries " << n_q << " keys " << n_keys << " at " << t << ", "
                << j;
          }
        }
      }
    }
  }
}

// AttendValues over stored values against the sequential weighted sums over
// the floats they hold, with row counts on both sides of 32 and 64.
template <typename Make>
void ExpectSumsOfTheirFloats(Make make, const std::vector<int>& dims,
                             const std::vector<int>& queries) {
  for (int dim : dims) {
    for (int n_q : queries) {
      const int64_t stride = dim + 32;
      const int max_keys = 75;
      auto values = make(max_keys * stride, 13 + dim);
      std::vector<std::vector<float>> p(n_q), out(n_q), want(n_q);
      std::vector<int> n(n_q);
      std::vector<const float*> p_ptr(n_q);
      std::vector<float*> out_ptr(n_q);
      for (int i = 0; i < n_q; ++i) {
        n[i] = (i * 29 + 33) % (max_keys + 1);
        p[i] = Random(max_keys, 14 + i);
        out[i] = Random(dim, 15 + i);
        want[i] = out[i];
        for (int j = 0; j < n[i]; ++j) {
          for (int e = 0; e < dim; ++e) {
            const float product = p[i][j] * values.widened[j * stride + e];
            want[i][e] = want[i][e] + product;
          }
        }
        p_ptr[i] = p[i].data();
        out_ptr[i] = out[i].data();
      }
      AttendValues(p_ptr.data(), n.data(), n_q, values.rows(), stride, dim, out_ptr.data());
      for (int i = 0; i < n_q; ++i) {
        for (int e = 0; e < dim; ++e) {
          ASSERT_EQ(Bits(out[i][e]), Bits(want[i][e]))
              << "dim " << dim << " queries " << n_q << " query " << i << " column " << e;
        }
      }
    }
  }
}

TEST_P(AttendTest, HalfKeysGiveTheDotsOfTheirWidenedRows) {
  // Key counts across the 32-row blocks the halves are widened in.
  ExpectDotsOfTheirFloats(RandomHalves, {8, 64, 128, 136}, {1, 3, 16}, {1, 31, 32, 33, 70});
}

TEST_P(AttendTest, HalfValuesGiveTheSumsOfTheirWidenedRows) {
  ExpectSumsOfTheirFloats(RandomHalves, {16, 64, 128, 144}, {1, 2, 5, 16});
}

TEST_P(AttendTest, Q8_0KeysGiveTheDotsOfTheirDequantizedRows) {
  // Every pass shape of the kernel sets (1, 4, 8 queries; 2, 4, 8, 16 keys).
  ExpectDotsOfTheirFloats(RandomQ8, {32, 64, 128, 160, 256}, {1, 2, 3, 4, 5, 8, 9, 16},
                          {1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 70});
}

TEST_P(AttendTest, Q8_0ValuesGiveTheSumsOfTheirDequantizedRows) {
  ExpectSumsOfTheirFloats(RandomQ8, {32, 64, 96, 128, 160}, {1, 2, 3, 4, 5, 8, 9, 16});
}

// SoftmaxInPlace against the softmax in double: its exps are within 1 ulp
// and its sum runs in float, so each weight is within a few parts in 10^7.
double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

// R = H D / 8 on each block of 32: a basis vector goes to +-1/8 in every
// element of its own block (exact) and nowhere else, and the images of two
// basis vectors are orthogonal with squared norm 1/2 (R^T R = I / 2).
TEST(Q8_0RotationTest, RowRotationIsAScaledOrthogonalMapPerBlock) {
  constexpr int kN = 64;
  std::vector<std::vector<float>> images(kN, std::vector<float>(kN));
  for (int i = 0; i < kN; ++i) {
    std::vector<float> e(kN, 0.0f);
    e[i] = 1.0f;
    RotateQ8_0Row(e.data(), kN, images[i].data());
    for (int c = 0; c < kN; ++c) {
      const float want = c / 32 == i / 32 ? 0.125f : 0.0f;
      EXPECT_EQ(std::fabs(images[i][c]), want) << "basis " << i << " element " << c;
    }
  }
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < kN; ++j) {
      EXPECT_EQ(Dot(images[i], images[j]), i == j ? 0.5 : 0.0) << i << " " << j;
    }
  }
  // The signs D are not all +1: without them H maps the all-ones block to
  // a single spike, the worst case for a block scale.
  std::vector<float> ones(32, 1.0f), image(32);
  RotateQ8_0Row(ones.data(), 32, image.data());
  float largest = 0;
  for (float x : image) largest = std::max(largest, std::fabs(x));
  EXPECT_LT(largest, 32 * 0.125f);
}

// Q q . R k = q . k, Q^T (sum p_j R v_j) = sum p_j v_j and R^-1 R x = x up
// to float rounding: the attention over rotated rows is the attention over
// the rows.
TEST(Q8_0RotationTest, RotatedProductsRoundTrip) {
  constexpr int kN = 96;
  const std::vector<float> q = Random(kN, 1), k = Random(kN, 2);
  std::vector<float> rq(kN), rk(kN);
  RotateQ8_0Query(q.data(), kN, rq.data());
  RotateQ8_0Row(k.data(), kN, rk.data());
  EXPECT_NEAR(Dot(rq, rk), Dot(q, k), 1e-5 * std::sqrt(Dot(q, q) * Dot(k, k)));

  std::vector<float> sum(kN, 0.0f), rotated_sum(kN, 0.0f), rv(kN);
  for (int j = 0; j < 5; ++j) {
    const std::vector<float> v = Random(kN, 10 + j);
    const float p = 0.1f * static_cast<float>(j + 1);
    RotateQ8_0Row(v.data(), kN, rv.data());
    for (int e = 0; e < kN; ++e) {
      sum[e] += p * v[e];
      rotated_sum[e] += p * rv[e];
    }
  }
  std::vector<float> back(kN);
  UnrotateQ8_0Output(rotated_sum.data(), kN, back.data());
  for (int e = 0; e < kN; ++e) EXPECT_NEAR(back[e], sum[e], 1e-5f) << e;

  // In place, and the stored row back through LoadRotatedQ8_0Row.
  std::vector<float> x = Random(kN, 3), y = x;
  RotateQ8_0Row(y.data(), kN, y.data());
  std::vector<BlockQ8_0> blocks(kN / 32);
  StoreQ8_0Row(y.data(), kN, {blocks.data()});
  UnrotateQ8_0Output(y.data(), kN, y.data());
  std::vector<float> loaded(kN);
  LoadRotatedQ8_0Row({blocks.data()}, kN, loaded.data());
  for (int e = 0; e < kN; ++e) {
    EXPECT_NEAR(y[e], x[e], 1e-6f) << e;
    EXPECT_NEAR(loaded[e], x[e], 0.03f) << e;  // 8 bits of a block of N(0, 1)
  }
}

TEST(SoftmaxInPlaceTest, MatchesTheSoftmaxInDoubleWithAndWithoutASink) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> score(-30.0f, 30.0f);
  for (int n = 1; n <= 70; ++n) {
    for (bool with_sink : {false, true}) {
      std::vector<float> scores(n);
      for (float& x : scores) x = score(rng);
      const float scale = 0.125f;
      const float sink = 2.5f;
      double max = -INFINITY;
      for (float x : scores) max = std::max(max, static_cast<double>(x * scale));
      if (with_sink) max = std::max(max, static_cast<double>(sink));
      double sum = with_sink ? std::exp(sink - max) : 0.0;
      for (float x : scores) sum += std::exp(static_cast<double>(x * scale) - max);
      std::vector<float> got = scores;
      SoftmaxInPlace(got.data(), n, scale, with_sink ? &sink : nullptr);
      for (int j = 0; j < n; ++j) {
        const double want = std::exp(static_cast<double>(scores[j] * scale) - max) / sum;
        ASSERT_NEAR(got[j], want, 1e-6 * want + 1e-30)
            << "n " << n << " j " << j << " sink " << with_sink;
      }
    }
  }
}

TEST(SoftmaxInPlaceTest, MaskedAndFarBelowScoresWeighNothing) {
  // -inf (a masked position), far below the maximum, and NaN: weight 0; the
  // rest share the mass. exp(0) is exactly 1, so the two maxima get 1/2 each.
  std::vector<float> scores = {3.0f, -INFINITY, 3.0f, -200.0f, std::nanf(""), -INFINITY};
  SoftmaxInPlace(scores.data(), static_cast<int>(scores.size()), 1.0f, nullptr);
  EXPECT_EQ(scores, (std::vector<float>{0.5f, 0.0f, 0.5f, 0.0f, 0.0f, 0.0f}));
  // A sink above every score takes mass without a row of its own.
  std::vector<float> one = {0.0f};
  const float sink = 0.0f;
  SoftmaxInPlace(one.data(), 1, 1.0f, &sink);
  EXPECT_EQ(one[0], 0.5f);
}

INSTANTIATE_TEST_SUITE_P(KernelSets, AttendTest, ::testing::ValuesIn(ops::kEveryKernelSet),
                         testing::KernelSetParamName);

}  // namespace
}  // namespace colibri::ops
