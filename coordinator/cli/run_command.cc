#include "coordinator/cli/run_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/cpu_features.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "coordinator/cli/resident_weights.h"
#include "coordinator/generation/generation_scheduler.h"
#include "model/arch/model.h"
#include "model/moe/routing_trace.h"
#include "model/arch/session.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode_util.h"

namespace colibri::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// "per token: median M ms, min A, p90 B, max C (N tokens fed back)" of a
// generation's token_seconds, or "" when none was fed back. The p90 is the
// value below which 90% of the tokens fall (nearest rank).
std::string PerTokenLine(std::vector<float> seconds) {
  if (seconds.empty()) return "";
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median =
      n % 2 == 1 ? seconds[n / 2] : (double{seconds[n / 2 - 1]} + seconds[n / 2]) / 2;
  const size_t p90 = std::min(n - 1, (n * 9 + 9) / 10 - 1);
  return absl::StrFormat(
      "per token: median %.2f ms, min %.2f, p90 %.2f, max %.2f (%zu tokens fed back)\n",
      1e3 * median, 1e3 * seconds.front(), 1e3 * seconds[p90], 1e3 * seconds.back(), n);
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

// One line per layer: the coordinator's compute and expert wait per decode
// step and the layer's depth-1 prediction in decode.
void PrintLayers(const arch::SessionStats& s, const arch::SessionStats& at_prompt_done,
                 int64_t decode_steps, std::ostream& err) {
  if (decode_steps <= 0) return;
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const arch::LayerStats none;
    const arch::LayerStats& a = s.layers[l];
    const arch::LayerStats& p = l < at_prompt_done.layers.size() ? at_prompt_done.layers[l] : none;
    arch::PredictorStats d;
    d.routed = a.predictor.routed - p.predictor.routed;
    d.predicted = a.predictor.predicted - p.predictor.predicted;
    d.hits = a.predictor.hits - p.predictor.hits;
    err << absl::StrFormat(
        "layer %d decode per token: compute_ms=%.3f expert_wait_ms=%.3f; prediction routed=%d "
        "predicted=%d hits=%d recall=%.3f precision=%.3f\n",
        l, 1e3 * (a.compute_seconds - p.compute_seconds) / decode_steps,
        1e3 * (a.expert_wait_seconds - p.expert_wait_seconds) / decode_steps, d.routed,
        d.predicted, d.hits, d.recall(), d.precision());
  }
}

// `run`'s one generation on the scheduler: streams the text to `out`, writes
// the logits and marks the cluster's prompt end; RunGenerate waits for it.
class RunJob final : public GenerationJob {
 public:
  RunJob(GenerationSpec spec, std::ostream& out, LogitsWriter* logits, ClusterExperts* cluster)
      : GenerationJob(std::move(spec)), out_(out), logits_(logits), cluster_(cluster) {}

  bool OnToken(const GeneratedToken& token) override {
    // A model may emit bytes that are not UTF-8 on their own (a lone
    // continuation byte, a character cut short): print them as serve sends
    // them, with U+FFFD, so that stdout is always valid UTF-8.
    if (!token.text.empty()) out_ << tokenizer::ToValidUtf8(token.text) << std::flush;
    return true;
  }
  absl::Status OnLogits(absl::Span<const float> rows) override {
    return logits_->Write(rows.data(), rows.size());
  }
  void OnPromptDone() override {
    if (cluster_ != nullptr) cluster_->MarkPromptDone();
  }
  void OnFinish(absl::StatusOr<GenerationOutcome> outcome) override {
    outcome_ = std::move(outcome);
    done_.Notify();
  }

  absl::StatusOr<GenerationOutcome> Wait() {
    done_.WaitForNotification();
    return std::move(outcome_);
  }

 private:
  std::ostream& out_;
  LogitsWriter* const logits_;
  ClusterExperts* const cluster_;
  absl::Notification done_;
  absl::StatusOr<GenerationOutcome> outcome_ = absl::UnknownError("not finished");
};

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

  // Every expert runs here without nodes: all weights into RAM now rather than
  // by page faults during the prompt and the first tokens (counted in the load
  // time); with nodes the dense part, before they are set up.
  MakeWeightsResident(model.get(), /*experts_here=*/!options.cluster.enabled(), options.keep_mapped,
                      /*interleave=*/!options.gguf_order, err);
  std::unique_ptr<ThreadPool> pool =
      MakeCommandPool(options.threads, options.cluster.enabled(), options.spin_us);
  std::unique_ptr<ClusterExperts> cluster;
  if (options.cluster.enabled()) {
    COLIBRI_ASSIGN_OR_RETURN(cluster,
                             ClusterExperts::Start(options.cluster, *model, pool.get(), err));
  }
  WarnIfContextCapped("run", options.ctx_size, config, err);
  // One generation on serve's core with one session.
  GenerationScheduler::Options scheduler_options;
  scheduler_options.sessions = 1;
  scheduler_options.first_path = options.path;
  scheduler_options.ctx_size = options.ctx_size;
  scheduler_options.batch_size = options.batch_size;
  scheduler_options.prefetch.depth = options.prefetch_depth >= 0 ? options.prefetch_depth
                                     : options.cluster.enabled() ? 1
                                                                 : 0;
  scheduler_options.prefetch.count = options.prefetch_count;
  std::unique_ptr<moe::RoutingTraceWriter> routing_trace;
  if (!options.trace_routing.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(routing_trace, moe::RoutingTraceWriter::Open(options.trace_routing, {}));
    scheduler_options.routing_observers.push_back(routing_trace.get());
  }
  // One generation's steps never hold two sequences to split between.
  scheduler_options.pipeline_halves = arch::PipelineHalves::kOff;
  scheduler_options.kv_type = options.kv_type;
  scheduler_options.speculation = options.speculation;
  const tokenizer::Tokenizer* tokenizer = tok.ok() ? tok->get() : nullptr;
  COLIBRI_ASSIGN_OR_RETURN(
      std::unique_ptr<GenerationScheduler> scheduler,
      GenerationScheduler::Create(scheduler_options, *model, tokenizer, cluster.get(), pool.get()));
  LogitsWriter logits_out;
  COLIBRI_RETURN_IF_ERROR(logits_out.Open(options.logits_out));
  err << absl::StrFormat(
      "colibri: %s (%s), %d layers, %d experts top-%d, %d threads, %s, %s path, KV cache %s, "
      "loaded in %.2f s\n",
      config.arch, config.name, config.n_layer, config.n_expert, config.n_expert_used,
      pool->num_threads(), DescribeCpuFeatures(GetCpuFeatures()),
      options.path == ops::NumericPath::kExact ? "exact" : "fast",
      arch::KvTypeName(options.kv_type), Seconds(load_start));

  GenerationSpec spec;
  spec.prompt_ids = prompt;
  spec.path = options.path;
  spec.sampling = options.sampling;
  spec.generation.max_tokens = options.n_predict;
  spec.generation.ignore_eos = options.ignore_eos;
  spec.generation.decode_text = !options.print_token_ids;
  spec.generation.evaluate_every_token = logits_out.enabled();
  spec.generation.all_prompt_logits = options.all_logits;
  auto job = std::make_shared<RunJob>(std::move(spec), out, &logits_out, cluster.get());
  COLIBRI_RETURN_IF_ERROR(scheduler->Submit(job));
  absl::StatusOr<GenerationOutcome> outcome = job->Wait();
  scheduler->Stop();
  COLIBRI_RETURN_IF_ERROR(outcome.status());
  const GenerationResult& result = outcome->result;
  const std::vector<int32_t>& generated = result.tokens;
  const bool printed_text = tokenizer != nullptr && !options.print_token_ids;
  if (printed_text) out << tokenizer::ToValidUtf8(result.trailing_text);
  if (options.print_token_ids) {
    for (size_t i = 0; i < generated.size(); ++i) out << (i ? " " : "") << generated[i];
    out << "\n";
  } else if (printed_text) {
    out << "\n";
  }
  out << std::flush;
  COLIBRI_RETURN_IF_ERROR(logits_out.Close());
  if (result.finish_reason == FinishReason::kContextFull) {
    err << "generation stopped: the context of " << scheduler->n_ctx() << " positions is full\n";
  }
  const double prompt_seconds = result.prompt_seconds;
  const double gen_seconds = result.generate_seconds;

  err << absl::StrFormat("prompt: %zu tokens in %.3f s (%.1f tokens/s)\n", prompt.size(),
                         prompt_seconds, prompt.size() / std::max(prompt_seconds, 1e-9));
  if (!generated.empty()) {
    err << absl::StrFormat("generation: %zu tokens in %.3f s (%.1f tokens/s)\n", generated.size(),
                           gen_seconds, generated.size() / std::max(gen_seconds, 1e-9));
    err << PerTokenLine(result.token_seconds);
  }
  if (options.speculation.draft != DraftKind::kNone) {
    const SpeculationStats& s = result.speculation;
    err << absl::StrFormat(
        "speculation (%s): %d verify steps (%.3f s), %d plain steps (%.3f s), %d drafted, "
        "%d accepted (%.1f%%), mean accepted length %.2f\n",
        DraftKindName(options.speculation.draft), s.verify_steps, s.verify_seconds, s.plain_steps,
        s.plain_seconds, s.drafted, s.accepted, 100 * s.acceptance_rate(),
        s.mean_accepted_length());
  }
  if (scheduler_options.prefetch.depth > 0) {
    PrintPrediction(outcome->steps, outcome->prompt_steps, scheduler_options.prefetch.depth, err);
  }
  PrintLayers(outcome->steps, outcome->prompt_steps,
              std::max<int64_t>(static_cast<int64_t>(generated.size()) - 1, 0), err);
  if (cluster != nullptr) {
    // Overlap: the share of the time replies were outstanding during which
    // the coordinator computed (the shared expert, with one sequence).
    const arch::SessionStats& s = outcome->steps;
    err << absl::StrFormat("expert overlap: outstanding_s=%.3f wait_s=%.3f overlap=%.1f%%\n",
                           s.expert_outstanding_seconds, s.expert_wait_seconds, 100 * s.overlap());
    cluster->PrintStats(err, std::max<int64_t>(static_cast<int64_t>(generated.size()) - 1, 0));
  }
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
