#include "coordinator/generation_scheduler.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/remote_expert_backend.h"
#include "coordinator/serve_metrics.h"
#include "model/moe/local_expert_backend.h"

namespace colibri::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status ShuttingDown() { return absl::UnavailableError("the coordinator is shutting down"); }
absl::Status Cancelled() { return absl::CancelledError("generation cancelled by the client"); }

}  // namespace

// A batched session and its expert backend, for one numeric path.
struct GenerationScheduler::Engine {
  std::unique_ptr<moe::ExpertBackend> backend;
  RemoteExpertBackend* remote = nullptr;  // backend, when over nodes
  std::unique_ptr<arch::Session> session;
  std::vector<bool> used;  // [sessions] slots taken by an active generation
  uint64_t steps = 0;      // Step calls, to rotate the decoding order
};

// A generation in a slot: its prompt's progress and its per-token state.
struct GenerationScheduler::Active {
  std::shared_ptr<GenerationJob> job;
  int engine = 0;
  int seq = 0;
  std::vector<int32_t> prompt;
  int prompt_done = 0;  // prompt tokens evaluated
  GenerationOptions options;
  std::unique_ptr<sampling::Sampler> sampler;
  std::unique_ptr<TokenEmitter> emitter;  // over sampler and options
  std::function<bool(const GeneratedToken&)> on_token;
  int32_t next = 0;           // the token to evaluate next, once the prompt is done
  std::vector<float> logits;  // [n_vocab] of the last step
  GenerationOutcome outcome;  // result and counters so far
  Clock::time_point prompt_start, generate_start;
  absl::Time last_token;  // submission, then each token: for the latency metrics
  int generated = 0;      // tokens reported through on_token
  bool finished = false;
};

GenerationScheduler::GenerationScheduler(const Options& options, const arch::Model& model,
                                         const tokenizer::Tokenizer* tokenizer,
                                         ClusterExperts* cluster, ThreadPool* pool)
    : options_(options), model_(model), tokenizer_(tokenizer), cluster_(cluster), pool_(pool) {}

GenerationScheduler::~GenerationScheduler() { Stop(); }

absl::StatusOr<std::unique_ptr<GenerationScheduler>> GenerationScheduler::Create(
    const Options& options, const arch::Model& model, const tokenizer::Tokenizer* tokenizer,
    ClusterExperts* cluster, ThreadPool* pool) {
  if (options.sessions < 1) return absl::InvalidArgumentError("--sessions must be >= 1");
  std::unique_ptr<GenerationScheduler> scheduler(
      new GenerationScheduler(options, model, tokenizer, cluster, pool));
  COLIBRI_ASSIGN_OR_RETURN(Engine * fast, scheduler->EngineFor(ops::NumericPath::kFast));
  scheduler->n_ctx_ = fast->session->n_ctx();
  scheduler->stepper_ = std::thread([s = scheduler.get()] { s->StepLoop(); });
  return scheduler;
}

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
  if (stepper_.joinable()) stepper_.join();
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

GenerationScheduler::ExpertOverlap GenerationScheduler::expert_overlap() const {
  absl::MutexLock lock(&mu_);
  return overlap_;
}

absl::StatusOr<GenerationScheduler::Engine*> GenerationScheduler::EngineFor(ops::NumericPath path) {
  std::unique_ptr<Engine>& engine = engines_[path == ops::NumericPath::kExact ? 1 : 0];
  if (engine != nullptr) return engine.get();
  auto e = std::make_unique<Engine>();
  if (cluster_ != nullptr) {
    std::unique_ptr<RemoteExpertBackend> remote = cluster_->NewBackend(path);
    e->remote = remote.get();
    e->backend = std::move(remote);
  } else {
    e->backend = std::make_unique<moe::LocalExpertBackend>(&model_.experts(),
                                                           model_.config().n_expert, path, pool_);
  }
  arch::SessionOptions session_options;
  session_options.n_ctx = options_.ctx_size;
  session_options.n_batch = options_.batch_size;
  session_options.path = path;
  session_options.prefetch = options_.prefetch;
  session_options.n_seq = options_.sessions;
  session_options.pipeline_halves = options_.pipeline_halves;
  COLIBRI_ASSIGN_OR_RETURN(e->session,
                           arch::Session::Create(model_, e->backend.get(), pool_, session_options));
  e->used.assign(options_.sessions, false);
  engine = std::move(e);
  return engine.get();
}

void GenerationScheduler::StepLoop() {
  std::vector<std::unique_ptr<Active>> active;
  for (;;) {
    std::vector<std::shared_ptr<GenerationJob>> admitted;
    {
      absl::MutexLock lock(&mu_);
      if (active.empty()) {
        auto ready = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;
      }
      while (active.size() + admitted.size() < static_cast<size_t>(options_.sessions) &&
             !queue_.empty()) {
        admitted.push_back(queue_.front());
        queue_.pop_front();
        running_.push_back(admitted.back());
      }
    }
    for (std::shared_ptr<GenerationJob>& job : admitted) {
      absl::StatusOr<std::unique_ptr<Active>> a = Admit(job);
      if (a.ok()) {
        active.push_back(std::move(*a));
        continue;
      }
      if (options_.metrics != nullptr) options_.metrics->OnGenerationEnd(a.status(), 0, 0);
      {
        absl::MutexLock lock(&mu_);
        running_.erase(std::find(running_.begin(), running_.end(), job));
      }
      job->OnFinish(a.status());
    }
    // A cancelled generation leaves before the step, freeing its slot.
    for (auto& a : active) {
      if (a->job->cancelled()) Finish(*a, Cancelled());
    }
    for (int e = 0; e < 2; ++e) Step(e, active);
    active.erase(std::remove_if(active.begin(), active.end(),
                                [](const std::unique_ptr<Active>& a) { return a->finished; }),
                 active.end());
  }
}

absl::StatusOr<std::unique_ptr<GenerationScheduler::Active>> GenerationScheduler::Admit(
    std::shared_ptr<GenerationJob> job) {
  if (job->cancelled()) return Cancelled();
  const GenerationSpec& spec = job->spec();
  auto a = std::make_unique<Active>();
  a->prompt = spec.prompt_ids;
  if (a->prompt.empty()) {
    if (tokenizer_ == nullptr) {
      return absl::FailedPreconditionError("the model has no tokenizer: send token ids");
    }
    tokenizer::EncodeOptions enc;
    enc.add_special = true;
    enc.parse_special = spec.parse_special;
    COLIBRI_ASSIGN_OR_RETURN(a->prompt, tokenizer_->Encode(spec.text, enc));
  }
  if (a->prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (static_cast<int>(a->prompt.size()) > n_ctx_) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", a->prompt.size(),
                                                   " tokens, more than the context of ", n_ctx_));
  }
  a->options = spec.generation;
  a->options.decode_text = true;
  a->options.evaluate_every_token = false;  // only `run` reports logits
  a->options.all_prompt_logits = false;
  if (a->options.max_tokens < 0) return absl::InvalidArgumentError("max_tokens must be >= 0");
  if (a->options.top_logprobs < 0 || a->options.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs, "]"));
  }
  COLIBRI_ASSIGN_OR_RETURN(a->sampler,
                           sampling::Sampler::Create(spec.sampling, model_.config().n_vocab));
  COLIBRI_ASSIGN_OR_RETURN(Engine * engine, EngineFor(spec.path));
  a->engine = spec.path == ops::NumericPath::kExact ? 1 : 0;
  // At most `sessions` generations are active, so a slot is free.
  a->seq = static_cast<int>(std::find(engine->used.begin(), engine->used.end(), false) -
                            engine->used.begin());
  if (a->seq >= options_.sessions) return absl::InternalError("no free generation slot");
  engine->used[a->seq] = true;
  engine->session->Reset(a->seq);
  a->emitter = std::make_unique<TokenEmitter>(*a->sampler, tokenizer_, a->options);
  GenerationJob* raw = job.get();
  Active* self = a.get();
  a->last_token = job->submitted_;
  a->on_token = [this, raw, self](const GeneratedToken& token) {
    const absl::Time now = absl::Now();
    if (options_.metrics != nullptr) {
      const double seconds = absl::ToDoubleSeconds(now - self->last_token);
      if (self->generated == 0) {
        options_.metrics->OnFirstToken(seconds);
      } else {
        options_.metrics->OnInterToken(seconds);
      }
    }
    self->last_token = now;
    ++self->generated;
    if (raw->cancelled()) return false;
    return raw->OnToken(token) && !raw->cancelled();
  };
  a->outcome.prompt_tokens = static_cast<int>(a->prompt.size());
  a->outcome.result.finish_reason = FinishReason::kLength;
  a->prompt_start = Clock::now();
  a->job = std::move(job);
  return a;
}

void GenerationScheduler::Step(int e, std::vector<std::unique_ptr<Active>>& active) {
  Engine* engine = engines_[e].get();
  if (engine == nullptr) return;
  arch::Session& session = *engine->session;
  std::vector<arch::SequenceChunk> chunks;
  std::vector<Active*> members;
  int budget = session.n_batch();
  // Decoding generations first, one token each; when they outnumber the
  // budget, the first served rotates from step to step so that none starves.
  const size_t n_active = active.size();
  const size_t first = n_active > 0 ? engine->steps % n_active : 0;
  ++engine->steps;
  for (size_t i = 0; i < n_active && budget > 0; ++i) {
    Active* a = active[(first + i) % n_active].get();
    if (a->finished || a->engine != e) continue;
    if (a->prompt_done < static_cast<int>(a->prompt.size())) continue;
    chunks.push_back({a->seq, {&a->next, 1}, false, &a->logits});
    members.push_back(a);
    --budget;
  }
  for (auto& a : active) {  // then prompt chunks, oldest first
    if (a->finished || a->engine != e || budget == 0) continue;
    const int left = static_cast<int>(a->prompt.size()) - a->prompt_done;
    if (left == 0) continue;
    const int take = std::min(left, budget);
    chunks.push_back(
        {a->seq, absl::MakeConstSpan(a->prompt).subspan(a->prompt_done, take), false, &a->logits});
    members.push_back(a.get());
    budget -= take;
  }
  if (chunks.empty()) return;

  const RemoteBackendStats remote_before =
      engine->remote != nullptr ? engine->remote->stats() : RemoteBackendStats();
  const double wait_before = session.stats().expert_wait_seconds;
  const double outstanding_before = session.stats().expert_outstanding_seconds;
  const int64_t split_before = session.stats().split_batches;
  const arch::PredictorStats predictor_before = session.stats().predictor[0];
  const absl::Status status = session.EvaluateBatch(chunks);
  const RemoteBackendStats remote_after =
      engine->remote != nullptr ? engine->remote->stats() : RemoteBackendStats();
  const double wait = session.stats().expert_wait_seconds - wait_before;
  {
    const arch::PredictorStats& p = session.stats().predictor[0];
    absl::MutexLock lock(&mu_);
    overlap_.wait_seconds += wait;
    overlap_.outstanding_seconds += session.stats().expert_outstanding_seconds - outstanding_before;
    overlap_.split_batches += session.stats().split_batches - split_before;
    predictor_.layers += p.layers - predictor_before.layers;
    predictor_.routed += p.routed - predictor_before.routed;
    predictor_.predicted += p.predicted - predictor_before.predicted;
    predictor_.hits += p.hits - predictor_before.hits;
  }
  for (size_t j = 0; j < members.size(); ++j) {
    Active& a = *members[j];
    a.outcome.expert_wait_seconds += wait;
    a.outcome.expert_round_trips += remote_after.round_trips - remote_before.round_trips;
    a.outcome.expert_bytes_sent += remote_after.bytes_sent - remote_before.bytes_sent;
    a.outcome.fallback_routes += remote_after.fallback_routes - remote_before.fallback_routes;
    if (!status.ok()) {
      Finish(a, status);
      continue;
    }
    const int n_prompt = static_cast<int>(a.prompt.size());
    if (a.prompt_done < n_prompt) {
      a.prompt_done += static_cast<int>(chunks[j].tokens.size());
      if (a.prompt_done < n_prompt) continue;
      a.outcome.result.prompt_seconds =
          std::chrono::duration<double>(Clock::now() - a.prompt_start).count();
      for (int32_t id : a.prompt) a.sampler->Accept(id);
      a.generate_start = Clock::now();
      if (a.options.max_tokens == 0) {
        Complete(a);
        continue;
      }
    }
    Advance(a);
  }
}

void GenerationScheduler::Advance(Active& a) {
  GenerationResult& result = a.outcome.result;
  GeneratedToken token;
  const std::optional<FinishReason> end = a.emitter->Emit(a.logits, a.on_token, &result, &token);
  if (end.has_value()) {
    result.finish_reason = *end;
    Complete(a);
    return;
  }
  // As in Generate: the last token is sampled but not evaluated.
  if (static_cast<int>(result.tokens.size()) == a.options.max_tokens) {
    result.finish_reason = FinishReason::kLength;
    Complete(a);
    return;
  }
  if (engines_[a.engine]->session->n_past(a.seq) >= n_ctx_) {
    result.finish_reason = FinishReason::kContextFull;
    Complete(a);
    return;
  }
  a.next = token.id;
}

void GenerationScheduler::Complete(Active& a) {
  GenerationResult& result = a.outcome.result;
  result.generate_seconds = std::chrono::duration<double>(Clock::now() - a.generate_start).count();
  a.emitter->Finish(&result);
  if (result.finish_reason == FinishReason::kCancelled || a.job->cancelled()) {
    Finish(a, Cancelled());
    return;
  }
  Finish(a, std::move(a.outcome));
}

void GenerationScheduler::Finish(Active& a, absl::StatusOr<GenerationOutcome> outcome) {
  a.finished = true;
  engines_[a.engine]->used[a.seq] = false;
  engines_[a.engine]->session->Release(a.seq);  // its KV memory, until reused
  if (options_.metrics != nullptr) {
    options_.metrics->OnGenerationEnd(outcome.status(), a.outcome.prompt_tokens, a.generated);
  }
  // Off the running list before the front end hears of the end, so that a
  // client seeing its response also sees the generation gone.
  {
    absl::MutexLock lock(&mu_);
    running_.erase(std::find(running_.begin(), running_.end(), a.job));
  }
  a.job->OnFinish(std::move(outcome));
}

}  // namespace colibri::coordinator
