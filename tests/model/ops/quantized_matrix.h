// Quantized weight matrices for the kernel tests: `type` rows made from
// seeded normal values, as MatMul reads them.
#ifndef COLIBRI_TESTS_MODEL_OPS_QUANTIZED_MATRIX_H_
#define COLIBRI_TESTS_MODEL_OPS_QUANTIZED_MATRIX_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "model/ops/matmul.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"

namespace colibri::testing {

struct Matrix {
  std::vector<uint8_t> bytes;
  ops::WeightMatrix w;
};

// Rows quantized from normal values at row-dependent scales, and a few rows
// of extreme quants (all bytes 0xFF but the fp16 scales), so that the largest
// quants and scales meet the largest activations.
// rows x cols of `type`, bytes zero (data set by the caller once they are
// final).
inline Matrix EmptyMatrix(ops::TensorType type, int64_t rows, int64_t cols) {
  Matrix m;
  m.w.type = type;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.row_bytes = ops::RowBytesUnchecked(type, cols);
  m.bytes.resize(rows * m.w.row_bytes);
  return m;
}

inline Matrix MakeMatrix(ops::TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Matrix m = EmptyMatrix(type, rows, cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
    for (float& v : row) v = dist(rng) * scale;
    if (r % 9 == 4) {
      // Same magnitude everywhere: the quantizer uses the largest codes.
      for (int64_t c = 0; c < cols; ++c) row[c] = (c % 3 == 0 ? -8.0f : 8.0f) * scale;
    }
    const absl::Status s =
        ops::QuantizeRow(type, row.data(), m.bytes.data() + r * m.w.row_bytes, cols);
    EXPECT_TRUE(s.ok()) << ops::TypeName(type) << ": " << s;
  }
  m.w.data = m.bytes.data();
  return m;
}

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_MODEL_OPS_QUANTIZED_MATRIX_H_
