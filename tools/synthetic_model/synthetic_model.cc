#include "tools/synthetic_model/synthetic_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "model/gguf/gguf_writer.h"
#include "model/ops/quantize.h"
#include "tools/synthetic_model/byte_level_bpe.h"
#include "tools/synthetic_model/training_corpus.h"

namespace colibri::synthetic {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a64(absl::string_view s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// The two helpers below are branch-free (selects on integer bits) so that the
// loop in FillNormals vectorizes.
inline float LogImpl(float x) {
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(t), t = (m-1)/(m+1),
  // |t| <= 0.172, whose odd series reaches float precision in five terms.
  const uint32_t bits = FloatToBits(x);
  const uint32_t mantissa = bits & 0x007FFFFFu;
  const uint32_t high = mantissa > 0x3504F3u ? 1u : 0u;  // 1.mantissa > sqrt(2)
  const float m = BitsToFloat(mantissa | (0x3F800000u - (high << 23)));
  const int e = static_cast<int>((bits >> 23) & 0xFF) - 127 + static_cast<int>(high);
  const float t = (m - 1.0f) / (m + 1.0f);
  const float t2 = t * t;
  const float series =
      t * (2.0f + t2 * (2.0f / 3 + t2 * (2.0f / 5 + t2 * (2.0f / 7 + t2 * (2.0f / 9)))));
  return static_cast<float>(e) * 0.693147181f + series;
}

inline void SinCos2PiImpl(uint32_t turn, float* sin_out, float* cos_out) {
  // The top two bits pick the quadrant; the next 24 give an angle in [0, pi/2),
  // where Taylor series to degree 11 / 12 are accurate to about 1e-7.
  const uint32_t quadrant = turn >> 30;
  const float x = static_cast<float>(static_cast<int32_t>((turn >> 6) & 0xFFFFFFu)) *
                  (1.57079632679f * 0x1.0p-24f);
  const float x2 = x * x;
  const float s =
      x * (1.0f + x2 * (-1.0f / 6 +
                        x2 * (1.0f / 120 + x2 * (-1.0f / 5040 +
                                                 x2 * (1.0f / 362880 + x2 * (-1.0f / 39916800))))));
  const float c =
      1.0f +
      x2 * (-0.5f + x2 * (1.0f / 24 + x2 * (-1.0f / 720 +
                                            x2 * (1.0f / 40320 + x2 * (-1.0f / 3628800 +
                                                                       x2 * (1.0f / 479001600))))));
  // Quadrant q rotates (c, s) by q * pi/2: odd quadrants swap them, and the signs
  // follow the quadrant.
  const uint32_t s_bits = FloatToBits(s), c_bits = FloatToBits(c);
  const uint32_t swap = quadrant & 1u;
  const uint32_t sin_bits = swap != 0 ? c_bits : s_bits;
  const uint32_t cos_bits = swap != 0 ? s_bits : c_bits;
  *sin_out = BitsToFloat(sin_bits ^ ((quadrant >> 1) << 31));
  *cos_out = BitsToFloat(cos_bits ^ ((((quadrant + 1) >> 1) & 1u) << 31));
}

// Fills out[0, n) with standard normals from a seeded mt19937_64 by Box-Muller.
// Everything after the raw 64-bit draws is plain float arithmetic written here,
// so the values are the same with every standard library and libm. One draw
// makes a pair: 24 bits for the radius (the tails stop at 5.8 sigma, far enough
// for random weights) and 32 for the angle.
void FillNormals(uint64_t seed, float* out, int64_t n) {
  constexpr int64_t kBatch = 256;  // pairs computed together, so that the maths vectorizes
  std::mt19937_64 rng(seed);
  uint64_t bits[kBatch];
  float radius[kBatch], sin_part[kBatch], cos_part[kBatch];
  for (int64_t i = 0; i < n; i += 2 * kBatch) {
    const int64_t pairs = std::min(kBatch, (n - i + 1) / 2);
    for (int64_t p = 0; p < pairs; ++p) bits[p] = rng();
    for (int64_t p = 0; p < pairs; ++p) {
      const auto k = static_cast<int32_t>(bits[p] >> 40);       // 24 bits
      const float u1 = static_cast<float>(k + 1) * 0x1.0p-24f;  // (0, 1]
      radius[p] = std::sqrt(-2.0f * LogImpl(u1));
      SinCos2PiImpl(static_cast<uint32_t>(bits[p]), &sin_part[p], &cos_part[p]);
    }
    const int64_t full_pairs = std::min(pairs, (n - i) / 2);
    for (int64_t p = 0; p < full_pairs; ++p) {
      out[i + 2 * p] = radius[p] * cos_part[p];
      out[i + 2 * p + 1] = radius[p] * sin_part[p];
    }
    if (full_pairs < pairs) out[n - 1] = radius[full_pairs] * cos_part[full_pairs];  // odd n
  }
}

int64_t StreamCount(const TensorPlan& plan) {
  return (plan.rows() + kRowsPerStream - 1) / kRowsPerStream;
}

// Rows [stream * kRowsPerStream, ...) of the plan's values into out:
// [rows in the stream][dims[0]]. Returns the number of rows.
int64_t GenerateStream(const TensorPlan& plan, uint64_t seed, int64_t stream, float* out) {
  const int64_t first = stream * kRowsPerStream;
  const int64_t rows = std::min(kRowsPerStream, plan.rows() - first);
  const int64_t n = rows * plan.dims[0];
  FillNormals(SplitMix64(SplitMix64(seed ^ Fnv1a64(plan.name)) + static_cast<uint64_t>(stream)),
              out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = plan.mean + plan.stddev * out[i];
  return rows;
}

// The plan's tensor, encoded in plan.type: [rows][RowBytes(type, dims[0])].
absl::StatusOr<std::vector<uint8_t>> EncodeTensor(const TensorPlan& plan, uint64_t seed,
                                                  ThreadPool& pool) {
  const int64_t row_length = plan.dims[0];
  const uint64_t row_bytes = ops::RowBytesUnchecked(plan.type, row_length);
  std::vector<uint8_t> bytes(plan.n_bytes());
  absl::Mutex mu;
  absl::Status status;
  pool.ParallelFor(StreamCount(plan), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> values(
        static_cast<size_t>(kRowsPerStream * row_length));  // [rows][row_length]
    for (int64_t stream = begin; stream < end; ++stream) {
      const int64_t rows = GenerateStream(plan, seed, stream, values.data());
      for (int64_t r = 0; r < rows; ++r) {
        const uint64_t row = static_cast<uint64_t>(stream * kRowsPerStream + r);
        absl::Status s = ops::QuantizeRow(plan.type, values.data() + r * row_length,
                                          bytes.data() + row * row_bytes, row_length);
        if (!s.ok()) {
          absl::MutexLock lock(&mu);
          if (status.ok()) status = std::move(s);
          return;
        }
      }
    }
  });
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat(plan.name, ": ", status.message()));
  }
  return bytes;
}

absl::Status CheckEncodable(ops::TensorType type) {
  const ops::TensorTypeTraits& traits = ops::GetTraits(type);
  std::vector<float> zeros(static_cast<size_t>(traits.block_size), 0.0f);
  std::vector<uint8_t> block(static_cast<size_t>(traits.type_size));
  if (absl::Status s = ops::QuantizeRow(type, zeros.data(), block.data(), traits.block_size);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("type ", traits.name, " cannot be used for a synthetic model: ", s.message()));
  }
  return absl::OkStatus();
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

bool IsRoutedExpertTensor(const std::string& name) {
  return name.find("_exps.weight") != std::string::npos;
}

}  // namespace

float PortableLog(float x) { return LogImpl(x); }

void PortableSinCos2Pi(uint32_t turn, float* sin_out, float* cos_out) {
  SinCos2PiImpl(turn, sin_out, cos_out);
}

std::vector<float> GenerateValues(const TensorPlan& plan, uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(plan.n_elements()));
  for (int64_t stream = 0; stream < StreamCount(plan); ++stream) {
    GenerateStream(plan, seed, stream, values.data() + stream * kRowsPerStream * plan.dims[0]);
  }
  return values;
}

absl::StatusOr<GenerateReport> GenerateModel(const ModelSpec& spec, const GenerateOptions& options,
                                             const std::string& path) {
  COLIBRI_RETURN_IF_ERROR(spec.Validate());
  COLIBRI_RETURN_IF_ERROR(CheckEncodable(options.type));

  GenerateReport report;
  COLIBRI_ASSIGN_OR_RETURN(BpeVocabulary vocab,
                           TrainByteLevelBpe(TrainingCorpus(), spec.vocab_size));
  const size_t n_trained = vocab.tokens.size();
  const int n_padding = PadVocabulary(spec.vocab_size, &vocab);
  report.n_vocab = static_cast<int>(vocab.tokens.size());
  report.n_merges = static_cast<int>(vocab.merges.size());
  if (n_padding > 0) {
    report.notes.push_back(absl::StrCat("the built-in training text supports ", n_trained,
                                        " tokens; the other ", n_padding,
                                        " of the vocabulary are unused padding tokens"));
  }

  const std::vector<TensorPlan> plans =
      PlanTensors(spec, report.n_vocab, options.type, &report.notes);
  for (const TensorPlan& plan : plans) {
    report.tensor_bytes += plan.n_bytes();
    report.n_params += plan.n_elements();
    if (IsRoutedExpertTensor(plan.name)) {
      report.expert_bytes += plan.n_bytes();
      // The first MoE layer's (deepseek2's leading layers are dense).
      if (plan.name.rfind(absl::StrCat("blk.", spec.n_dense_lead, "."), 0) == 0) {
        report.bytes_per_expert += plan.n_bytes() / static_cast<uint64_t>(spec.n_expert);
      }
    }
  }
  report.n_tensors = static_cast<int>(plans.size());
  const uint64_t memory = PhysicalMemoryBytes();
  if (memory > 0 && report.tensor_bytes > memory / 10 * 9) {
    return absl::ResourceExhaustedError(absl::StrCat("the model needs ", report.tensor_bytes,
                                                     " bytes in memory while it is written but the "
                                                     "machine has ",
                                                     memory, "; use fewer layers or experts"));
  }

  gguf::GgufWriter writer;
  AddMetadata(spec, options.type,
              options.name.empty() ? absl::StrCat("colibri-synthetic-", ArchitectureName(spec.arch))
                                   : options.name,
              vocab, &writer);
  ThreadPool pool(options.num_threads, ThreadPool::WithSpinOverride({}, options.spin_us));
  uint64_t done = 0;
  for (const TensorPlan& plan : plans) {
    COLIBRI_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, EncodeTensor(plan, options.seed, pool));
    COLIBRI_RETURN_IF_ERROR(writer.AddTensor(plan.name, plan.type, plan.dims, std::move(bytes)));
    done += plan.n_bytes();
    if (options.progress) options.progress(done, report.tensor_bytes, plan.name);
  }
  COLIBRI_RETURN_IF_ERROR(writer.WriteFile(path));

  std::error_code error;
  report.file_bytes = std::filesystem::file_size(path, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot stat the written file: ", error.message()));
  }
  return report;
}

}  // namespace colibri::synthetic
