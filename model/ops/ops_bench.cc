// colibri_ops_bench: memory bandwidth limits and MatMul throughput per type.
//
//   colibri_ops_bench [--threads=N] [--kernels=auto|portable|avx2|avx512|neon|neon-dotprod|all]
//                     [--types=Q4_K,Q8_0,...] [--rows=4096] [--cols=4096]
//                     [--prefill_tokens=128] [--no_prefill] [--fast_only] [--reps=1]
//                     [--in_cache] [--layout=rows|interleaved|both] [--memory_mib=1024]
//
// --types= (empty) runs the memory probe alone.
//
// Prints, for the chosen thread count:
//  - STREAM-like read (over huge pages, as weights are kept) and triad
//    bandwidth over 1 GiB (the "limit" for decode; --memory_mib=N reads N MiB
//    instead, e.g. a small probe where only its output format matters);
//  - decode (n_tokens = 1) GB/s of weights streamed, per type and path, cycling
//    through enough copies of the matrix (each on huge pages) to miss the
//    last-level cache;
//  - prefill GFLOP/s (2 * rows * cols * n_tokens per call) per type and path.
// --kernels=all runs every kernel set this machine supports, one line per set
// and type, the sets of a type one after the other on the same weights so that
// their figures can be compared. --fast_only skips the kExact path. --reps=N
// times decode N times and prints the best (the least disturbed by other load);
// prefill prints the best of its calls.
// --in_cache keeps a single copy of the matrix, so that a small one (e.g.
// --rows=256) stays in cache and decode measures the kernels, not the memory.
// --layout=interleaved runs the types that have one on their interleaved
// layout (model/ops/weight_layout.h; "<set>-il" in the kernel column), both
// runs GGUF order and then the interleaved layout on the same weights.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "common/cpu_features.h"
#include "common/huge_pages.h"
#include "common/process_knobs.h"
#include "common/thread_pool.h"
#include "model/ops/matmul.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"

namespace colibri::ops {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Options {
  int threads = 0;
  std::optional<int> spin_us;  // COLIBRI_SPIN_US
  std::string kernels = "auto";
  std::vector<std::string> types = {"F32",    "F16",    "BF16",   "Q8_0",  "Q4_0",    "Q4_1",
                                    "Q5_0",   "Q5_1",   "Q2_K",   "Q3_K",  "Q4_K",    "Q5_K",
                                    "Q6_K",   "MXFP4",  "IQ4_NL", "IQ4_XS", "IQ3_S",  "IQ3_XXS",
                                    "IQ2_S",  "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S"};
  int64_t rows = 4096;
  int64_t cols = 4096;
  int64_t prefill_tokens = 128;
  bool prefill = true;
  bool exact = true;
  int reps = 1;
  bool in_cache = false;
  bool rows_layout = true;
  bool interleaved_layout = false;
  int64_t memory_mib = 1024;
};

bool ParseFlag(const char* arg, const char* name, std::string* value) {
  const size_t len = std::strlen(name);
  if (std::strncmp(arg, name, len) != 0 || arg[len] != '=') return false;
  *value = arg + len + 1;
  return true;
}

// Best-of-reps bandwidth of a parallel read and a triad over `mib` MiB. The
// read runs over huge pages, as the coordinator and the nodes keep the
// weights a decode step streams (common/huge_pages.h): over 4 KiB pages the
// same loop reads less (docs/benchmarks.md), a limit that weights on huge
// pages can beat.
void MemoryProbe(ThreadPool* pool, int64_t mib) {
  const size_t bytes = static_cast<size_t>(mib) << 20;
  const size_t n = bytes / sizeof(uint64_t);
  uint64_t* const buf = reinterpret_cast<uint64_t*>(MapHugePages(bytes));
  if (buf == nullptr) {
    std::perror("memory probe: mmap");
    std::exit(2);
  }
  pool->ParallelFor(static_cast<int64_t>(n), 1 << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i);
  });
  double best_read = 0;
  volatile uint64_t sink = 0;  // keeps the reads
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<uint64_t> partial(pool->num_threads() * 8, 0);
    const auto t0 = Clock::now();
    pool->ParallelFor(pool->num_threads(), 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const size_t lo = n / pool->num_threads() * p;
        const size_t hi = p + 1 == pool->num_threads() ? n : n / pool->num_threads() * (p + 1);
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = lo; i + 4 <= hi; i += 4) {
          s0 += buf[i];
          s1 += buf[i + 1];
          s2 += buf[i + 2];
          s3 += buf[i + 3];
        }
        partial[p * 8] = s0 + s1 + s2 + s3;
      }
    });
    const auto t1 = Clock::now();
    for (uint64_t v : partial) sink = sink + v;
    best_read = std::max(best_read, bytes / Seconds(t0, t1) / 1e9);
  }
  munmap(buf, bytes);

  // Triad a = b + s * c over three arrays of a third of the buffer each.
  const size_t m = bytes / 3 / sizeof(float);
  std::vector<float> a(m), b(m, 1.0f), c(m, 2.0f);
  double best_triad = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    pool->ParallelFor(static_cast<int64_t>(m), 1 << 20, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
    });
    const auto t1 = Clock::now();
    best_triad = std::max(best_triad, 3.0 * m * sizeof(float) / Seconds(t0, t1) / 1e9);
  }
  std::printf("memory: read %.1f GB/s, triad %.1f GB/s (%lld MiB, %d threads)\n", best_read,
              best_triad, static_cast<long long>(mib), pool->num_threads());
}

// One copy of a matrix's bytes on huge pages, as the coordinator and the
// nodes hold weights (the probe above reads the same kind of memory).
class HugeCopy {
 public:
  HugeCopy(const uint8_t* bytes, size_t size) : size_(size), data_(MapHugePages(size)) {
    if (data_ == nullptr) {
      std::perror("weights: mmap");
      std::exit(2);
    }
    std::memcpy(data_, bytes, size);
  }
  HugeCopy(const HugeCopy& other) : HugeCopy(other.data_, other.size_) {}
  HugeCopy& operator=(const HugeCopy&) = delete;
  ~HugeCopy() { munmap(data_, size_); }
  uint8_t* data() const { return data_; }

 private:
  size_t size_;
  uint8_t* data_;
};

struct Weights {
  std::vector<HugeCopy> copies;
  WeightMatrix w;
  uint64_t bytes = 0;
};

// The same matrices in the interleaved layout; prints how fast one thread
// rewrote them (what loading a model and an expert node's RAM tier pay).
Weights Interleaved(const Weights& in) {
  Weights out = in;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < in.copies.size(); ++i) {
    WeightMatrix w = in.w;
    w.data = in.copies[i].data();
    out.w = InterleaveMatrix(w, out.copies[i].data());
  }
  const double seconds = Seconds(t0, Clock::now());
  std::printf("%-6s interleaving %.2f GB/s (1 thread, %zu MiB)\n", TypeName(in.w.type),
              in.bytes * in.copies.size() / seconds / 1e9, in.bytes * in.copies.size() >> 20);
  out.w.data = nullptr;
  return out;
}

Weights MakeWeights(TensorType type, int64_t rows, int64_t cols, bool in_cache) {
  Weights out;
  out.w.type = type;
  out.w.rows = rows;
  out.w.cols = cols;
  out.w.row_bytes = RowBytesUnchecked(type, cols);
  out.bytes = out.w.row_bytes * rows;
  std::vector<uint8_t> first(out.bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    uint8_t* dst = first.data() + r * out.w.row_bytes;
    const absl::Status s = QuantizeRow(type, row.data(), dst, cols);
    if (s.code() == absl::StatusCode::kUnimplemented) {
      // Decode-only types (the grid i-quants): random blocks with a small fp16
      // scale (IQ1_M keeps it in the top nibbles of its scale words at 48).
      const TensorTypeTraits& t = GetTraits(type);
      for (uint64_t i = 0; i < out.w.row_bytes; ++i) dst[i] = static_cast<uint8_t>(rng());
      const uint16_t d = Fp32ToFp16(0.002f);
      for (uint64_t off = 0; off < out.w.row_bytes; off += t.type_size) {
        if (type == TensorType::kIQ1_M) {
          for (int k = 0; k < 4; ++k) {
            uint8_t& b = dst[off + 48 + 2 * k + 1];
            b = static_cast<uint8_t>((b & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
          }
        } else {
          std::memcpy(dst + off, &d, sizeof(d));
        }
      }
    } else if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::abort();
    }
  }
  // Enough copies to exceed the last-level cache several times over.
  const uint64_t target = uint64_t{256} << 20;
  const size_t n_copies = in_cache ? 1 : std::max<size_t>(1, (target + out.bytes - 1) / out.bytes);
  out.copies.reserve(n_copies);
  for (size_t i = 0; i < n_copies; ++i) out.copies.emplace_back(first.data(), first.size());
  return out;
}

void BenchType(TensorType type, const Weights& weights, const Options& opt, ThreadPool* pool) {
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t max_tokens = std::max<int64_t>(1, opt.prefill_tokens);
  std::vector<float> x(max_tokens * opt.cols);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(max_tokens * opt.rows);
  MatMulScratch scratch;
  const std::string set = std::string(ActiveKernelSetName()) +
                          (weights.w.layout == WeightLayout::kRows ? "" : "-il");
  std::printf("%-5s %7.2f MiB %-11s", TypeName(type), weights.bytes / 1048576.0, set.c_str());
  for (NumericPath path : {NumericPath::kFast, NumericPath::kExact}) {
    if (path == NumericPath::kExact && !opt.exact) continue;
    // Decode: cycle through the copies so that every call reads from DRAM.
    WeightMatrix w = weights.w;
    const int calls = static_cast<int>(std::max<size_t>(20, 3 * weights.copies.size()));
    for (size_t i = 0; i < weights.copies.size(); ++i) {
      w.data = weights.copies[i].data();
      MatMul(w, x.data(), 1, y.data(), opt.rows, path, pool, &scratch);
    }
    double decode = 0;
    for (int rep = 0; rep < std::max(1, opt.reps); ++rep) {
      const auto t0 = Clock::now();
      for (int i = 0; i < calls; ++i) {
        w.data = weights.copies[i % weights.copies.size()].data();
        MatMul(w, x.data(), 1, y.data(), opt.rows, path, pool, &scratch);
      }
      const double t = Seconds(t0, Clock::now()) / calls;
      decode = rep == 0 ? t : std::min(decode, t);
    }
    std::printf(" | %s decode %6.2f GB/s %7.3f ms", path == NumericPath::kFast ? "fast" : "exact",
                weights.bytes / decode / 1e9, decode * 1e3);
    if (opt.prefill) {
      w.data = weights.copies[0].data();
      MatMul(w, x.data(), opt.prefill_tokens, y.data(), opt.rows, path, pool, &scratch);
      // The fastest of the calls (the least disturbed by other load, as for
      // decode with --reps), up to 20 calls or 1 s.
      int reps = 0;
      const auto p0 = Clock::now();
      double best = 0;
      do {
        const auto c0 = Clock::now();
        MatMul(w, x.data(), opt.prefill_tokens, y.data(), opt.rows, path, pool, &scratch);
        const double t = Seconds(c0, Clock::now());
        best = reps == 0 ? t : std::min(best, t);
        ++reps;
      } while (Seconds(p0, Clock::now()) < 1.0 && reps < 20);
      const double flops = 2.0 * opt.rows * opt.cols * opt.prefill_tokens;
      std::printf(" prefill %6.1f GFLOP/s", flops / best / 1e9);
    }
  }
  std::printf("\n");
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  Options opt;
  const absl::StatusOr<ProcessKnobs> knobs = ReadProcessKnobs();
  absl::Status status = knobs.status();
  if (status.ok()) status = ConfigureKernelChoice({knobs->cpu_cap, knobs->cache_dir});
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    return 2;
  }
  opt.spin_us = knobs->spin_us;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (ParseFlag(argv[i], "--threads", &v)) {
      opt.threads = std::atoi(v.c_str());
    } else if (ParseFlag(argv[i], "--kernels", &v)) {
      opt.kernels = v;
    } else if (ParseFlag(argv[i], "--types", &v)) {
      opt.types = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else if (ParseFlag(argv[i], "--rows", &v)) {
      opt.rows = std::atoll(v.c_str());
    } else if (ParseFlag(argv[i], "--cols", &v)) {
      opt.cols = std::atoll(v.c_str());
    } else if (ParseFlag(argv[i], "--prefill_tokens", &v)) {
      opt.prefill_tokens = std::atoll(v.c_str());
    } else if (std::strcmp(argv[i], "--no_prefill") == 0) {
      opt.prefill = false;
    } else if (ParseFlag(argv[i], "--reps", &v)) {
      opt.reps = std::atoi(v.c_str());
    } else if (std::strcmp(argv[i], "--in_cache") == 0) {
      opt.in_cache = true;
    } else if (ParseFlag(argv[i], "--layout", &v) &&
               (v == "rows" || v == "interleaved" || v == "both")) {
      opt.rows_layout = v != "interleaved";
      opt.interleaved_layout = v != "rows";
    } else if (ParseFlag(argv[i], "--memory_mib", &v) && std::atoll(v.c_str()) >= 1) {
      opt.memory_mib = std::atoll(v.c_str());
    } else if (std::strcmp(argv[i], "--fast_only") == 0) {
      opt.exact = false;
    } else {
      std::fprintf(stderr, "unknown flag %s (see the header of model/ops/ops_bench.cc)\n", argv[i]);
      return 2;
    }
  }
  std::vector<KernelSetChoice> choices;
  std::string names;
  if (opt.kernels == "all") {
    for (KernelSetChoice c : kEveryKernelSet) {
      if (!ForceKernelSetForTesting(c)) continue;
      choices.push_back(c);
      names += std::string(names.empty() ? "" : ",") + ActiveKernelSetName();
    }
  } else {
    const KernelSetChoice choice = opt.kernels == "portable"       ? KernelSetChoice::kPortable
                                   : opt.kernels == "avx2"         ? KernelSetChoice::kAvx2
                                   : opt.kernels == "avx512"       ? KernelSetChoice::kAvx512
                                   : opt.kernels == "neon"         ? KernelSetChoice::kNeon
                                   : opt.kernels == "neon-dotprod" ? KernelSetChoice::kNeonDotprod
                                                                   : KernelSetChoice::kAuto;
    if (!ForceKernelSetForTesting(choice)) {
      std::fprintf(stderr, "kernel set %s is not available on this machine\n",
                   opt.kernels.c_str());
      return 2;
    }
    choices.push_back(choice);
    names = ActiveKernelSetName();
  }
  ThreadPool pool(opt.threads, ThreadPool::WithSpinOverride({}, opt.spin_us));
  std::printf("cpu: %s; kernels: %s; threads: %d; matrix %lld x %lld; prefill %lld tokens\n",
              DescribeCpuFeatures(GetCpuFeatures()).c_str(), names.c_str(), pool.num_threads(),
              static_cast<long long>(opt.rows), static_cast<long long>(opt.cols),
              static_cast<long long>(opt.prefill_tokens));
  MemoryProbe(&pool, opt.memory_mib);
  for (const std::string& name : opt.types) {
    auto type = ParseTensorType(name);
    if (!type.ok() || !GetTraits(*type).supported) {
      std::fprintf(stderr, "skipping %s: not a supported type\n", name.c_str());
      continue;
    }
    const Weights weights = MakeWeights(*type, opt.rows, opt.cols, opt.in_cache);
    if (opt.rows_layout) {
      for (KernelSetChoice c : choices) {
        ForceKernelSetForTesting(c);
        BenchType(*type, weights, opt, &pool);
      }
    }
    if (opt.interleaved_layout && HasInterleavedLayout(*type) && opt.rows >= kInterleaveRows) {
      const Weights interleaved = Interleaved(weights);
      for (KernelSetChoice c : choices) {
        ForceKernelSetForTesting(c);
        BenchType(*type, interleaved, opt, &pool);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace colibri::ops

int main(int argc, char** argv) { return colibri::ops::Main(argc, argv); }
