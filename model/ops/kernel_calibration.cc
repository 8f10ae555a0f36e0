#include "model/ops/kernel_calibration.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/cache_dir.h"
#include "common/cpu_features.h"
#include "common/status_macros.h"
#include "model/ops/activation_quant.h"
#include "model/ops/matmul.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"
#include "model/ops/weight_layout.h"

namespace colibri::ops::internal {
namespace {

// ConfigureKernelChoice's cache directory, read by the first
// CalibratedKernels, which sets `started`.
struct ChoiceState {
  absl::Mutex mu;
  std::string cache_dir ABSL_GUARDED_BY(mu);
  bool started ABSL_GUARDED_BY(mu) = false;
};

ChoiceState& Choice() {
  static ChoiceState* const state = new ChoiceState();
  return *state;
}

// 32 rows of 2048 columns: 36-68 KiB of weights, in L2 on any x86 core, so
// the timing compares the kernels' arithmetic, not the memory.
constexpr int64_t kRows = 32;
constexpr int64_t kCols = 2048;
constexpr int kCallsPerSample = 8;
constexpr int kSamples = 7;

const TensorType kCalibrationTypes[] = {TensorType::kQ4_K, TensorType::kQ6_K, TensorType::kQ8_0};

struct Tile {
  TensorType type;
  std::vector<uint8_t> weights;
  // The same rows in the interleaved layout, for the sets with tiles for it
  // (MatMul runs those on weights kept in RAM); empty for the other types.
  std::vector<uint8_t> interleaved;
  uint64_t row_bytes;
  ActivationLayout layout;
  std::vector<uint8_t> act_storage;
  const uint8_t* act;
};

bool MakeTile(TensorType type, Tile* tile) {
  tile->type = type;
  tile->row_bytes = RowBytesUnchecked(type, kCols);
  tile->weights.resize(kRows * tile->row_bytes);
  std::vector<float> row(kCols);
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / (1 << 23);
  };
  for (int64_t r = 0; r < kRows; ++r) {
    for (float& v : row) v = next();
    if (!QuantizeRow(type, row.data(), tile->weights.data() + r * tile->row_bytes, kCols).ok()) {
      return false;
    }
  }
  if (HasInterleavedLayout(type)) {
    tile->interleaved.resize(tile->weights.size());
    for (int64_t r = 0; r < kRows; r += kInterleaveRows) {
      InterleaveGroup(type, tile->weights.data() + r * tile->row_bytes, tile->row_bytes,
                      tile->interleaved.data() + r * tile->row_bytes);
    }
  }
  tile->layout = MakeActivationLayout(ActivationFormatFor(type), kCols);
  tile->act_storage.resize(tile->layout.row_bytes + 64);
  const auto p = reinterpret_cast<uintptr_t>(tile->act_storage.data());
  uint8_t* act = tile->act_storage.data() + ((64 - p % 64) % 64);
  for (float& v : row) v = next();
  QuantizeActivationRow(tile->layout, row.data(), act);
  tile->act = act;
  return true;
}

// Best time of kSamples samples, in nanoseconds, of the tile the set runs on
// resident weights: the interleaved one where it has one.
double TimeTile(const KernelSet& set, const Tile& tile) {
  const bool interleaved =
      !tile.interleaved.empty() && set.interleaved_tile[Slot(tile.type)] != nullptr;
  const QuantTileFn fn =
      interleaved ? set.interleaved_tile[Slot(tile.type)] : set.quant_tile[Slot(tile.type)];
  const uint8_t* weights = interleaved ? tile.interleaved.data() : tile.weights.data();
  if (fn == nullptr) return -1;
  float y[kRows];
  double best = 1e30;
  for (int s = 0; s < kSamples; ++s) {
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < kCallsPerSample; ++c) {
      fn(weights, tile.row_bytes, kRows, tile.act, tile.layout, 1, y, kRows);
    }
    const auto end = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(end - start).count());
  }
  return best;
}

const KernelSet* Measure(const std::vector<const KernelSet*>& candidates) {
  std::vector<double> score(candidates.size(), 0.0);
  for (TensorType type : kCalibrationTypes) {
    Tile tile;
    if (!MakeTile(type, &tile)) continue;
    // Two rounds, interleaving the sets, so that a change of clock speed
    // during the measurement hits all of them.
    std::vector<double> best(candidates.size(), 1e30);
    for (int round = 0; round < 2; ++round) {
      for (size_t i = 0; i < candidates.size(); ++i) {
        const double t = TimeTile(*candidates[i], tile);
        if (t > 0) best[i] = std::min(best[i], t);
      }
    }
    const double fastest = *std::min_element(best.begin(), best.end());
    for (size_t i = 0; i < candidates.size(); ++i) score[i] += best[i] / fastest;
  }
  // Ties go to the later (more featured) set.
  size_t pick = candidates.size() - 1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (score[i] < score[pick]) pick = i;
  }
  return candidates[pick];
}

}  // namespace

std::vector<const KernelSet*> RunnableKernelSets() {
  std::vector<const KernelSet*> sets = {&PortableKernels()};
  if (const KernelSet* avx2 = Avx2Kernels()) sets.push_back(avx2);
  if (const KernelSet* avx512 = Avx512Kernels()) sets.push_back(avx512);
  if (const KernelSet* neon = NeonKernels()) sets.push_back(neon);
  if (const KernelSet* dotprod = NeonDotprodKernels()) sets.push_back(dotprod);
  return sets;
}

std::string CpuModelFromCpuinfo(std::istream& cpuinfo) {
  // The value of a "key : value" line, kept to [A-Za-z0-9.-] with one '_' for
  // each run of anything else.
  auto value_of = [](const std::string& line) {
    const size_t colon = line.find(':');
    std::string name;
    if (colon == std::string::npos) return name;
    bool gap = false;
    for (char c : line.substr(colon + 1)) {
      const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                        (c >= '0' && c <= '9') || c == '.' || c == '-';
      if (keep) {
        if (gap && !name.empty()) name += '_';
        name += c;
        gap = false;
      } else {
        gap = true;
      }
    }
    return name.substr(0, 100);
  };
  std::string implementer, part, line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::string name = value_of(line);
      if (!name.empty()) return name;
    } else if (line.rfind("CPU implementer", 0) == 0 && implementer.empty()) {
      implementer = value_of(line);
    } else if (line.rfind("CPU part", 0) == 0 && part.empty()) {
      part = value_of(line);
    }
  }
  if (!implementer.empty() && !part.empty()) return "arm-" + implementer + "-" + part;
  return "unknown-cpu";
}

std::string CpuModelForCache() {
  std::ifstream in("/proc/cpuinfo");
  return CpuModelFromCpuinfo(in);
}

Calibration CalibrateKernels(const std::vector<const KernelSet*>& candidates,
                             const std::string& cache_dir, const std::string& cpu_model) {
  Calibration result;
  // The version in the name changes whenever the timed tiles change, so that
  // a choice cached by an older build is measured again.
  if (!cache_dir.empty()) result.cache_path = cache_dir + "/kernels-v5-" + cpu_model + ".txt";
  if (!result.cache_path.empty()) {
    std::ifstream in(result.cache_path);
    std::string name;
    if (in >> name) {
      for (const KernelSet* set : candidates) {
        if (name == set->name) {
          result.set = set;
          result.from_cache = true;
          return result;
        }
      }
    }
  }
  result.set = candidates.size() == 1 ? candidates[0] : Measure(candidates);
  if (!result.cache_path.empty() && MakeCacheDirs(cache_dir)) {
    // A failure only costs the next process the measurement.
    WriteCacheFile(result.cache_path, std::string(result.set->name) + "\n").IgnoreError();
  }
  return result;
}

const KernelSet& CalibratedKernels() {
  static const KernelSet* const chosen = [] {
    std::string cache_dir;
    {
      ChoiceState& state = Choice();
      absl::MutexLock lock(&state.mu);
      state.started = true;
      cache_dir = state.cache_dir;
    }
    const std::vector<const KernelSet*> sets = RunnableKernelSets();
    if (GetCpuCap() != CpuCap::kNone || sets.size() <= 1) return &DefaultKernels();
    // The portable set is only a candidate where no SIMD set runs.
    const std::vector<const KernelSet*> simd(sets.begin() + 1, sets.end());
    return CalibrateKernels(simd, cache_dir, CpuModelForCache()).set;
  }();
  return *chosen;
}

}  // namespace colibri::ops::internal

namespace colibri::ops {

absl::Status ConfigureKernelChoice(const KernelChoiceOptions& options) {
  internal::ChoiceState& state = internal::Choice();
  absl::MutexLock lock(&state.mu);
  if (state.started) {
    return absl::FailedPreconditionError(
        "kernel choice configured after the first MatMul (configure it in main, before any "
        "kernel runs)");
  }
  COLIBRI_RETURN_IF_ERROR(SetCpuCap(options.cpu_cap));
  state.cache_dir = options.cache_dir;
  return absl::OkStatus();
}

}  // namespace colibri::ops
