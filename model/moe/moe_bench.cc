// colibri_moe_bench: decode throughput of one MoE layer's routed experts.
//
//   colibri_moe_bench [--threads=N] [--type=Q4_K] [--down_type=Q4_K]
//                     [--embd=2048] [--ff=768] [--experts=128] [--k=8]
//                     [--tokens=1] [--seconds=2] [--reps=3] [--layout=auto|rows]
//
// Runs ExpertGroupRunner (what LocalExpertBackend and an expert node run per
// layer) on `tokens` tokens routed to k random experts each, out of `experts`
// experts whose weights together exceed the last-level cache, and prints the
// weight bytes of the experts used per second next to one large MatMul of
// the same type (the kernels' own streaming rate). The gap between the two is
// what the expert path loses outside the kernels: parts too short for the
// prefetchers, hand-offs between jobs, threads waiting for each other.
// Defaults: the Qwen3-30B-A3B layer shape. --reps: best of N timed runs.
// --layout=auto keeps the matrices in the layout the coordinator and the
// nodes hold resident experts in (the interleaved one where the kernel set
// prefers it, ops::PrefersInterleaved); rows keeps GGUF order.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/huge_pages.h"
#include "common/process_knobs.h"
#include "common/thread_pool.h"
#include "model/moe/local_expert_backend.h"
#include "model/ops/matmul.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"

namespace colibri::moe {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Options {
  int threads = 0;
  std::optional<int> spin_us;  // COLIBRI_SPIN_US
  ops::TensorType type = ops::TensorType::kQ4_K;
  ops::TensorType down_type = ops::TensorType::kQ4_K;
  int64_t embd = 2048;
  int64_t ff = 768;
  int experts = 128;
  int k = 8;
  int64_t tokens = 1;
  double seconds = 2.0;
  int reps = 3;
  bool interleave = true;  // --layout=auto
};

// `count` matrices of rows x cols in one allocation, every one quantized from
// its own random rows: copies of one matrix time faster than real experts
// (identical pages behave as cached, perhaps merged below a VM;
// docs/benchmarks.md). The bytes are on huge pages, as the
// coordinator and the nodes keep weights.
struct MatrixSet {
  uint8_t* bytes = nullptr;
  ops::WeightMatrix shape;
  const uint8_t* at(int i) const { return bytes + i * shape.rows * shape.row_bytes; }
};

MatrixSet MakeMatrices(ops::TensorType type, int64_t rows, int64_t cols, int count, bool interleave,
                       std::mt19937* rng) {
  MatrixSet set;
  set.shape.type = type;
  set.shape.rows = rows;
  set.shape.cols = cols;
  set.shape.row_bytes = ops::RowBytesUnchecked(type, cols);
  set.bytes = MapHugePages(rows * count * set.shape.row_bytes);
  if (set.bytes == nullptr) {
    std::perror("mmap");
    std::exit(2);
  }
  // Uniform values from a cheap generator: the timing does not depend on them.
  std::vector<float> row(cols);
  uint32_t state = (*rng)();
  for (int64_t r = 0; r < rows * count; ++r) {
    for (float& v : row) {
      state = state * 1664525u + 1013904223u;
      v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.04f;
    }
    const absl::Status s =
        ops::QuantizeRow(type, row.data(), set.bytes + r * set.shape.row_bytes, cols);
    if (!s.ok()) {
      std::fprintf(stderr, "cannot make %s weights: %s\n", ops::TypeName(type),
                   s.ToString().c_str());
      std::exit(2);
    }
  }
  if (interleave && ops::PrefersInterleaved(set.shape)) {
    const uint64_t matrix_bytes = rows * set.shape.row_bytes;
    std::vector<uint8_t> copy(matrix_bytes);
    for (int i = 0; i < count; ++i) {
      uint8_t* at = set.bytes + i * matrix_bytes;
      std::memcpy(copy.data(), at, matrix_bytes);
      ops::WeightMatrix m = set.shape;
      m.data = copy.data();
      ops::InterleaveMatrix(m, at);
    }
    set.shape.layout = ops::WeightLayout::kInterleaved8;
  }
  return set;
}

void Run(const Options& opt) {
  ThreadPool pool(opt.threads, ThreadPool::WithSpinOverride({}, opt.spin_us));
  std::mt19937 rng(1);
  const MatrixSet gate =
      MakeMatrices(opt.type, opt.ff, opt.embd, opt.experts, opt.interleave, &rng);
  const MatrixSet up = MakeMatrices(opt.type, opt.ff, opt.embd, opt.experts, opt.interleave, &rng);
  const MatrixSet down =
      MakeMatrices(opt.down_type, opt.embd, opt.ff, opt.experts, opt.interleave, &rng);
  std::vector<std::vector<ExpertWeights>> layer(1, std::vector<ExpertWeights>(opt.experts));
  for (int e = 0; e < opt.experts; ++e) {
    ExpertWeights& w = layer[0][e];
    w.gate = gate.shape;
    w.gate.data = gate.at(e);
    w.up = up.shape;
    w.up.data = up.at(e);
    w.down = down.shape;
    w.down.data = down.at(e);
  }
  const uint64_t expert_bytes = layer[0][0].bytes();

  ExpertGroupRunner runner(opt.experts, ops::NumericPath::kFast, &pool);
  runner.Reserve(opt.tokens, opt.k, layer[0][0]);
  auto lookup = [&](int, int e) -> absl::StatusOr<ExpertWeights> { return layer[0][e]; };

  std::normal_distribution<float> xdist(0.0f, 1.0f);
  std::vector<float> x(opt.tokens * opt.embd);
  for (float& v : x) v = xdist(rng);
  std::vector<float> out(opt.tokens * opt.k * opt.embd);
  std::vector<int32_t> routes(opt.tokens * opt.k);
  std::vector<int> pick(opt.experts);
  for (int e = 0; e < opt.experts; ++e) pick[e] = e;
  std::vector<char> used(opt.experts);

  ExpertBatch batch;
  batch.n_tokens = opt.tokens;
  batch.n_embd = opt.embd;
  batch.k = opt.k;
  batch.x = x.data();
  batch.experts = routes.data();

  // Each call routes every token to k distinct random experts; the bytes
  // counted are those of the distinct experts the call used.
  auto one_call = [&]() -> uint64_t {
    std::fill(used.begin(), used.end(), 0);
    for (int64_t t = 0; t < opt.tokens; ++t) {
      for (int r = 0; r < opt.k; ++r) {
        std::swap(pick[r], pick[r + rng() % (opt.experts - r)]);
        routes[t * opt.k + r] = pick[r];
        used[pick[r]] = 1;
      }
    }
    const absl::Status s = runner.Run(batch, lookup, nullptr, out.data());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
    return expert_bytes * static_cast<uint64_t>(std::count(used.begin(), used.end(), 1));
  };
  for (int i = 0; i < 20; ++i) one_call();

  double best_gbs = 0, best_us = 0;
  for (int rep = 0; rep < std::max(1, opt.reps); ++rep) {
    uint64_t bytes = 0;
    int64_t calls = 0;
    const Clock::time_point t0 = Clock::now();
    double elapsed = 0;
    do {
      bytes += one_call();
      ++calls;
      elapsed = Seconds(t0, Clock::now());
    } while (elapsed < opt.seconds / std::max(1, opt.reps));
    const double gbs = bytes / elapsed / 1e9;
    if (gbs > best_gbs) {
      best_gbs = gbs;
      best_us = elapsed / calls * 1e6;
    }
  }

  // The kernels' streaming rate: one matrix as large as all experts' gates,
  // one token, through MatMul.
  ops::WeightMatrix big = gate.shape;
  big.rows = gate.shape.rows * opt.experts;
  big.data = gate.bytes;
  std::vector<float> y(big.rows);
  ops::MatMulScratch scratch;
  double best_big = 0;
  for (int rep = 0; rep < std::max(1, opt.reps); ++rep) {
    const Clock::time_point t0 = Clock::now();
    const int calls = 5;
    for (int i = 0; i < calls; ++i) {
      ops::MatMul(big, x.data(), 1, y.data(), big.rows, ops::NumericPath::kFast, &pool, &scratch);
    }
    best_big = std::max(best_big, calls * big.rows * big.row_bytes / Seconds(t0, Clock::now()) / 1e9);
  }

  std::printf("cpu kernels: %s; threads: %d\n", ops::ActiveKernelSetName(), pool.num_threads());
  auto layout = [](const MatrixSet& m) {
    return m.shape.layout == ops::WeightLayout::kInterleaved8 ? " interleaved" : "";
  };
  std::printf(
      "experts: %d x (gate %s%s %lldx%lld, up, down %s%s), %.2f MiB each, top-%d, %lld tokens\n",
      opt.experts, ops::TypeName(opt.type), layout(gate), static_cast<long long>(opt.ff),
      static_cast<long long>(opt.embd), ops::TypeName(opt.down_type), layout(down),
      expert_bytes / 1048576.0, opt.k, static_cast<long long>(opt.tokens));
  std::printf("expert group: %.2f GB/s of expert weights, %.1f us per layer (best of %d)\n",
              best_gbs, best_us, opt.reps);
  std::printf("one %s matrix of %lld rows (the limit the kernels stream at): %.2f GB/s\n",
              ops::TypeName(opt.type), static_cast<long long>(big.rows), best_big);
}

}  // namespace
}  // namespace colibri::moe

int main(int argc, char** argv) {
  colibri::moe::Options opt;
  std::string type = "Q4_K", down_type = "Q4_K";
  CLI::App app{"Decode GB/s of one MoE layer's routed experts (see model/moe/moe_bench.cc)"};
  app.add_option("--threads", opt.threads, "threads (0: the physical cores)");
  app.add_option("--type", type, "gate and up type")->capture_default_str();
  app.add_option("--down_type", down_type, "down type")->capture_default_str();
  app.add_option("--embd", opt.embd, "hidden size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--ff", opt.ff, "expert width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--experts", opt.experts, "experts in the layer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--k", opt.k, "experts per token")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--tokens", opt.tokens, "tokens per call")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", opt.seconds, "time measured")->capture_default_str();
  app.add_option("--reps", opt.reps, "timed runs; the best is printed")->capture_default_str();
  std::string layout = "auto";
  app.add_option("--layout", layout, "auto: as resident experts are held; rows: GGUF order")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "rows"}));
  CLI11_PARSE(app, argc, argv);
  opt.interleave = layout == "auto";
  for (auto [name, out] : {std::pair{&type, &opt.type}, std::pair{&down_type, &opt.down_type}}) {
    const absl::StatusOr<colibri::ops::TensorType> parsed = colibri::ops::ParseTensorType(*name);
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
      return 2;
    }
    *out = *parsed;
  }
  if (opt.k > opt.experts) {
    std::fprintf(stderr, "--k must not exceed --experts\n");
    return 2;
  }
  const absl::StatusOr<colibri::ProcessKnobs> knobs = colibri::ReadProcessKnobs();
  absl::Status status = knobs.status();
  if (status.ok()) status = colibri::ops::ConfigureKernelChoice({knobs->cpu_cap, knobs->cache_dir});
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    return 2;
  }
  opt.spin_us = knobs->spin_us;
  colibri::moe::Run(opt);
  return 0;
}
