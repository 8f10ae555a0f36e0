#include "coordinator/generation_scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/remote_expert_backend.h"
#include "coordinator/serve_metrics.h"
#include "model/moe/local_expert_backend.h"

namespace colibri::coordinator {
namespace {

absl::Status ShuttingDown() { return absl::UnavailableError("the coordinator is shutting down"); }
absl::Status Cancelled() { return absl::CancelledError("generation cancelled by the client"); }

}  // namespace

// A worker's sessions and backends, [0] fast path, [1] exact path.
struct GenerationScheduler::Slot {
  std::unique_ptr<moe::ExpertBackend> backend[2];
  RemoteExpertBackend* remote[2] = {nullptr, nullptr};  // backend[i] when over nodes
  std::unique_ptr<arch::Session> session[2];
};

GenerationScheduler::GenerationScheduler(const Options& options, const arch::Model& model,
                                         const tokenizer::Tokenizer* tokenizer,
                                         ClusterExperts* cluster, ThreadPool* pool)
    : options_(options), model_(model), tokenizer_(tokenizer), cluster_(cluster), pool_(pool) {}

absl::StatusOr<std::unique_ptr<GenerationScheduler>> GenerationScheduler::Create(
    const Options& options, const arch::Model& model, const tokenizer::Tokenizer* tokenizer,
    ClusterExperts* cluster, ThreadPool* pool) {
  if (options.sessions < 1) return absl::InvalidArgumentError("--sessions must be >= 1");
  std::unique_ptr<GenerationScheduler> scheduler(
      new GenerationScheduler(options, model, tokenizer, cluster, pool));
  for (int i = 0; i < options.sessions; ++i) scheduler->slots_.push_back(std::make_unique<Slot>());
  COLIBRI_ASSIGN_OR_RETURN(arch::Session * first,
                           scheduler->SessionFor(*scheduler->slots_[0], ops::NumericPath::kFast));
  scheduler->n_ctx_ = first->n_ctx();
  for (int i = 0; i < options.sessions; ++i) {
    scheduler->workers_.emplace_back([s = scheduler.get(), i] { s->WorkerLoop(i); });
  }
  return scheduler;
}

GenerationScheduler::~GenerationScheduler() { Stop(); }

absl::Status GenerationScheduler::Submit(std::shared_ptr<GenerationJob> job) {
  job->submitted_ = absl::Now();
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return ShuttingDown();
  queue_.push_back(std::move(job));
  return absl::OkStatus();
}

void GenerationScheduler::BeginShutdown() {
  std::deque<std::shared_ptr<GenerationJob>> queued;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    queued.swap(queue_);
    for (const auto& job : running_) job->Cancel();
  }
  for (const auto& job : queued) job->OnFinish(ShuttingDown());
}

void GenerationScheduler::Stop() {
  BeginShutdown();
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

int GenerationScheduler::active_generations() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(running_.size());
}

int GenerationScheduler::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

arch::PredictorStats GenerationScheduler::predictor() const {
  absl::MutexLock lock(&mu_);
  return predictor_;
}

absl::StatusOr<arch::Session*> GenerationScheduler::SessionFor(Slot& slot, ops::NumericPath path) {
  const int k = path == ops::NumericPath::kExact ? 1 : 0;
  if (slot.session[k] == nullptr) {
    if (cluster_ != nullptr) {
      std::unique_ptr<RemoteExpertBackend> remote = cluster_->NewBackend(path);
      slot.remote[k] = remote.get();
      slot.backend[k] = std::move(remote);
    } else {
      slot.backend[k] = std::make_unique<moe::LocalExpertBackend>(
          &model_.experts(), model_.config().n_expert, path, pool_);
    }
    arch::SessionOptions session_options;
    session_options.n_ctx = options_.ctx_size;
    session_options.n_batch = options_.batch_size;
    session_options.path = path;
    session_options.prefetch = options_.prefetch;
    COLIBRI_ASSIGN_OR_RETURN(slot.session[k], arch::Session::Create(model_, slot.backend[k].get(),
                                                                    pool_, session_options));
  }
  return slot.session[k].get();
}

void GenerationScheduler::WorkerLoop(int slot) {
  for (;;) {
    std::shared_ptr<GenerationJob> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;
      job = queue_.front();
      queue_.pop_front();
      running_.push_back(job);
    }
    Tally tally;
    absl::StatusOr<GenerationOutcome> outcome = Run(*slots_[slot], *job, &tally);
    if (options_.metrics != nullptr) {
      options_.metrics->OnGenerationEnd(outcome.status(), tally.prompt_tokens,
                                        tally.generated_tokens);
    }
    // Off the running list before the front end hears of the end, so that a
    // client seeing its response also sees the generation gone.
    {
      absl::MutexLock lock(&mu_);
      running_.erase(std::find(running_.begin(), running_.end(), job));
    }
    job->OnFinish(std::move(outcome));
  }
}

absl::StatusOr<GenerationOutcome> GenerationScheduler::Run(Slot& slot, GenerationJob& job,
                                                           Tally* tally) {
  if (job.cancelled()) return Cancelled();
  const GenerationSpec& spec = job.spec();
  std::vector<int32_t> prompt = spec.prompt_ids;
  if (prompt.empty()) {
    if (tokenizer_ == nullptr) {
      return absl::FailedPreconditionError("the model has no tokenizer: send token ids");
    }
    tokenizer::EncodeOptions enc;
    enc.add_special = true;
    enc.parse_special = spec.parse_special;
    COLIBRI_ASSIGN_OR_RETURN(prompt, tokenizer_->Encode(spec.text, enc));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (static_cast<int>(prompt.size()) > n_ctx_) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt.size(),
                                                   " tokens, more than the context of ", n_ctx_));
  }
  const int k = spec.path == ops::NumericPath::kExact ? 1 : 0;
  tally->prompt_tokens = static_cast<int>(prompt.size());
  COLIBRI_ASSIGN_OR_RETURN(arch::Session * session, SessionFor(slot, spec.path));
  session->Reset();
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<sampling::Sampler> sampler,
                           sampling::Sampler::Create(spec.sampling, model_.config().n_vocab));

  const RemoteExpertBackend* remote = slot.remote[k];
  const RemoteBackendStats remote_before =
      remote != nullptr ? remote->stats() : RemoteBackendStats();
  const double wait_before = session->stats().expert_wait_seconds;
  const arch::PredictorStats predictor_before = session->stats().predictor[0];

  GenerationOptions generation = spec.generation;
  generation.speculation = options_.speculation;
  generation.decode_text = true;
  GenerationCallbacks callbacks;
  absl::Time last_token = job.submitted_;
  callbacks.on_token = [&](const GeneratedToken& token) {
    const absl::Time now = absl::Now();
    if (options_.metrics != nullptr) {
      const double seconds = absl::ToDoubleSeconds(now - last_token);
      if (tally->generated_tokens == 0) {
        options_.metrics->OnFirstToken(seconds);
      } else {
        options_.metrics->OnInterToken(seconds);
      }
    }
    last_token = now;
    ++tally->generated_tokens;
    if (job.cancelled()) return false;
    return job.OnToken(token) && !job.cancelled();
  };
  absl::StatusOr<GenerationResult> result =
      Generate(*session, *sampler, tokenizer_, prompt, generation, callbacks);
  {
    const arch::PredictorStats& p = session->stats().predictor[0];
    absl::MutexLock lock(&mu_);
    predictor_.layers += p.layers - predictor_before.layers;
    predictor_.routed += p.routed - predictor_before.routed;
    predictor_.predicted += p.predicted - predictor_before.predicted;
    predictor_.hits += p.hits - predictor_before.hits;
  }
  if (!result.ok()) return result.status();
  if (result->finish_reason == FinishReason::kCancelled || job.cancelled()) return Cancelled();

  GenerationOutcome outcome;
  outcome.result = std::move(*result);
  outcome.prompt_tokens = static_cast<int>(prompt.size());
  outcome.expert_wait_seconds = session->stats().expert_wait_seconds - wait_before;
  if (remote != nullptr) {
    const RemoteBackendStats after = remote->stats();
    outcome.expert_round_trips = after.round_trips - remote_before.round_trips;
    outcome.expert_bytes_sent = after.bytes_sent - remote_before.bytes_sent;
    outcome.fallback_routes = after.fallback_routes - remote_before.fallback_routes;
  }
  return outcome;
}

}  // namespace colibri::coordinator
