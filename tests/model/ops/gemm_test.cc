// The GEMM tiles (model/ops/gemm.h) through MatMul: every type they handle,
// every token count from 1 to 40 (so every 4 x T edge tile, several token
// tiles and row blocks), 1-3 threads and every kernel set this machine runs,
// bitwise against MatMulReference, whose per-element code shares nothing with
// the tiles.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/ops/matmul.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"
#include "tests/support/kernel_sets.h"

namespace colibri::ops {
namespace {

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

// Rows quantized from normal values at row-dependent scales, and a few rows
// of extreme quants (all bytes 0xFF but the fp16 scales), so that the largest
// quants and scales meet the largest activations.
Matrix MakeMatrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Matrix m;
  m.w.type = type;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.row_bytes = RowBytesUnchecked(type, cols);
  m.bytes.resize(rows * m.w.row_bytes);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
    for (float& v : row) v = dist(rng) * scale;
    if (r % 9 == 4) {
      // Same magnitude everywhere: the quantizer uses the largest codes.
      for (int64_t c = 0; c < cols; ++c) row[c] = (c % 3 == 0 ? -8.0f : 8.0f) * scale;
    }
    const absl::Status s = QuantizeRow(type, row.data(), m.bytes.data() + r * m.w.row_bytes, cols);
    EXPECT_TRUE(s.ok()) << TypeName(type) << ": " << s;
  }
  m.w.data = m.bytes.data();
  return m;
}

std::vector<float> MakeActivations(int64_t n_tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n_tokens * cols);
  for (float& v : x) v = dist(rng);
  for (int64_t t = 0; t < n_tokens; ++t) {
    x[t * cols + (13 * t) % cols] = 30.0f;  // one dominating value per row
    if (t % 5 == 2) {
      // ±1 everywhere: quantizes to ±127, the largest activation codes.
      for (int64_t c = 0; c < cols; ++c) x[t * cols + c] = (c * 7 + t) % 3 == 0 ? -1.0f : 1.0f;
    }
  }
  return x;
}

class GemmTest : public testing::KernelSetTest {};

TEST_P(GemmTest, EveryTokenCountAndThreadCountEqualsReferenceBitwise) {
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  // 70 rows: 17 full 4-row groups and an edge of 2 (and, with 3 threads,
  // row ranges that are not multiples of 4 rows of the tile).
  const int64_t rows = 70;
  const int64_t cols = 4 * 256;
  for (TensorType type : {TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K,
                          TensorType::kQ5_K, TensorType::kQ6_K}) {
    const Matrix m = MakeMatrix(type, rows, cols, 21);
    const std::vector<float> x = MakeActivations(40, cols, 8);
    std::vector<float> ref(40 * rows);
    MatMulReference(m.w, x.data(), 40, ref.data(), rows, NumericPath::kFast);
    for (int64_t n_tokens = 1; n_tokens <= 40; ++n_tokens) {
      for (ThreadPool* pool : pools) {
        // Tokens taken from the end of x, so that every position of a token
        // in the batch (and of its tile) is covered across n_tokens.
        const int64_t first = 40 - n_tokens;
        const int64_t y_stride = rows + 1;
        std::vector<float> y(n_tokens * y_stride, -7.0f);
        MatMulScratch scratch;
        MatMul(m.w, x.data() + first * cols, n_tokens, y.data(), y_stride, NumericPath::kFast, pool,
               &scratch);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const float got = y[t * y_stride + r];
            const float want = ref[(first + t) * rows + r];
            ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
                << TypeName(type) << " " << ActiveKernelSetName() << " n_tokens=" << n_tokens
                << " threads=" << (pool != nullptr ? pool->num_threads() : 1) << " t=" << t
                << " r=" << r << ": " << got << " vs reference " << want;
          }
          ASSERT_EQ(y[t * y_stride + rows], -7.0f) << "wrote past the row";
        }
      }
    }
  }
}

// Rows of many super-blocks: 35 (the AVX2 tiles work through 16 at a time,
// so two full passes and a partial one), 37 rows (edges for every tile
// height), 1-9 tokens and 1-2 threads, bitwise against MatMulReference.
TEST_P(GemmTest, LongRowsEqualReferenceBitwise) {
  ThreadPool pool2(2);
  ThreadPool* pools[] = {nullptr, &pool2};
  const int64_t rows = 37;
  const int64_t cols = 35 * 256;
  for (TensorType type : {TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K,
                          TensorType::kQ5_K, TensorType::kQ6_K}) {
    const Matrix m = MakeMatrix(type, rows, cols, 5);
    const std::vector<float> x = MakeActivations(9, cols, 6);
    std::vector<float> ref(9 * rows);
    MatMulReference(m.w, x.data(), 9, ref.data(), rows, NumericPath::kFast);
    for (int64_t n_tokens = 1; n_tokens <= 9; ++n_tokens) {
      for (ThreadPool* pool : pools) {
        std::vector<float> y(n_tokens * rows, -7.0f);
        MatMulScratch scratch;
        MatMul(m.w, x.data(), n_tokens, y.data(), rows, NumericPath::kFast, pool, &scratch);
        for (int64_t i = 0; i < n_tokens * rows; ++i) {
          ASSERT_EQ(std::memcmp(&y[i], &ref[i], sizeof(float)), 0)
              << TypeName(type) << " " << ActiveKernelSetName() << " n_tokens=" << n_tokens
              << " threads=" << (pool != nullptr ? pool->num_threads() : 1) << " t=" << i / rows
              << " r=" << i % rows << ": " << y[i] << " vs reference " << ref[i];
        }
      }
    }
  }
}

// MatMulGroup against separate MatMul calls: mixed weight types and widths,
// products that share their input (as gate and up do) and some that do not,
// empty products, 1-3 threads and both paths.
TEST_P(GemmTest, GroupEqualsSeparateProductsBitwise) {
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  const Matrix a = MakeMatrix(TensorType::kQ4_K, 48, 512, 1);
  const Matrix b = MakeMatrix(TensorType::kQ6_K, 48, 512, 2);
  const Matrix c = MakeMatrix(TensorType::kQ8_0, 20, 512, 3);
  const Matrix d = MakeMatrix(TensorType::kQ5_K, 36, 256, 4);
  const Matrix e = MakeMatrix(TensorType::kF16, 12, 256, 5);
  const std::vector<float> x512 = MakeActivations(9, 512, 6);
  const std::vector<float> x256 = MakeActivations(9, 256, 7);
  struct Spec {
    const Matrix* m;
    const float* x;
    int64_t n_tokens;
  };
  // a and b share x (gate/up-like); a again on other rows of x; c shares x
  // with b at a different token count; an empty product; d on the narrow x.
  const std::vector<std::vector<Spec>> groups = {
      {{&a, x512.data(), 5},
       {&b, x512.data(), 5},
       {&a, x512.data() + 512, 3},
       {&c, x512.data() + 512, 8},
       {&b, x512.data(), 0},
       {&d, x256.data(), 9},
       {&d, x256.data() + 256 * 4, 1}},
      // With float weights: separate calls inside the group.
      {{&a, x512.data(), 2}, {&e, x256.data(), 4}},
  };
  for (const std::vector<Spec>& specs : groups) {
    for (NumericPath path : {NumericPath::kFast, NumericPath::kExact}) {
      for (ThreadPool* pool : pools) {
        std::vector<std::vector<float>> want(specs.size()), got(specs.size());
        std::vector<MatMulProblem> problems;
        MatMulScratch scratch;
        for (size_t i = 0; i < specs.size(); ++i) {
          const Spec& s = specs[i];
          const int64_t y_stride = s.m->w.rows + 2;
          want[i].assign(std::max<int64_t>(1, s.n_tokens) * y_stride, -5.0f);
          got[i] = want[i];
          MatMul(s.m->w, s.x, s.n_tokens, want[i].data(), y_stride, path, nullptr, &scratch);
          problems.push_back({&s.m->w, s.x, s.n_tokens, got[i].data(), y_stride});
        }
        MatMulGroup(problems.data(), static_cast<int64_t>(problems.size()), path, pool, &scratch);
        for (size_t i = 0; i < specs.size(); ++i) {
          ASSERT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
              << "product " << i << " (" << TypeName(specs[i].m->w.type) << ", "
              << specs[i].n_tokens << " tokens) " << ActiveKernelSetName()
              << (path == NumericPath::kFast ? " fast" : " exact") << " threads "
              << (pool != nullptr ? pool->num_threads() : 1);
        }
        // Again with the inputs that have a quantized form quantized ahead
        // (QuantizeInputRows, x_quantized; x then null): the same results.
        std::vector<std::vector<uint8_t>> rows(specs.size());
        std::vector<MatMulProblem> prequantized;
        int ahead = 0;
        for (size_t i = 0; i < specs.size(); ++i) {
          const Spec& s = specs[i];
          got[i].assign(want[i].size(), -5.0f);
          MatMulProblem p{&s.m->w, s.x, s.n_tokens, got[i].data(), s.m->w.rows + 2};
          const InputRowFormat f = InputRowFormatFor(s.m->w, path);
          if (f.row_bytes > 0 && s.n_tokens > 0) {
            rows[i].resize(s.n_tokens * f.row_bytes + 64);
            const auto at = reinterpret_cast<uintptr_t>(rows[i].data());
            uint8_t* aligned = rows[i].data() + ((64 - at % 64) % 64);
            QuantizeInputRows(f, s.x, s.m->w.cols, s.n_tokens, aligned, pool);
            p.x = nullptr;
            p.x_quantized = aligned;
            ++ahead;
          }
          prequantized.push_back(p);
        }
        MatMulGroup(prequantized.data(), static_cast<int64_t>(prequantized.size()), path, pool,
                    &scratch);
        for (size_t i = 0; i < specs.size(); ++i) {
          ASSERT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
              << "product " << i << " quantized ahead (" << ahead << " of " << specs.size()
              << ") " << ActiveKernelSetName() << (path == NumericPath::kFast ? " fast" : " exact");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KernelSets, GemmTest,
                         ::testing::Values(KernelSetChoice::kPortable, KernelSetChoice::kAvx2,
                                           KernelSetChoice::kAvx512),
                         testing::KernelSetParamName);

}  // namespace
}  // namespace colibri::ops
