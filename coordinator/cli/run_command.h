// `colibri-coordinator run`: one-shot generation or evaluation on this machine.
#ifndef COLIBRI_COORDINATOR_CLI_RUN_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_RUN_COMMAND_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/cluster/cluster_experts.h"
#include "coordinator/generation/speculation_options.h"
#include "model/arch/session.h"
#include "model/ops/matmul.h"
#include "model/sampling/sampler.h"

namespace colibri::coordinator {

struct RunOptions {
  std::string model_path;
  // Exactly one prompt source: text, a file of text, or token ids fed as given
  // (no BOS added).
  std::string prompt;
  std::string prompt_file;
  std::vector<int32_t> prompt_tokens;
  bool has_prompt_tokens = false;
  // Tokens to generate; 0 evaluates the prompt only. Default: 64.
  int n_predict = 64;
  // Keep generating past end-of-generation tokens. Default: false.
  bool ignore_eos = false;
  sampling::SamplingOptions sampling;
  // Worker threads. Default: 0, meaning the physical core count.
  int threads = 0;
  // Replaces every spin of the worker pool (ThreadPool::WithSpinOverride;
  // main takes it from COLIBRI_SPIN_US). Default: none, the pool's own.
  std::optional<int> spin_us;
  // Context size. Default: 0, meaning min(model context, 4096).
  int ctx_size = 0;
  // Prompt tokens per batch. Default: 512.
  int batch_size = 512;
  // Numeric path: kExact keeps activations in float32. Default: kFast.
  ops::NumericPath path = ops::NumericPath::kFast;
  // Little-endian float32 rows of n_vocab: with all_logits one row per prompt
  // position, else only the last prompt position; then one row per generated
  // token (the logits after feeding it). Default: none.
  std::string logits_out;
  bool all_logits = false;
  // Print the generated ids on one line to stdout instead of the text.
  // Default: false.
  bool print_token_ids = false;
  // Keep the weights mapped from the file instead of copying them into RAM
  // on huge pages (MakeWeightsResident). Default: false.
  bool keep_mapped = false;
  // Copy the weights in GGUF row order even where the kernels read an
  // interleaved layout faster (Model::InterleaveWeights); results are the
  // same. For comparisons. Default: false.
  bool gguf_order = false;
  // Element type of the KV cache (arch::KvType). Default: kF32.
  arch::KvType kv_type = arch::KvType::kF32;
  // Next-layer expert prediction (arch::PrefetchOptions): layers ahead, 0 to 2,
  // or -1 for 1 with cluster.nodes and 0 without. Default: -1.
  int prefetch_depth = -1;
  // Experts predicted per token. Default: 0, meaning the model's top-k.
  int prefetch_count = 0;
  // Where every forward step's expert routing is recorded
  // (model/moe/routing_trace.h); empty: not recorded. Default: empty.
  std::string trace_routing;
  // Speculative decoding (--draft, --draft-max); its counters are printed
  // with the speed figures. Default: off.
  SpeculationOptions speculation;
  // Expert nodes to run the routed experts on (cluster.nodes empty: this
  // process computes them). Default: none.
  ClusterCommandOptions cluster;
};

// Runs the generation, streaming text (or ids) to `out` and speed figures to
// `err`.
absl::Status RunGenerate(const RunOptions& options, std::ostream& out, std::ostream& err);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_RUN_COMMAND_H_
