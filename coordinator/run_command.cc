#include "coordinator/run_command.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cpu_features.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Writes little-endian float32 rows; this code assumes a little-endian host,
// which every supported platform is.
class LogitsWriter {
 public:
  absl::Status Open(const std::string& path) {
    if (path.empty()) return absl::OkStatus();
    file_ = std::fopen(path.c_str(), "wb");
    if (file_ == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write logits file ", path));
    }
    path_ = path;
    return absl::OkStatus();
  }
  ~LogitsWriter() {
    if (file_ != nullptr) std::fclose(file_);
  }
  bool enabled() const { return file_ != nullptr; }
  absl::Status Write(const float* data, size_t n) {
    if (file_ == nullptr) return absl::OkStatus();
    if (std::fwrite(data, sizeof(float), n, file_) != n) {
      return absl::InternalError(absl::StrCat("short write to ", path_));
    }
    return absl::OkStatus();
  }
  absl::Status Close() {
    if (file_ == nullptr) return absl::OkStatus();
    const bool ok = std::fclose(file_) == 0;
    file_ = nullptr;
    return ok ? absl::OkStatus() : absl::InternalError(absl::StrCat("closing ", path_));
  }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read prompt file ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One line per depth that predicted a layer: the totals, then decode only.
void PrintPrediction(const arch::SessionStats& s, const arch::SessionStats& at_prompt_done,
                     int depth, std::ostream& err) {
  for (int d = 1; d <= depth; ++d) {
    const arch::PredictorStats& all = s.predictor[d - 1];
    const arch::PredictorStats& p = at_prompt_done.predictor[d - 1];
    if (all.layers == 0) continue;
    arch::PredictorStats decode;
    decode.layers = all.layers - p.layers;
    decode.routed = all.routed - p.routed;
    decode.predicted = all.predicted - p.predicted;
    decode.hits = all.hits - p.hits;
    err << absl::StrFormat(
        "prediction L+%d: layers=%d routed=%d predicted=%d hits=%d recall=%.3f precision=%.3f; "
        "decode: recall=%.3f precision=%.3f\n",
        d, all.layers, all.routed, all.predicted, all.hits, all.recall(), all.precision(),
        decode.recall(), decode.precision());
  }
  err << absl::StrFormat("prediction: %.3f s\n", s.predict_seconds);
}

}  // namespace

absl::Status RunGenerate(const RunOptions& options, std::ostream& out, std::ostream& err) {
  const int sources = (options.prompt.empty() ? 0 : 1) + (options.prompt_file.empty() ? 0 : 1) +
                      (options.has_prompt_tokens ? 1 : 0);
  if (sources != 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --prompt, --prompt-file and --prompt-tokens");
  }
  if (options.n_predict < 0) return absl::InvalidArgumentError("--n-predict must be >= 0");
  COLIBRI_RETURN_IF_ERROR(options.sampling.Validate());

  const auto load_start = Clock::now();
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<arch::Model> model,
                           arch::Model::Open(options.model_path));
  const arch::ModelConfig& config = model->config();

  // The tokenizer is optional when ids are given; text needs it.
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::FromGguf(model->file());
  std::vector<int32_t> prompt;
  if (options.has_prompt_tokens) {
    prompt = options.prompt_tokens;
  } else {
    if (!tok.ok()) return tok.status();
    std::string text = options.prompt;
    if (!options.prompt_file.empty()) {
      COLIBRI_ASSIGN_OR_RETURN(text, ReadTextFile(options.prompt_file));
    }
    tokenizer::EncodeOptions enc;
    enc.add_special = true;
    COLIBRI_ASSIGN_OR_RETURN(prompt, (*tok)->Encode(text, enc));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");

  ThreadPool pool(options.threads);
  std::unique_ptr<moe::ExpertBackend> local_backend;
  std::unique_ptr<ClusterExperts> cluster;
  moe::ExpertBackend* backend = nullptr;
  if (!options.cluster.enabled()) {
    local_backend = std::make_unique<moe::LocalExpertBackend>(&model->experts(), config.n_expert,
                                                              options.path, &pool);
    backend = local_backend.get();
  } else {
    COLIBRI_ASSIGN_OR_RETURN(cluster,
                             ClusterExperts::Start(options.cluster, *model, options.path, &pool, err));
    backend = cluster->backend();
  }
  arch::SessionOptions session_options;
  session_options.n_ctx = options.ctx_size;
  session_options.n_batch = options.batch_size;
  session_options.path = options.path;
  session_options.prefetch.depth = options.prefetch_depth >= 0     ? options.prefetch_depth
                                   : options.cluster.nodes.empty() ? 0
                                                                   : 1;
  session_options.prefetch.count = options.prefetch_count;
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<arch::Session> session,
                           arch::Session::Create(*model, backend, &pool, session_options));
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<sampling::Sampler> sampler,
                           sampling::Sampler::Create(options.sampling, config.n_vocab));
  LogitsWriter logits_out;
  COLIBRI_RETURN_IF_ERROR(logits_out.Open(options.logits_out));
  err << absl::StrFormat("colibri: %s (%s), %d layers, %d experts top-%d, %d threads, %s, %s path, "
                         "loaded in %.2f s\n",
                         config.arch, config.name, config.n_layer, config.n_expert,
                         config.n_expert_used, pool.num_threads(),
                         DescribeCpuFeatures(GetCpuFeatures()),
                         options.path == ops::NumericPath::kExact ? "exact" : "fast",
                         Seconds(load_start));

  std::vector<float> logits;
  const auto prompt_start = Clock::now();
  COLIBRI_RETURN_IF_ERROR(session->Evaluate(prompt, options.all_logits, &logits));
  const double prompt_seconds = Seconds(prompt_start);
  COLIBRI_RETURN_IF_ERROR(logits_out.Write(logits.data(), logits.size()));
  for (int32_t id : prompt) sampler->Accept(id);
  if (cluster != nullptr) cluster->MarkPromptDone();
  const arch::SessionStats at_prompt_done = session->stats();

  const int64_t n_vocab = config.n_vocab;
  const float* last = logits.data() + (options.all_logits ? logits.size() - n_vocab : 0);
  std::vector<float> next(last, last + n_vocab);
  std::vector<int32_t> generated;
  generated.reserve(options.n_predict);
  std::unique_ptr<tokenizer::StreamDecoder> decoder;
  if (tok.ok() && !options.print_token_ids) {
    decoder = std::make_unique<tokenizer::StreamDecoder>(**tok);
  }

  const auto gen_start = Clock::now();
  for (int i = 0; i < options.n_predict; ++i) {
    const int32_t id = sampler->Sample(next);
    sampler->Accept(id);
    generated.push_back(id);
    const bool eog = tok.ok() && (*tok)->IsEndOfGeneration(id) && !options.ignore_eos;
    if (decoder != nullptr && !eog) {
      out << decoder->Push(id) << std::flush;
    }
    // The last token needs evaluating only to report its logits.
    const bool want_logits = logits_out.enabled();
    if (eog || (i + 1 == options.n_predict && !want_logits)) {
      if (eog && want_logits) {
        COLIBRI_RETURN_IF_ERROR(session->Evaluate({&id, 1}, false, &next));
        COLIBRI_RETURN_IF_ERROR(logits_out.Write(next.data(), next.size()));
      }
      if (eog) break;
      continue;
    }
    COLIBRI_RETURN_IF_ERROR(session->Evaluate({&id, 1}, false, &next));
    COLIBRI_RETURN_IF_ERROR(logits_out.Write(next.data(), next.size()));
  }
  const double gen_seconds = Seconds(gen_start);
  if (decoder != nullptr) out << decoder->Flush();
  if (options.print_token_ids) {
    for (size_t i = 0; i < generated.size(); ++i) out << (i ? " " : "") << generated[i];
    out << "\n";
  } else if (decoder != nullptr) {
    out << "\n";
  }
  out << std::flush;
  COLIBRI_RETURN_IF_ERROR(logits_out.Close());

  err << absl::StrFormat("prompt: %zu tokens in %.3f s (%.1f tokens/s)\n", prompt.size(),
                         prompt_seconds, prompt.size() / std::max(prompt_seconds, 1e-9));
  if (!generated.empty()) {
    err << absl::StrFormat("generation: %zu tokens in %.3f s (%.1f tokens/s)\n",
                           generated.size(), gen_seconds,
                           generated.size() / std::max(gen_seconds, 1e-9));
  }
  if (session_options.prefetch.depth > 0) {
    PrintPrediction(session->stats(), at_prompt_done, session_options.prefetch.depth, err);
  }
  if (cluster != nullptr) cluster->PrintStats(err);
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
