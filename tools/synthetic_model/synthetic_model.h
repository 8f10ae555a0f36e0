// Writes a synthetic MoE model as a GGUF file: seeded random weights of a chosen
// shape and architecture, quantized to a chosen type, with a real byte-level BPE
// tokenizer trained on built-in English text. For demos, benchmarks and tests
// that must not depend on a download.
//
// Determinism: every value depends only on the seed, the tensor name and its
// position (each run of kRowsPerStream rows has its own std::mt19937_64 stream,
// turned into normals by Box-Muller here), never on the thread count, so the
// same spec, type and seed give the same file bytes.
//
// Memory: the GGUF writer holds every tensor until it writes the file, so the
// peak is about the file size; Generate refuses (ResourceExhausted) a model
// larger than 90% of physical memory.
#ifndef COLIBRI_SCRIPTS_SYNTHETIC_MODEL_SYNTHETIC_MODEL_H_
#define COLIBRI_SCRIPTS_SYNTHETIC_MODEL_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/ops/tensor_type.h"
#include "tools/synthetic_model/model_spec.h"

namespace colibri::synthetic {

struct GenerateOptions {
  static constexpr uint64_t kDefaultSeed = 0xC011B121ULL;  // "COLIBRI"

  // Type of the weight matrices and token_embd (norms, biases and routers are
  // always F32; see StorageType for rows that do not fit). Must be a type
  // ops::QuantizeRow encodes. Default: Q4_K.
  ops::TensorType type = ops::TensorType::kQ4_K;
  // Default: kDefaultSeed.
  uint64_t seed = kDefaultSeed;
  // Worker threads for generation and quantization; 0 = one per physical core.
  // The output does not depend on it. Default: 0.
  int num_threads = 0;
  // Replaces every spin of the worker pool (ThreadPool::WithSpinOverride).
  // Default: none, the pool's own.
  std::optional<int> spin_us;
  // general.name. Default (empty): "colibri-synthetic-<arch>".
  std::string name;
  // Called after each tensor is generated with the bytes done so far, the total
  // and the tensor's name. Default: none.
  std::function<void(uint64_t done, uint64_t total, const std::string& tensor)> progress;
};

struct GenerateReport {
  uint64_t file_bytes = 0;    // size of the file written
  uint64_t tensor_bytes = 0;  // tensor data, without header and padding
  int64_t n_params = 0;
  int n_tensors = 0;
  int n_vocab = 0;  // tokens in the trained vocabulary
  int n_merges = 0;
  // One routed expert of one layer (its gate, up and down slices).
  uint64_t bytes_per_expert = 0;
  // All routed experts of all layers.
  uint64_t expert_bytes = 0;
  // Things the caller should tell the user: type fallbacks, a short vocabulary.
  std::vector<std::string> notes;
};

// Rows per RNG stream (the unit of parallel work).
inline constexpr int64_t kRowsPerStream = 32;

// Generates the model described by spec and options and writes it to `path`.
// InvalidArgument for a bad spec or type; ResourceExhausted when it would not fit
// in memory; Internal on I/O errors.
absl::StatusOr<GenerateReport> GenerateModel(const ModelSpec& spec, const GenerateOptions& options,
                                             const std::string& path);

// The values GenerateModel puts in `plan` before quantization: [rows][dims[0]].
// For tests (decoded tensors should match them within the type's error).
std::vector<float> GenerateValues(const TensorPlan& plan, uint64_t seed);

// The portable float approximations behind the normals (exposed for their
// test): natural log for x in (0, 1], and sin / cos of 2*pi*turn/2^32. Absolute
// error below 1e-6 (log: relative to max(1, |log x|)).
float PortableLog(float x);
void PortableSinCos2Pi(uint32_t turn, float* sin_out, float* cos_out);

}  // namespace colibri::synthetic

#endif  // COLIBRI_SCRIPTS_SYNTHETIC_MODEL_SYNTHETIC_MODEL_H_
