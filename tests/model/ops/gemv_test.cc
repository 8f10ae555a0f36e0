// The single-token (decode) tiles (model/ops/gemv.h) through MatMul: every
// type they handle, row counts around multiples of 16 (full 16-row tiles,
// 4-row and per-row edges), several widths, unaligned weight rows, 1-3
// threads and every kernel set this machine runs, bitwise against
// MatMulReference, whose per-element code shares nothing with the tiles.
#include <cmath>
#include <cstring>
#include <random>
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

// Rows quantized from normal values at row-dependent scales, some rows of
// extreme values (the quantizer then uses its largest codes), and one row of
// all-0xFF quant bytes under fp16 scales of 1, so that the largest quants and
// scales meet the largest activations. The data starts `misalign` bytes past
// an aligned address, as rows inside a GGUF file may.
Matrix MakeMatrix(TensorType type, int64_t rows, int64_t cols, int misalign, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Matrix m;
  m.w.type = type;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.row_bytes = RowBytesUnchecked(type, cols);
  m.bytes.resize(rows * m.w.row_bytes + 128);
  uint8_t* base = m.bytes.data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64 + misalign;
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
    for (float& v : row) v = dist(rng) * scale;
    if (r % 7 == 3) {
      for (int64_t c = 0; c < cols; ++c) row[c] = (c % 3 == 0 ? -8.0f : 8.0f) * scale;
    }
    uint8_t* dst = base + r * m.w.row_bytes;
    const absl::Status s = QuantizeRow(type, row.data(), dst, cols);
    EXPECT_TRUE(s.ok()) << TypeName(type) << ": " << s;
    if (r == rows / 2) {
      std::memset(dst, 0xFF, m.w.row_bytes);
      // fp16 1.0 for every d (and dmin): at offset 0 (Q4_K, Q5_K) or at the
      // end of the block (Q6_K).
      const int64_t block_bytes = m.w.row_bytes / (cols / 256);
      for (int64_t b = 0; b < cols / 256; ++b) {
        uint8_t* block = dst + b * block_bytes;
        const uint16_t one = 0x3C00;
        if (type == TensorType::kQ6_K) {
          std::memcpy(block + block_bytes - 2, &one, 2);
        } else {
          std::memcpy(block, &one, 2);
          std::memcpy(block + 2, &one, 2);
        }
      }
    }
  }
  m.w.data = base;
  return m;
}

std::vector<float> MakeActivation(int64_t cols, bool extreme, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(cols);
  for (int64_t c = 0; c < cols; ++c) {
    // ±1 everywhere quantizes to ±127, the largest activation codes.
    x[c] = extreme ? ((c * 7) % 3 == 0 ? -1.0f : 1.0f) : dist(rng);
  }
  if (!extreme) x[cols / 3] = 30.0f;  // one dominating value
  return x;
}

class GemvTest : public testing::KernelSetTest {};

TEST_P(GemvTest, OneTokenEqualsReferenceBitwise) {
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  struct Shape {
    int64_t rows, cols;
    int misalign;
  };
  // 16-row tiles alone; tiles plus a 4-row and a per-row edge; fewer rows
  // than a tile; rows split between threads; wide rows; unaligned rows.
  const Shape shapes[] = {{32, 256, 0},  {54, 512, 0},  {13, 768, 0}, {96, 2048, 0},
                          {35, 7168, 0}, {67, 1024, 1}, {48, 768, 6}};
  for (TensorType type : {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    for (const Shape& shape : shapes) {
      const Matrix m = MakeMatrix(type, shape.rows, shape.cols, shape.misalign, 3);
      for (bool extreme : {false, true}) {
        const std::vector<float> x = MakeActivation(shape.cols, extreme, 5);
        std::vector<float> want(shape.rows);
        MatMulReference(m.w, x.data(), 1, want.data(), shape.rows, NumericPath::kFast);
        for (ThreadPool* pool : pools) {
          std::vector<float> got(shape.rows + 1, -7.0f);
          MatMulScratch scratch;
          MatMul(m.w, x.data(), 1, got.data(), shape.rows, NumericPath::kFast, pool, &scratch);
          for (int64_t r = 0; r < shape.rows; ++r) {
            ASSERT_EQ(std::memcmp(&got[r], &want[r], sizeof(float)), 0)
                << TypeName(type) << " " << ActiveKernelSetName() << " " << shape.rows << " x "
                << shape.cols << " misalign " << shape.misalign << " extreme " << extreme
                << " threads " << (pool != nullptr ? pool->num_threads() : 1) << " r=" << r << ": "
                << got[r] << " vs reference " << want[r];
          }
          ASSERT_EQ(got[shape.rows], -7.0f) << "wrote past the last row";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KernelSets, GemvTest,
                         ::testing::Values(KernelSetChoice::kPortable, KernelSetChoice::kAvx2,
                                           KernelSetChoice::kAvx512),
                         testing::KernelSetParamName);

}  // namespace
}  // namespace colibri::ops
