#include "model/ops/matmul.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"
#include "tests/support/kernel_sets.h"

namespace colibri::ops {
namespace {

const TensorType kAllTypes[] = {
    TensorType::kF32,
    TensorType::kF16,
    TensorType::kBF16,
    TensorType::kQ8_0,
    TensorType::kQ4_0,
    TensorType::kQ4_1,
    TensorType::kQ5_0,
    TensorType::kQ5_1,
    TensorType::kQ2_K,
    TensorType::kQ3_K,
    TensorType::kQ4_K,
    TensorType::kQ5_K,
    TensorType::kQ6_K,
    TensorType::kMXFP4,
    TensorType::kIQ4_NL,
    TensorType::kIQ4_XS,
    // No encoder: random blocks (RandomMatrix).
    TensorType::kIQ2_XXS,
    TensorType::kIQ2_XS,
    TensorType::kIQ2_S,
    TensorType::kIQ3_XXS,
    TensorType::kIQ3_S,
    TensorType::kIQ1_S,
    TensorType::kIQ1_M,
};

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Matrix RandomMatrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Matrix m;
  m.w.type = type;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.row_bytes = RowBytesUnchecked(type, cols);
  m.bytes.resize(rows * m.w.row_bytes);
  std::vector<float> row(cols);
  const TensorTypeTraits& traits = GetTraits(type);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    for (float& v : row) v = dist(rng) * scale;
    uint8_t* dst = m.bytes.data() + r * m.w.row_bytes;
    const absl::Status s = QuantizeRow(type, row.data(), dst, cols);
    if (s.code() == absl::StatusCode::kUnimplemented) {
      // The grid i-quants have no encoder: random blocks, with the fp16 block
      // scale (IQ1_M: spread over the top nibbles of its scale words at byte
      // 48) set to a moderate value.
      for (uint64_t i = 0; i < m.w.row_bytes; ++i) dst[i] = static_cast<uint8_t>(rng());
      for (int64_t b = 0; b < cols / traits.block_size; ++b) {
        uint8_t* blk = dst + b * traits.type_size;
        const uint16_t d = Fp32ToFp16(scale * std::ldexp(1.0f, -4) * (1.0f + (rng() % 8) / 8.0f));
        if (type == TensorType::kIQ1_M) {
          for (int k = 0; k < 4; ++k) {
            blk[48 + 2 * k + 1] =
                static_cast<uint8_t>((blk[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
          }
        } else {
          std::memcpy(blk, &d, sizeof(d));
        }
      }
      continue;
    }
    EXPECT_TRUE(s.ok()) << TypeName(type) << ": " << s;
  }
  m.w.data = m.bytes.data();
  return m;
}

std::vector<float> RandomActivations(int64_t n_tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n_tokens * cols);
  for (float& v : x) v = dist(rng);
  // Make a few values dominate their blocks and include an all-zero block.
  if (cols >= 288) {
    x[3] = 9.0f;
    std::fill(x.begin() + 256, x.begin() + 288, 0.0f);
    if (n_tokens > 1) x[cols + 7] = -11.0f;
  }
  return x;
}

int64_t ColsFor(TensorType type) {
  // Odd numbers of blocks; F32/F16/BF16 rows need not be a multiple of 8.
  const int64_t block = GetTraits(type).block_size;
  return block == 256 ? 3 * 256 : block == 32 ? 11 * 32 : 173;
}

std::string PathName(NumericPath p) { return p == NumericPath::kExact ? "exact" : "fast"; }

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Runs the tests once per kernel set this machine can execute.
class MatMulKernelTest : public testing::KernelSetTest {
 protected:
  void SetUp() override {
    KernelSetTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(ActiveKernelSetName(), testing::KernelSetChoiceName(GetParam()));
  }
};

TEST_P(MatMulKernelTest, EqualsReferenceBitwise) {
  const int64_t rows = 37;
  for (TensorType type : kAllTypes) {
    const int64_t cols = ColsFor(type);
    const Matrix m = RandomMatrix(type, rows, cols, 11);
    for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9, 17}) {
      const std::vector<float> x = RandomActivations(n_tokens, cols, 5 + n_tokens);
      for (NumericPath path : {NumericPath::kExact, NumericPath::kFast}) {
        const int64_t y_stride = rows + 3;
        std::vector<float> y(n_tokens * y_stride, -1.0f), ref(n_tokens * y_stride, -1.0f);
        MatMulScratch scratch;
        MatMul(m.w, x.data(), n_tokens, y.data(), y_stride, path, nullptr, &scratch);
        MatMulReference(m.w, x.data(), n_tokens, ref.data(), y_stride, path);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_TRUE(SameBits(y[t * y_stride + r], ref[t * y_stride + r]))
                << TypeName(type) << " " << PathName(path) << " n_tokens=" << n_tokens << " t=" << t
                << " r=" << r << ": " << y[t * y_stride + r] << " vs reference "
                << ref[t * y_stride + r] << " (" << ActiveKernelSetName() << ")";
          }
          for (int64_t r = rows; r < y_stride; ++r) ASSERT_EQ(y[t * y_stride + r], -1.0f);
        }
      }
    }
  }
}

// Large enough to be split across threads and into several row blocks and token tiles.
TEST_P(MatMulKernelTest, BatchAndThreadInvariance) {
  ThreadPool pool1(1), pool2(2);
  for (TensorType type : kAllTypes) {
    const int64_t cols = GetTraits(type).block_size == 1 ? 1000 : 1024;
    const int64_t rows = 301;
    const Matrix m = RandomMatrix(type, rows, cols, 3);
    const int64_t n_tokens = 19;
    const std::vector<float> x = RandomActivations(n_tokens, cols, 9);
    for (NumericPath path : {NumericPath::kExact, NumericPath::kFast}) {
      MatMulScratch scratch;
      std::vector<float> batch1(n_tokens * rows), batch2(n_tokens * rows);
      MatMul(m.w, x.data(), n_tokens, batch1.data(), rows, path, &pool1, &scratch);
      MatMul(m.w, x.data(), n_tokens, batch2.data(), rows, path, &pool2, &scratch);
      for (int64_t t : {0, 5, 18}) {
        std::vector<float> alone(rows);
        MatMul(m.w, x.data() + t * cols, 1, alone.data(), rows, path, &pool2, &scratch);
        // The same token inside a different, smaller batch at another position.
        std::vector<float> pair_x(2 * cols);
        std::copy(x.begin() + ((t + 1) % n_tokens) * cols,
                  x.begin() + ((t + 1) % n_tokens + 1) * cols, pair_x.begin());
        std::copy(x.begin() + t * cols, x.begin() + (t + 1) * cols, pair_x.begin() + cols);
        std::vector<float> pair(2 * rows);
        MatMul(m.w, pair_x.data(), 2, pair.data(), rows, path, &pool1, &scratch);
        for (int64_t r = 0; r < rows; ++r) {
          const float want = batch1[t * rows + r];
          ASSERT_TRUE(SameBits(want, batch2[t * rows + r]))
              << TypeName(type) << " " << PathName(path) << " 1 vs 2 threads, t=" << t
              << " r=" << r;
          ASSERT_TRUE(SameBits(want, alone[r])) << TypeName(type) << " " << PathName(path)
                                                << " alone vs batch, t=" << t << " r=" << r;
          ASSERT_TRUE(SameBits(want, pair[rows + r]))
              << TypeName(type) << " " << PathName(path) << " pair vs batch, t=" << t << " r=" << r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KernelSets, MatMulKernelTest, ::testing::ValuesIn(ops::kEveryKernelSet),
                         testing::KernelSetParamName);

// The exact path against a float64 dot of the dequantized weights.
TEST(MatMulAccuracyTest, ExactPathMatchesDoublePrecision) {
  const int64_t rows = 23, n_tokens = 3;
  for (TensorType type : kAllTypes) {
    const int64_t cols = GetTraits(type).block_size == 1 ? 4000 : 4096;
    const Matrix m = RandomMatrix(type, rows, cols, 21);
    const std::vector<float> x = RandomActivations(n_tokens, cols, 22);
    std::vector<float> y(n_tokens * rows);
    MatMulScratch scratch;
    MatMul(m.w, x.data(), n_tokens, y.data(), rows, NumericPath::kExact, nullptr, &scratch);
    std::vector<float> wrow(cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(type, m.w.data + r * m.w.row_bytes, wrow.data(), cols);
      for (int64_t t = 0; t < n_tokens; ++t) {
        double dot = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          dot += static_cast<double>(wrow[c]) * x[t * cols + c];
          mag += std::fabs(static_cast<double>(wrow[c]) * x[t * cols + c]);
        }
        EXPECT_LE(std::fabs(y[t * rows + r] - dot), 1e-6 * mag)
            << TypeName(type) << " r=" << r << " t=" << t;
      }
    }
  }
}

// The fast path quantizes activations to 8 bits: close to the exact path, but
// not equal for the quantized types; equal for the float types.
TEST(MatMulAccuracyTest, FastPathIsCloseToExactPath) {
  const int64_t rows = 17, n_tokens = 2;
  for (TensorType type : kAllTypes) {
    const int64_t cols = 1024;
    const Matrix m = RandomMatrix(type, rows, cols, 31);
    const std::vector<float> x = RandomActivations(n_tokens, cols, 32);
    std::vector<float> exact(n_tokens * rows), fast(n_tokens * rows);
    MatMulScratch scratch;
    MatMul(m.w, x.data(), n_tokens, exact.data(), rows, NumericPath::kExact, nullptr, &scratch);
    MatMul(m.w, x.data(), n_tokens, fast.data(), rows, NumericPath::kFast, nullptr, &scratch);
    const bool is_float = GetTraits(type).block_size == 1;
    std::vector<float> wrow(cols);
    bool any_difference = false;
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(type, m.w.data + r * m.w.row_bytes, wrow.data(), cols);
      for (int64_t t = 0; t < n_tokens; ++t) {
        double mag = 0;
        for (int64_t c = 0; c < cols; ++c) mag += std::fabs(wrow[c] * x[t * cols + c]);
        const float e = exact[t * rows + r], f = fast[t * rows + r];
        if (is_float) {
          EXPECT_TRUE(SameBits(e, f)) << TypeName(type);
        } else {
          EXPECT_LE(std::fabs(e - f), 0.01 * mag) << TypeName(type) << " r=" << r << " t=" << t;
          any_difference |= e != f;
        }
      }
    }
    if (!is_float) {
      EXPECT_TRUE(any_difference) << TypeName(type) << ": fast path did not quantize";
    }
  }
}

TEST(MatMulTest, ScratchIsReusedAcrossShapes) {
  MatMulScratch scratch;
  ThreadPool pool(2);
  for (int64_t cols : {2048, 512, 4096}) {
    const Matrix m = RandomMatrix(TensorType::kQ4_K, 64, cols, 1);
    const std::vector<float> x = RandomActivations(4, cols, 2);
    std::vector<float> y(4 * 64), ref(4 * 64);
    for (NumericPath path : {NumericPath::kExact, NumericPath::kFast}) {
      MatMul(m.w, x.data(), 4, y.data(), 64, path, &pool, &scratch);
      MatMulReference(m.w, x.data(), 4, ref.data(), 64, path);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(SameBits(y[i], ref[i])) << cols << " " << i;
    }
  }
}

TEST(MatMulTest, SharedInputEqualsSeparateProductsBitwise) {
  // Shared pass (same activation format), mixed formats (falls back) and the
  // exact path, on 1 and 2 threads, against MatMulReference.
  const std::vector<std::vector<TensorType>> groups = {
      {TensorType::kQ4_K, TensorType::kQ4_K},
      {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ5_K},
      {TensorType::kQ8_0, TensorType::kQ4_0},
      {TensorType::kQ4_K, TensorType::kQ8_0},
      {TensorType::kF16, TensorType::kQ4_K},
  };
  const int64_t cols = 512;
  const int64_t row_counts[] = {256, 48, 130};
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    MatMulScratch scratch;
    for (const auto& types : groups) {
      std::vector<Matrix> ms;
      for (size_t i = 0; i < types.size(); ++i) {
        ms.push_back(RandomMatrix(types[i], row_counts[i], cols, 10 + i));
      }
      for (int64_t n_tokens : {1, 3, 9}) {
        const std::vector<float> x = RandomActivations(n_tokens, cols, 7);
        for (NumericPath path : {NumericPath::kExact, NumericPath::kFast}) {
          std::vector<std::vector<float>> ys(ms.size());
          std::vector<MatMulOutput> outs;
          for (size_t i = 0; i < ms.size(); ++i) {
            ys[i].assign(n_tokens * (ms[i].w.rows + 3), -1.0f);
            outs.push_back({&ms[i].w, ys[i].data(), ms[i].w.rows + 3});
          }
          MatMulSharedInput(outs.data(), static_cast<int>(outs.size()), x.data(), n_tokens, path,
                            &pool, &scratch);
          for (size_t i = 0; i < ms.size(); ++i) {
            const int64_t rows = ms[i].w.rows, stride = rows + 3;
            std::vector<float> ref(n_tokens * stride, -1.0f);
            MatMulReference(ms[i].w, x.data(), n_tokens, ref.data(), stride, path);
            for (size_t k = 0; k < ref.size(); ++k) {
              ASSERT_TRUE(SameBits(ys[i][k], ref[k]))
                  << "threads " << threads << " matrix " << i << " " << TypeName(types[i])
                  << " tokens " << n_tokens << " at " << k;
            }
          }
        }
      }
    }
  }
}

TEST(MatMulTest, ZeroTokensOrRowsIsANoOp) {
  const Matrix m = RandomMatrix(TensorType::kQ8_0, 4, 64, 1);
  MatMulScratch scratch;
  float y = 7.0f;
  MatMul(m.w, nullptr, 0, &y, 4, NumericPath::kFast, nullptr, &scratch);
  EXPECT_EQ(y, 7.0f);
}

}  // namespace
// A NaN or an infinity in an activation row must not become a finite, silently
// different result on the fast path (which quantizes activations): the rows it
// touches come out NaN, as on the exact path; the other tokens are unchanged.
TEST(MatMulTest, NonFiniteActivationsPropagateOnEveryPath) {
  MatMulScratch scratch;
  for (TensorType type : kAllTypes) {
    SCOPED_TRACE(TypeName(type));
    const int64_t rows = 8, cols = 512;
    const Matrix m = RandomMatrix(type, rows, cols, 3);
    for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = RandomActivations(2, cols, 4);
      x[cols + 100] = bad;  // token 1 only
      for (NumericPath path : {NumericPath::kExact, NumericPath::kFast}) {
        std::vector<float> y(2 * rows);
        MatMul(m.w, x.data(), 2, y.data(), rows, path, nullptr, &scratch);
        for (int64_t r = 0; r < rows; ++r) {
          EXPECT_TRUE(std::isfinite(y[r])) << r;
          EXPECT_FALSE(std::isfinite(y[rows + r])) << "row " << r << " = " << y[rows + r];
        }
      }
    }
  }
}

}  // namespace colibri::ops
