// MatMul's exact path over weights in the interleaved layout
// (model/ops/weight_layout.h) whose rows are long: the path dequantizes a
// block of rows at a time, and a block of float32 rows of more than 3072
// columns holds fewer rows than a group of 8, so blocks begin and end inside
// groups. Every type with the layout, on every kernel set this machine runs,
// bitwise against the same rows in GGUF order.
//
// Each case runs on threads of its own (a new calling thread and a new
// pool), so the buffers MatMul keeps per thread start empty and any write
// past the bytes a block asked for lands outside its allocation, where
// AddressSanitizer sees it (this test carries the `sanitize` label).
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/ops/matmul.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"
#include "model/ops/weight_layout.h"
#include "tests/model/ops/quantized_matrix.h"
#include "tests/support/kernel_sets.h"

namespace colibri::ops {
namespace {

constexpr TensorType kInterleavedTypes[] = {
    TensorType::kQ4_K,  TensorType::kQ5_K,  TensorType::kQ6_K, TensorType::kQ8_0,
    TensorType::kMXFP4, TensorType::kQ4_0,  TensorType::kQ4_1, TensorType::kQ5_0,
    TensorType::kQ5_1,  TensorType::kIQ4_NL};

using testing::MakeMatrix;
using testing::Matrix;

class InterleavedExactPathTest : public testing::KernelSetTest {};

// Column counts whose float32 rows fill a 96 KiB block with 7, 6 and 1 rows;
// row counts of one group, of two groups and 3 rows after them, of five
// groups (two row ranges with two threads); one token and three.
TEST_P(InterleavedExactPathTest, LongRowsEqualRowOrderBitwise) {
  for (TensorType type : kInterleavedTypes) {
    for (int64_t cols : {13 * 256, 16 * 256, 56 * 256}) {
      for (int64_t rows : {8, 19, 40}) {
        const Matrix m = MakeMatrix(type, rows, cols, static_cast<uint32_t>(rows + cols));
        std::vector<uint8_t> storage(m.bytes.size());
        const WeightMatrix interleaved = InterleaveMatrix(m.w, storage.data());
        std::mt19937 rng(static_cast<uint32_t>(cols));
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(3 * cols);
        for (float& v : x) v = dist(rng);
        for (int64_t n_tokens : {1, 3}) {
          for (int threads : {1, 2}) {
            const std::string where =
                absl::StrCat(TypeName(type), " on ", ActiveKernelSetName(), ", ", rows, " x ", cols,
                             ", ", n_tokens, " tokens, ", threads, " threads");
            std::vector<float> want(n_tokens * rows, -3.0f), got(n_tokens * rows, -4.0f);
            std::thread run([&] {
              std::unique_ptr<ThreadPool> pool;
              if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
              MatMulScratch scratch;
              MatMul(m.w, x.data(), n_tokens, want.data(), rows, NumericPath::kExact, pool.get(),
                     &scratch);
              MatMul(interleaved, x.data(), n_tokens, got.data(), rows, NumericPath::kExact,
                     pool.get(), &scratch);
            });
            run.join();
            for (int64_t i = 0; i < n_tokens * rows; ++i) {
              ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
                  << where << ": t=" << i / rows << " r=" << i % rows << ": " << got[i] << " vs "
                  << want[i];
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KernelSets, InterleavedExactPathTest, ::testing::ValuesIn(kEveryKernelSet),
                         testing::KernelSetParamName);

}  // namespace
}  // namespace colibri::ops
