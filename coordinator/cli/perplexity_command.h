// `colibri-coordinator perplexity`: how well a model predicts a text.
//
// The text is tokenized with the model's own tokenizer (no BOS/EOS added) and
// cut into non-overlapping windows of ctx + 1 tokens, window w starting at
// token w * ctx; each window's first ctx tokens are evaluated from an empty
// cache, and position i predicts token i + 1 of the window. A trailing window
// shorter than ctx + 1 tokens is dropped. This is what
// scripts/demo-model measures in PyTorch, so the figures compare.
#ifndef COLIBRI_COORDINATOR_CLI_PERPLEXITY_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_PERPLEXITY_COMMAND_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "model/arch/session.h"
#include "model/ops/matmul.h"

namespace colibri::coordinator {

struct PerplexityOptions {
  std::string model_path;
  std::string text_file;
  // Tokens evaluated per window. Default: 0, meaning the model's context
  // length capped at 512.
  int ctx = 0;
  // Windows scored at most. Default: 0, meaning all of them.
  int max_windows = 0;
  // Worker threads. Default: 0, meaning the physical core count.
  int threads = 0;
  // Replaces every spin of the worker pool (ThreadPool::WithSpinOverride;
  // main takes it from COLIBRI_SPIN_US). Default: none, the pool's own.
  std::optional<int> spin_us;
  // Numeric path: kExact keeps activations in float32. Default: kFast.
  ops::NumericPath path = ops::NumericPath::kFast;
  // Element type of the KV cache (arch::KvType). Default: kF32.
  arch::KvType kv_type = arch::KvType::kF32;
};

struct PerplexityResult {
  int ctx = 0;
  int64_t text_tokens = 0;    // tokens in the whole text
  int64_t windows = 0;        // windows scored
  int64_t scored = 0;         // predictions scored (windows * ctx)
  double mean_nll = 0;        // mean negative log-likelihood, nats per token
  double perplexity() const;  // exp(mean_nll)
};

// Scores the text. NotFound when a file cannot be read; InvalidArgument for a
// bad ctx, a model without a tokenizer or a text shorter than one window;
// model loading and evaluation errors as they come.
absl::StatusOr<PerplexityResult> ComputePerplexity(const PerplexityOptions& options);

// ComputePerplexity, printing the figures to `out` (one "key: value" per line)
// and progress to `err`.
absl::Status RunPerplexity(const PerplexityOptions& options, std::ostream& out, std::ostream& err);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_PERPLEXITY_COMMAND_H_
