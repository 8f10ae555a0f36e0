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
#include "model/ops/weight_layout.h"
#include "tests/model/ops/quantized_matrix.h"
#include "tests/support/kernel_sets.h"

namespace colibri::ops {
namespace {

using testing::EmptyMatrix;
using testing::MakeMatrix;
using testing::Matrix;

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
    if (t % 5 == 4) {
      // +1 everywhere: against rows of the largest codes, the largest sums
      // of one sign that the tiles' 16-bit partial sums must hold.
      for (int64_t c = 0; c < cols; ++c) x[t * cols + c] = 1.0f;
    }
  }
  return x;
}

// m's matrix, and for the types with an interleaved layout the same rows
// interleaved (into *storage): MatMul must give bitwise the same on both.
std::vector<WeightMatrix> Layouts(const Matrix& m, std::vector<uint8_t>* storage) {
  std::vector<WeightMatrix> out = {m.w};
  if (HasInterleavedLayout(m.w.type)) {
    storage->assign(m.bytes.size(), 0);
    out.push_back(InterleaveMatrix(m.w, storage->data()));
  }
  return out;
}

const char* LayoutName(const WeightMatrix& w) {
  return w.layout == WeightLayout::kRows ? "rows" : "interleaved";
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
    std::vector<uint8_t> storage;
    for (const WeightMatrix& w : Layouts(m, &storage)) {
      for (int64_t n_tokens = 1; n_tokens <= 40; ++n_tokens) {
        for (ThreadPool* pool : pools) {
          // Tokens taken from the end of x, so that every position of a token
          // in the batch (and of its tile) is covered across n_tokens.
          const int64_t first = 40 - n_tokens;
          const int64_t y_stride = rows + 1;
          std::vector<float> y(n_tokens * y_stride, -7.0f);
          MatMulScratch scratch;
          MatMul(w, x.data() + first * cols, n_tokens, y.data(), y_stride, NumericPath::kFast, pool,
                 &scratch);
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              const float got = y[t * y_stride + r];
              const float want = ref[(first + t) * rows + r];
              ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
                  << TypeName(type) << " " << LayoutName(w) << " " << ActiveKernelSetName()
                  << " n_tokens=" << n_tokens
                  << " threads=" << (pool != nullptr ? pool->num_threads() : 1) << " t=" << t
                  << " r=" << r << ": " << got << " vs reference " << want;
            }
            ASSERT_EQ(y[t * y_stride + rows], -7.0f) << "wrote past the row";
          }
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
    std::vector<uint8_t> storage;
    for (const WeightMatrix& w : Layouts(m, &storage)) {
      for (int64_t n_tokens = 1; n_tokens <= 9; ++n_tokens) {
        for (ThreadPool* pool : pools) {
          std::vector<float> y(n_tokens * rows, -7.0f);
          MatMulScratch scratch;
          MatMul(w, x.data(), n_tokens, y.data(), rows, NumericPath::kFast, pool, &scratch);
          for (int64_t i = 0; i < n_tokens * rows; ++i) {
            ASSERT_EQ(std::memcmp(&y[i], &ref[i], sizeof(float)), 0)
                << TypeName(type) << " " << LayoutName(w) << " " << ActiveKernelSetName()
                << " n_tokens=" << n_tokens
                << " threads=" << (pool != nullptr ? pool->num_threads() : 1) << " t=" << i / rows
                << " r=" << i % rows << ": " << y[i] << " vs reference " << ref[i];
          }
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
  // a in the interleaved layout: 6 groups of 8 rows.
  std::vector<uint8_t> a8_bytes(a.bytes.size());
  const Matrix a8{{}, InterleaveMatrix(a.w, a8_bytes.data())};
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
       {&a8, x512.data(), 5},
       {&a, x512.data() + 512, 3},
       {&a8, x512.data() + 512, 1},
       {&c, x512.data() + 512, 8},
       {&b, x512.data(), 0},
       {&d, x256.data(), 9},
       {&d, x256.data() + 256 * 4, 1}},
      // With float weights: separate calls inside the group.
      {{&a, x512.data(), 2}, {&e, x256.data(), 4}, {&a8, x512.data() + 1024, 7}},
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
              << "product " << i << " quantized ahead (" << ahead << " of " << specs.size() << ") "
              << ActiveKernelSetName() << (path == NumericPath::kFast ? " fast" : " exact");
        }
      }
    }
  }
}

// The interleaved layout against GGUF order on both paths: fewer rows than a
// group, whole groups, groups with rows after them, 1-3 threads (row ranges
// that end inside the rows after the last group), token counts that fill the
// tiles' passes of four and leave every remainder.
TEST_P(GemmTest, InterleavedLayoutEqualsRowOrderOnBothPaths) {
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  const int64_t cols = 3 * 256;
  const std::vector<float> x = MakeActivations(17, cols, 9);
  for (TensorType type :
       {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kQ8_0,
        TensorType::kMXFP4, TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
        TensorType::kQ5_1, TensorType::kIQ4_NL}) {
    for (int64_t rows : {3, 8, 29, 64, 133}) {
      const Matrix m = MakeMatrix(type, rows, cols, static_cast<uint32_t>(rows));
      std::vector<uint8_t> storage;
      const std::vector<WeightMatrix> layouts = Layouts(m, &storage);
      ASSERT_EQ(layouts.size(), 2u);
      if (rows >= kInterleaveRows) {
        ASSERT_NE(std::memcmp(storage.data(), m.bytes.data(), m.bytes.size()), 0)
            << "interleaving " << rows << " rows changed no byte";
      }
      for (NumericPath path : {NumericPath::kFast, NumericPath::kExact}) {
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 17}) {
          for (ThreadPool* pool : pools) {
            std::vector<float> want(n_tokens * rows, -3.0f), got(n_tokens * rows, -4.0f);
            MatMulScratch scratch;
            MatMul(layouts[0], x.data(), n_tokens, want.data(), rows, path, pool, &scratch);
            MatMul(layouts[1], x.data(), n_tokens, got.data(), rows, path, pool, &scratch);
            for (int64_t i = 0; i < n_tokens * rows; ++i) {
              ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
                  << TypeName(type) << " " << ActiveKernelSetName()
                  << (path == NumericPath::kFast ? " fast" : " exact") << " rows=" << rows
                  << " n_tokens=" << n_tokens
                  << " threads=" << (pool != nullptr ? pool->num_threads() : 1) << " t=" << i / rows
                  << " r=" << i % rows << ": " << got[i] << " vs " << want[i];
            }
          }
        }
      }
    }
  }
}

// MatMul asks for the layout only where the kernel set has tiles for it: the
// AVX2 set for Q4_K, Q5_K, Q6_K, Q8_0, MXFP4, Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL, the
// AVX-512 set for all of these too; never the portable set,
// another type, a
// matrix without a full group or one interleaved already.
TEST_P(GemmTest, PrefersInterleavedOnlyWhereTheSetHasTiles) {
  const Matrix q4 = MakeMatrix(TensorType::kQ4_K, 16, 256, 1);
  const Matrix q3 = MakeMatrix(TensorType::kQ3_K, 16, 256, 2);
  const Matrix few = MakeMatrix(TensorType::kQ4_K, 7, 256, 3);
  const std::string set = ActiveKernelSetName();
  // Which sets ask for the layout: every type that has it on AVX2 and
  // AVX-512 (tiles of its own for the K-quants, the AVX2 set's for the
  // 32-element types), none on the portable set.
  struct Case {
    TensorType type;
    bool avx2, avx512;
  };
  const Case cases[] = {
      {TensorType::kQ4_K, true, true},  {TensorType::kQ5_K, true, true},
      {TensorType::kQ6_K, true, true},  {TensorType::kQ8_0, true, true},
      {TensorType::kMXFP4, true, true}, {TensorType::kQ4_0, true, true},
      {TensorType::kQ4_1, true, true},  {TensorType::kQ5_0, true, true},
      {TensorType::kQ5_1, true, true},  {TensorType::kIQ4_NL, true, true},
  };
  for (const Case& c : cases) {
    const Matrix m = MakeMatrix(c.type, 16, 256, 1);
    const bool expected = set == "avx2" ? c.avx2 : set == "avx512" ? c.avx512 : false;
    if (set == "avx2" || set == "avx512" || set == "portable") {
      EXPECT_EQ(PrefersInterleaved(m.w), expected) << TypeName(c.type) << " on " << set;
    }
  }
  EXPECT_FALSE(PrefersInterleaved(q3.w));
  EXPECT_FALSE(PrefersInterleaved(few.w));
  std::vector<uint8_t> storage(q4.bytes.size());
  EXPECT_FALSE(PrefersInterleaved(InterleaveMatrix(q4.w, storage.data())));
}

// Random rows (not quantized: every byte value) of `type` interleaved, each
// byte checked by `where` (block i, row r, the row block's bytes src), and
// put back.
template <typename Check>
void CheckInterleaveBytes(TensorType type, uint64_t block_bytes, Check where) {
  const int64_t nb = 3;
  const uint64_t row_bytes = nb * block_bytes;
  std::mt19937 rng(4);
  std::vector<uint8_t> rows(kInterleaveRows * row_bytes), group(rows.size()), back(rows.size());
  for (uint8_t& b : rows) b = static_cast<uint8_t>(rng());
  InterleaveGroup(type, rows.data(), row_bytes, group.data());
  for (int64_t i = 0; i < nb; ++i) {
    for (int r = 0; r < kInterleaveRows; ++r) {
      where(group.data(), i, r, rows.data() + r * row_bytes + i * block_bytes);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  DeinterleaveGroup(type, group.data(), row_bytes, back.data());
  EXPECT_EQ(back, rows);
}

// Q4KRows8, Q5KRows8, Q6KRows8, Q80Rows8, Q40Rows8, MXFP4Rows8, Q41Rows8,
// Q50Rows8, Q51Rows8 and IQ4NLRows8 byte for byte, and the way back.
TEST(WeightLayoutTest, InterleaveGroupPutsEveryByteWhereTheLayoutSaysAndBack) {
  // BlockQ4_K: d (2 bytes), dmin (2), scales (12), qs (128).
  CheckInterleaveBytes(
      TensorType::kQ4_K, 144, [](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
        const Q4KRows8& b = reinterpret_cast<const Q4KRows8*>(group)[i];
        ASSERT_EQ(std::memcmp(&b.d[r], src, 2), 0) << "block " << i << " row " << r;
        ASSERT_EQ(std::memcmp(&b.dmin[r], src + 2, 2), 0) << "block " << i << " row " << r;
        for (int k = 0; k < 12; ++k) ASSERT_EQ(b.scales[k][r], src[4 + k]);
        for (int q = 0; q < 128; ++q) {
          ASSERT_EQ(b.qs[q / 32][(q % 32) / 4][r][q % 4], src[16 + q])
              << "block " << i << " row " << r << " qs byte " << q;
        }
      });
  // BlockQ5_K: d, dmin, scales (12), qh (32), qs (128).
  CheckInterleaveBytes(
      TensorType::kQ5_K, 176, [](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
        const Q5KRows8& b = reinterpret_cast<const Q5KRows8*>(group)[i];
        ASSERT_EQ(std::memcmp(&b.d[r], src, 2), 0) << "block " << i << " row " << r;
        ASSERT_EQ(std::memcmp(&b.dmin[r], src + 2, 2), 0) << "block " << i << " row " << r;
        for (int k = 0; k < 12; ++k) ASSERT_EQ(b.scales[k][r], src[4 + k]);
        for (int h = 0; h < 32; ++h) {
          ASSERT_EQ(b.qh[h / 4][r][h % 4], src[16 + h])
              << "block " << i << " row " << r << " qh " << h;
        }
        for (int q = 0; q < 128; ++q) {
          ASSERT_EQ(b.qs[q / 32][(q % 32) / 4][r][q % 4], src[48 + q])
              << "block " << i << " row " << r << " qs byte " << q;
        }
      });
  // BlockQ6_K: ql (128), qh (64), scales (16), d. Element e = 128 n + 32 k + l
  // (l < 32): the low nibble of ql[64 n + l] (k = 0), of ql[64 n + 32 + l]
  // (k = 1), their high nibbles (k = 2, 3), bits 2 k, 2 k + 1 of qh[32 n + l]
  // above. Q6KRows8 repacks the codes: u_j in bits 0-5 of plane j, u_3's bit
  // pairs in bits 6-7 of the three planes.
  CheckInterleaveBytes(
      TensorType::kQ6_K, 210, [](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
        const Q6KRows8& b = reinterpret_cast<const Q6KRows8*>(group)[i];
        ASSERT_EQ(std::memcmp(&b.d[r], src + 208, 2), 0) << "block " << i << " row " << r;
        for (int s = 0; s < 16; ++s) {
          ASSERT_EQ(b.scales[s / 2][r][s % 2], static_cast<int8_t>(src[192 + s]))
              << "block " << i << " row " << r << " scale " << s;
        }
        auto code = [src](int e) {
          const int n = e / 128, k = e % 128 / 32, l = e % 32;
          const uint8_t ql = src[64 * n + 32 * (k % 2) + l];
          const int low = k < 2 ? ql & 0x0F : ql >> 4;
          return low | ((src[128 + 32 * n + l] >> (2 * k) & 3) << 4);
        };
        for (int n = 0; n < 2; ++n) {
          for (int l = 0; l < 32; ++l) {
            const int e = 128 * n + l;
            int u3 = 0;
            for (int j = 0; j < 3; ++j) {
              const uint8_t plane = b.q[n][l / 4][j][r][l % 4];
              ASSERT_EQ(plane & 0x3F, code(e + 32 * j))
                  << "block " << i << " row " << r << " element " << e + 32 * j;
              u3 |= (plane >> 6) << (2 * j);
            }
            ASSERT_EQ(u3, code(e + 96)) << "block " << i << " row " << r << " element " << e + 96;
          }
        }
      });
  // BlockQ8_0: d, qs (32).
  CheckInterleaveBytes(
      TensorType::kQ8_0, 34, [](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
        const Q80Rows8& b = reinterpret_cast<const Q80Rows8*>(group)[i];
        ASSERT_EQ(std::memcmp(&b.d[r], src, 2), 0) << "block " << i << " row " << r;
        ASSERT_EQ(std::memcmp(b.qs[r], src + 2, 32), 0) << "block " << i << " row " << r;
      });
  // BlockQ4_0: d, qs (16), codes as MXFP4's.
  CheckInterleaveBytes(
      TensorType::kQ4_0, 18, [](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
        const Q40Rows8& b = reinterpret_cast<const Q40Rows8*>(group)[i];
        ASSERT_EQ(std::memcmp(&b.d[r], src, 2), 0) << "block " << i << " row " << r;
        for (int j = 0; j < 32; ++j) {
          const int code = j < 16 ? src[2 + j] & 0x0F : src[2 + j - 16] >> 4;
          // Element j's byte: 4 k + b with j % 16 = 4 k + b, nibble by j / 16.
          const uint8_t byte = b.qs[(j % 16) / 4][r][j % 4];
          const int stored = j < 16 ? byte & 0x0F : byte >> 4;
          ASSERT_EQ(stored, code) << "block " << i << " row " << r << " element " << j;
        }
      });
  // BlockMXFP4: e, qs (16): element j's code is the low nibble of qs[j] for
  // j < 16, the high nibble of qs[j - 16] after.
  CheckInterleaveBytes(
      TensorType::kMXFP4, 17, [](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
        const MXFP4Rows8& b = reinterpret_cast<const MXFP4Rows8*>(group)[i];
        ASSERT_EQ(b.e[r], src[0]) << "block " << i << " row " << r;
        for (int j = 0; j < 32; ++j) {
          const int code = j < 16 ? src[1 + j] & 0x0F : src[1 + j - 16] >> 4;
          // Element j's byte: 4 k + b with j % 16 = 4 k + b, nibble by j / 16.
          const uint8_t byte = b.qs[(j % 16) / 4][r][j % 4];
          const int stored = j < 16 ? byte & 0x0F : byte >> 4;
          ASSERT_EQ(stored, code) << "block " << i << " row " << r << " element " << j;
        }
      });
  // BlockQ4_1: d, m, qs (16); BlockQ5_0: d, qh (4), qs; BlockQ5_1: d, m, qh, qs.
  // Element j's code: its nibble as above plus 16 where bit j of qh is set.
  auto code_of = [](const uint8_t* qs, const uint8_t* qh, int j) {
    const int nibble = j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
    return qh == nullptr ? nibble : nibble + 16 * ((qh[j / 8] >> (j % 8)) & 1);
  };
  auto stored_code = [](const uint8_t(&qs)[4][8][4], const uint8_t* qh, int r, int j) {
    const uint8_t byte = qs[(j % 16) / 4][r][j % 4];
    const int nibble = j < 16 ? byte & 0x0F : byte >> 4;
    return qh == nullptr ? nibble : nibble + 16 * ((qh[j / 8] >> (j % 8)) & 1);
  };
  CheckInterleaveBytes(TensorType::kQ4_1, 20,
                       [&](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
                         const Q41Rows8& b = reinterpret_cast<const Q41Rows8*>(group)[i];
                         ASSERT_EQ(std::memcmp(&b.d[r], src, 2), 0) << "block " << i;
                         ASSERT_EQ(std::memcmp(&b.m[r], src + 2, 2), 0) << "block " << i;
                         for (int j = 0; j < 32; ++j) {
                           ASSERT_EQ(stored_code(b.qs, nullptr, r, j), code_of(src + 4, nullptr, j))
                               << "block " << i << " row " << r << " element " << j;
                         }
                       });
  CheckInterleaveBytes(TensorType::kIQ4_NL, 18,
                       [&](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
                         const IQ4NLRows8& b = reinterpret_cast<const IQ4NLRows8*>(group)[i];
                         ASSERT_EQ(std::memcmp(&b.d[r], src, 2), 0) << "block " << i;
                         for (int j = 0; j < 32; ++j) {
                           ASSERT_EQ(stored_code(b.qs, nullptr, r, j), code_of(src + 2, nullptr, j))
                               << "block " << i << " row " << r << " element " << j;
                         }
                       });
  CheckInterleaveBytes(TensorType::kQ5_0, 22,
                       [&](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
                         const Q50Rows8& b = reinterpret_cast<const Q50Rows8*>(group)[i];
                         ASSERT_EQ(std::memcmp(&b.d[r], src, 2), 0) << "block " << i;
                         for (int j = 0; j < 32; ++j) {
                           ASSERT_EQ(stored_code(b.qs, b.qh[r], r, j), code_of(src + 6, src + 2, j))
                               << "block " << i << " row " << r << " element " << j;
                         }
                       });
  CheckInterleaveBytes(TensorType::kQ5_1, 24,
                       [&](const uint8_t* group, int64_t i, int r, const uint8_t* src) {
                         const Q51Rows8& b = reinterpret_cast<const Q51Rows8*>(group)[i];
                         ASSERT_EQ(std::memcmp(&b.d[r], src, 2), 0) << "block " << i;
                         ASSERT_EQ(std::memcmp(&b.m[r], src + 2, 2), 0) << "block " << i;
                         for (int j = 0; j < 32; ++j) {
                           ASSERT_EQ(stored_code(b.qs, b.qh[r], r, j), code_of(src + 8, src + 4, j))
                               << "block " << i << " row " << r << " element " << j;
                         }
                       });
}

// rows x cols of `type` from random bytes (every code), then fix_block(block
// bytes, block index) setting what must stay finite.
template <typename ScaleFix>
Matrix RandomRows(TensorType type, int64_t rows, int64_t cols, uint32_t seed, ScaleFix fix_block) {
  std::mt19937 rng(seed);
  Matrix m = EmptyMatrix(type, rows, cols);
  for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(rng());
  const TensorTypeTraits& traits = GetTraits(type);
  for (int64_t blk = 0; blk < rows * cols / traits.block_size; ++blk) {
    fix_block(&m.bytes[blk * traits.type_size], blk);
  }
  m.w.data = m.bytes.data();
  return m;
}

// m through its interleaved copy (the tile's every pass: 1-5 tokens, and
// each of the 5 tokens alone, as a decode step runs it, the extreme ones
// too) against MatMulReference on GGUF order: bitwise the same.
void ExpectInterleavedEqualsReference(const Matrix& m) {
  std::vector<uint8_t> storage;
  const std::vector<WeightMatrix> layouts = Layouts(m, &storage);
  ASSERT_EQ(layouts.size(), 2u);
  const int64_t rows = m.w.rows;
  const int64_t cols = m.w.cols;
  const std::vector<float> x = MakeActivations(5, cols, 3);
  auto expect_equal = [&](int64_t first, int64_t n_tokens) {
    std::vector<float> ref(n_tokens * rows), got(n_tokens * rows, -4.0f);
    const float* xs = x.data() + first * cols;
    MatMulReference(m.w, xs, n_tokens, ref.data(), rows, NumericPath::kFast);
    MatMulScratch scratch;
    MatMul(layouts[1], xs, n_tokens, got.data(), rows, NumericPath::kFast, nullptr, &scratch);
    for (int64_t i = 0; i < n_tokens * rows; ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &ref[i], sizeof(float)), 0)
          << TypeName(m.w.type) << " " << ActiveKernelSetName() << " n_tokens=" << n_tokens
          << " t=" << first + i / rows << " r=" << i % rows << ": " << got[i] << " vs " << ref[i];
    }
  };
  for (int64_t n_tokens = 1; n_tokens <= 5; ++n_tokens) expect_equal(0, n_tokens);
  for (int64_t t = 1; t < 5; ++t) expect_equal(t, 1);
}

// Q4_0 rows of random bytes: any code, any finite fp16 scale (subnormals too);
// every fourth block all codes 15, whose sums against MakeActivations' +1
// token are the largest the tile's 16-bit partial sums take.
TEST_P(GemmTest, InterleavedQ4_0HandlesEveryScaleAndCode) {
  ExpectInterleavedEqualsReference(
      RandomRows(TensorType::kQ4_0, 24, 8 * 32, 13, [](uint8_t* block, int64_t i) {
        // The fp16's high byte: exponent field below 31, any sign and mantissa.
        block[1] = static_cast<uint8_t>((block[1] & 0x83) | ((i % 31) << 2));
        if (i % 4 == 1) std::memset(block + 2, 0xFF, 16);  // every code 15 (value 7)
      }));
}

// Q6_K rows of random bytes: every code, every group scale (-128 too, with
// the largest codes and activations), any finite fp16 scale.
TEST_P(GemmTest, InterleavedQ6_KHandlesEveryScaleAndCode) {
  ExpectInterleavedEqualsReference(
      RandomRows(TensorType::kQ6_K, 24, 3 * 256, 14, [](uint8_t* block, int64_t i) {
        block[209] = static_cast<uint8_t>((block[209] & 0x83) | ((i % 31) << 2));  // d's high byte
        if (i % 4 == 1) {
          std::memset(block, 0xFF, 192);  // every code 63
          block[192 + i % 16] = 0x80;     // one group scale -128
        }
      }));
}

// Q4_K or Q5_K rows of random bytes: every code (and 5th bit), every 6-bit
// scale and min, any finite fp16 d and dmin; every fourth block all codes at
// their largest (15, 31; `quant_bytes` 0xFF after the scales) with every
// scale and min 63, whose sums against the +1 token (codes -128) are the
// largest the AVX-512 tile's 16-bit halves take (Q4_K 16 * 15 * 128 =
// 30720, Q5_K 8 * 31 * 128 = 31744).
void ExpectInterleavedKQuantWithMins(TensorType type, uint64_t quant_bytes, uint32_t seed) {
  ExpectInterleavedEqualsReference(
      RandomRows(type, 24, 3 * 256, seed, [quant_bytes](uint8_t* block, int64_t i) {
        block[1] = static_cast<uint8_t>((block[1] & 0x83) | ((i % 31) << 2));      // d
        block[3] = static_cast<uint8_t>((block[3] & 0x83) | ((i * 7 % 31) << 2));  // dmin
        if (i % 4 == 1) {
          std::memset(block + 4, 0xFF, 12);  // every scale and min 63
          std::memset(block + 16, 0xFF, quant_bytes);
        }
      }));
}

TEST_P(GemmTest, InterleavedQ4_KHandlesEveryScaleAndCode) {
  ExpectInterleavedKQuantWithMins(TensorType::kQ4_K, 128, 16);  // qs
}

TEST_P(GemmTest, InterleavedQ5_KHandlesEveryScaleAndCode) {
  ExpectInterleavedKQuantWithMins(TensorType::kQ5_K, 32 + 128, 17);  // qh, qs
}

// MXFP4 rows of random bytes: every code and exponents from 0 (a subnormal
// scale, 2^-128) up to 191 (larger ones overflow to inf with the ±1
// activations, where NaN bits need not agree); every fourth block all codes
// +6, the largest 16-bit partial sums (as for Q4_0 above).
TEST_P(GemmTest, InterleavedMxfp4HandlesEveryExponentAndCode) {
  ExpectInterleavedEqualsReference(
      RandomRows(TensorType::kMXFP4, 24, 8 * 32, 12, [](uint8_t* block, int64_t i) {
        block[0] = static_cast<uint8_t>(i % 192);
        if (i % 4 == 1) std::memset(block + 1, 0x77, 16);  // every code 7 (+6)
      }));
}

// Q4_1, Q5_0, Q5_1 and IQ4_NL rows of random bytes: every code, any finite
// fp16 scale and min; every fourth block all codes at their largest (15, 31;
// IQ4_NL's code 0, -127), the largest 16-bit partial sums against the +1
// token.
TEST_P(GemmTest, InterleavedQ4_1Q5_0Q5_1IQ4_NLHandleEveryScaleAndCode) {
  ExpectInterleavedEqualsReference(
      RandomRows(TensorType::kQ4_1, 24, 8 * 32, 15, [](uint8_t* block, int64_t i) {
        block[1] = static_cast<uint8_t>((block[1] & 0x83) | ((i % 31) << 2));  // d
        block[3] = static_cast<uint8_t>((block[3] & 0x83) | ((i % 29) << 2));  // m
        if (i % 4 == 1) std::memset(block + 4, 0xFF, 16);
      }));
  ExpectInterleavedEqualsReference(
      RandomRows(TensorType::kQ5_0, 24, 8 * 32, 16, [](uint8_t* block, int64_t i) {
        block[1] = static_cast<uint8_t>((block[1] & 0x83) | ((i % 31) << 2));
        if (i % 4 == 1) std::memset(block + 2, 0xFF, 20);  // qh and qs
      }));
  ExpectInterleavedEqualsReference(
      RandomRows(TensorType::kQ5_1, 24, 8 * 32, 17, [](uint8_t* block, int64_t i) {
        block[1] = static_cast<uint8_t>((block[1] & 0x83) | ((i % 31) << 2));
        block[3] = static_cast<uint8_t>((block[3] & 0x83) | ((i % 29) << 2));
        if (i % 4 == 1) std::memset(block + 4, 0xFF, 20);
      }));
  ExpectInterleavedEqualsReference(
      RandomRows(TensorType::kIQ4_NL, 24, 8 * 32, 18, [](uint8_t* block, int64_t i) {
        block[1] = static_cast<uint8_t>((block[1] & 0x83) | ((i % 31) << 2));
        if (i % 4 == 1) std::memset(block + 2, 0x00, 16);
      }));
}

INSTANTIATE_TEST_SUITE_P(KernelSets, GemmTest, ::testing::ValuesIn(ops::kEveryKernelSet),
                         testing::KernelSetParamName);

}  // namespace
}  // namespace colibri::ops
