// ExpertGroupRunner (all experts of a batch as two parallel jobs, or as one
// for a batch of a few tokens) against
// ExpertFfn called expert by expert on each route's token alone: bitwise equal
// on both paths, with biases and either activation, 1-3 threads and owned
// subsets.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "model/moe/local_expert_backend.h"
#include "model/ops/quantize.h"

namespace colibri::moe {
namespace {

struct Storage {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<float>> biases;
};

ops::WeightMatrix MakeMatrix(ops::TensorType type, int64_t rows, int64_t cols, std::mt19937* rng,
                             Storage* storage) {
  std::normal_distribution<float> dist(0.0f, 0.5f);
  ops::WeightMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = ops::RowBytesUnchecked(type, cols);
  std::vector<uint8_t> bytes(rows * m.row_bytes);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(*rng);
    EXPECT_TRUE(ops::QuantizeRow(type, row.data(), bytes.data() + r * m.row_bytes, cols).ok());
  }
  storage->bytes.push_back(std::move(bytes));
  m.data = storage->bytes.back().data();
  return m;
}

const float* MakeBias(int64_t n, std::mt19937* rng, Storage* storage) {
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> b(n);
  for (float& v : b) v = dist(*rng);
  storage->biases.push_back(std::move(b));
  return storage->biases.back().data();
}

struct Case {
  const char* name;
  ops::TensorType gate_up, down;
  bool biases;
  Activation activation;
};

TEST(ExpertGroupRunnerTest, EqualsExpertFfnPerRouteBitwise) {
  constexpr int kExperts = 6;
  constexpr int64_t kEmbd = 256, kFf = 512;
  const Case cases[] = {
      {"q4_k/q6_k silu", ops::TensorType::kQ4_K, ops::TensorType::kQ6_K, false, Activation::kSilu},
      {"q8_0 swiglu-oai biases", ops::TensorType::kQ8_0, ops::TensorType::kQ5_K, true,
       Activation::kSwigluOai},
      {"f16 silu", ops::TensorType::kF16, ops::TensorType::kF16, false, Activation::kSilu},
  };
  ThreadPool pool2(2), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool2, &pool3};
  for (const Case& c : cases) {
    std::mt19937 rng(99);
    Storage storage;
    storage.bytes.reserve(3 * kExperts);
    storage.biases.reserve(3 * kExperts);
    std::vector<ExpertWeights> experts(kExperts);
    for (ExpertWeights& w : experts) {
      w.gate = MakeMatrix(c.gate_up, kFf, kEmbd, &rng, &storage);
      w.up = MakeMatrix(c.gate_up, kFf, kEmbd, &rng, &storage);
      w.down = MakeMatrix(c.down, kEmbd, kFf, &rng, &storage);
      w.activation = c.activation;
      if (c.biases) {
        w.gate_bias = MakeBias(kFf, &rng, &storage);
        w.up_bias = MakeBias(kFf, &rng, &storage);
        w.down_bias = MakeBias(kEmbd, &rng, &storage);
      }
    }
    // 11 tokens, 3 experts each; expert 5 is never chosen, expert 0 often.
    // Batches of 3 and 1 tokens (the first rows) run each expert's products
    // whole in one job (RunProductsFused) when there are enough experts.
    for (const int64_t n_tokens : {int64_t{11}, int64_t{3}, int64_t{1}}) {
      const int k = 3;
      std::vector<int32_t> ids(n_tokens * k);
      for (int64_t t = 0; t < n_tokens; ++t) {
        ids[t * k] = 0;
        ids[t * k + 1] = 1 + static_cast<int32_t>(t % 4);
        ids[t * k + 2] = 1 + static_cast<int32_t>((t + 1 + t / 4) % 4);
        if (ids[t * k + 2] == ids[t * k + 1]) ids[t * k + 2] = 1 + (ids[t * k + 1] % 4);
      }
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<float> x(n_tokens * kEmbd);
      for (float& v : x) v = dist(rng);
      ExpertBatch batch;
      batch.layer = 0;
      batch.n_tokens = n_tokens;
      batch.n_embd = kEmbd;
      batch.k = k;
      batch.x = x.data();
      batch.experts = ids.data();
      auto lookup = [&](int layer, int e) -> absl::StatusOr<ExpertWeights> {
        if (layer != 0) return absl::NotFoundError("layer");
        return experts[e];
      };
      for (ops::NumericPath path : {ops::NumericPath::kFast, ops::NumericPath::kExact}) {
        // Each route's token alone through ExpertFfn.
        std::vector<float> want(n_tokens * k * kEmbd);
        ExpertFfnScratch scratch;
        for (int64_t i = 0; i < n_tokens * k; ++i) {
          ExpertFfn(experts[ids[i]], x.data() + (i / k) * kEmbd, 1, want.data() + i * kEmbd, path,
                    nullptr, &scratch);
        }
        for (ThreadPool* pool : pools) {
          for (bool odd_only : {false, true}) {
            ExpertGroupRunner runner(kExperts, path, pool);
            std::vector<float> got(n_tokens * k * kEmbd, -9.0f);
            auto owned = [](int e) { return e % 2 == 1; };
            ASSERT_TRUE(runner
                            .Run(batch, lookup,
                                 odd_only ? std::function<bool(int)>(owned) : nullptr, got.data())
                            .ok());
            for (int64_t i = 0; i < n_tokens * k; ++i) {
              const bool computed = !odd_only || owned(ids[i]);
              for (int64_t j = 0; j < kEmbd; ++j) {
                const float g = got[i * kEmbd + j];
                const float w = computed ? want[i * kEmbd + j] : -9.0f;
                ASSERT_EQ(std::memcmp(&g, &w, sizeof(float)), 0)
                    << c.name << (path == ops::NumericPath::kFast ? " fast" : " exact")
                    << " threads " << (pool != nullptr ? pool->num_threads() : 1)
                    << (odd_only ? " odd experts" : "") << " route " << i << " (expert " << ids[i]
                    << ") element " << j << ": " << g << " vs " << w << " (" << n_tokens
                    << " tokens)";
              }
            }
          }
        }
      }
    }
  }
}

TEST(ExpertGroupRunnerTest, LookupErrorsAndBadIdsAreReported) {
  std::mt19937 rng(1);
  Storage storage;
  ExpertWeights w;
  w.gate = MakeMatrix(ops::TensorType::kQ8_0, 64, 64, &rng, &storage);
  w.up = MakeMatrix(ops::TensorType::kQ8_0, 64, 64, &rng, &storage);
  w.down = MakeMatrix(ops::TensorType::kQ8_0, 32, 64, &rng, &storage);  // not n_embd wide
  std::vector<float> x(64, 1.0f), out(64);
  int32_t id = 1;
  ExpertBatch batch{0, 1, 64, 1, x.data(), &id, nullptr};
  ExpertGroupRunner runner(2, ops::NumericPath::kFast, nullptr);
  auto missing = [](int, int) -> absl::StatusOr<ExpertWeights> {
    return absl::NotFoundError("expert not here");
  };
  EXPECT_EQ(runner.Run(batch, missing, nullptr, out.data()).code(), absl::StatusCode::kNotFound);
  auto bad_shape = [&](int, int) -> absl::StatusOr<ExpertWeights> { return w; };
  EXPECT_EQ(runner.Run(batch, bad_shape, nullptr, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  id = 2;
  EXPECT_EQ(runner.Run(batch, bad_shape, nullptr, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri::moe
