#include "coordinator/cli/perplexity_command.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {
namespace {

constexpr int kDefaultMaxCtx = 512;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read text file ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// -log softmax(logits)[target], from the max-shifted row: the sum of exps
// as the sampler's log-probabilities form it (sampling::SumExpBelow, float
// exps within 1 ulp summed in double), the rest in double. NaN when the
// maximum is not finite (as exp(inf - inf) made it before).
double NegativeLogLikelihood(const float* logits, int n_vocab, int32_t target) {
  const float max = *std::max_element(logits, logits + n_vocab);
  if (!std::isfinite(max)) return std::numeric_limits<double>::quiet_NaN();
  const double sum =
      sampling::SumExpBelow(absl::MakeConstSpan(logits, static_cast<size_t>(n_vocab)), max);
  return std::log(sum) - (static_cast<double>(logits[target]) - max);
}

}  // namespace

double PerplexityResult::perplexity() const { return std::exp(mean_nll); }

absl::StatusOr<PerplexityResult> ComputePerplexity(const PerplexityOptions& options) {
  if (options.ctx < 0) return absl::InvalidArgumentError("--ctx must be >= 0");
  if (options.max_windows < 0) return absl::InvalidArgumentError("--max-windows must be >= 0");
  COLIBRI_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(options.text_file));
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<arch::Model> model,
                           arch::Model::Open(options.model_path));
  const arch::ModelConfig& config = model->config();
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::FromGguf(model->file());
  if (!tok.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.model_path, ": perplexity needs the model's tokenizer: ", tok.status().message()));
  }
  COLIBRI_ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                           (*tok)->Encode(text, tokenizer::EncodeOptions{}));

  PerplexityResult result;
  result.ctx = options.ctx > 0 ? options.ctx : std::min(config.n_ctx_train, kDefaultMaxCtx);
  result.text_tokens = static_cast<int64_t>(tokens.size());
  int64_t windows = result.text_tokens > 0 ? (result.text_tokens - 1) / result.ctx : 0;
  if (windows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(options.text_file, " has ", result.text_tokens,
                                                   " tokens, fewer than one "
                                                   "window of ",
                                                   result.ctx + 1));
  }
  if (options.max_windows > 0) windows = std::min<int64_t>(windows, options.max_windows);

  ThreadPool pool(options.threads, ThreadPool::WithSpinOverride({}, options.spin_us));
  moe::LocalExpertBackend backend(&model->experts(), config.n_expert, options.path, &pool);
  arch::SessionOptions session_options;
  session_options.n_ctx = result.ctx;
  session_options.n_batch = result.ctx;
  session_options.path = options.path;
  session_options.kv_type = options.kv_type;
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<arch::Session> session,
                           arch::Session::Create(*model, &backend, &pool, session_options));

  const int n_vocab = config.n_vocab;
  std::vector<float> logits;
  double total = 0;
  for (int64_t w = 0; w < windows; ++w) {
    const int32_t* window = tokens.data() + w * result.ctx;
    session->Reset();
    COLIBRI_RETURN_IF_ERROR(session->Evaluate(absl::MakeConstSpan(window, result.ctx),
                                              /*all_logits=*/true, &logits));
    for (int i = 0; i < result.ctx; ++i) {
      total += NegativeLogLikelihood(logits.data() + static_cast<size_t>(i) * n_vocab, n_vocab,
                                     window[i + 1]);
    }
  }
  result.windows = windows;
  result.scored = windows * result.ctx;
  result.mean_nll = total / static_cast<double>(result.scored);
  return result;
}

absl::Status RunPerplexity(const PerplexityOptions& options, std::ostream& out, std::ostream& err) {
  err << "colibri: scoring " << options.text_file << " with " << options.model_path << "\n";
  COLIBRI_ASSIGN_OR_RETURN(PerplexityResult r, ComputePerplexity(options));
  out << absl::StrFormat("text tokens: %d\n", r.text_tokens);
  out << absl::StrFormat("windows: %d of %d tokens\n", r.windows, r.ctx);
  out << absl::StrFormat("scored tokens: %d\n", r.scored);
  out << absl::StrFormat("mean nll: %.6f\n", r.mean_nll);
  out << absl::StrFormat("perplexity: %.4f\n", r.perplexity());
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
