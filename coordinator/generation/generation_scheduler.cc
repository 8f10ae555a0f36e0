#include "coordinator/generation/generation_scheduler.h"

#include <algorithm>
#include <future>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/cluster/cluster_experts.h"
#include "coordinator/cluster/remote_expert_backend.h"
#include "coordinator/generation/generation_scheduler_state.h"
#include "coordinator/generation/serve_metrics.h"
#include "coordinator/generation/step_timeline.h"
#include "coordinator/generation/token_constraint.h"
#include "model/moe/local_expert_backend.h"
#include "model/speculative/draft_planner.h"
#include "model/speculative/mtp_drafter.h"
#include "model/speculative/ngram_drafter.h"

namespace colibri::coordinator {
namespace {

absl::Status ShuttingDown() { return absl::UnavailableError("the coordinator is shutting down"); }
absl::Status Cancelled() { return absl::CancelledError("generation cancelled by the client"); }

// Adds the change of every counter from `before` to `after` to *into.
void AddDelta(const arch::SessionStats& after, const arch::SessionStats& before,
              arch::SessionStats* into) {
  into->tokens_evaluated += after.tokens_evaluated - before.tokens_evaluated;
  into->evaluate_calls += after.evaluate_calls - before.evaluate_calls;
  into->expert_wait_seconds += after.expert_wait_seconds - before.expert_wait_seconds;
  into->expert_outstanding_seconds +=
      after.expert_outstanding_seconds - before.expert_outstanding_seconds;
  into->split_batches += after.split_batches - before.split_batches;
  into->predict_seconds += after.predict_seconds - before.predict_seconds;
  for (int d = 0; d < 2; ++d) {
    into->predictor[d].layers += after.predictor[d].layers - before.predictor[d].layers;
    into->predictor[d].routed += after.predictor[d].routed - before.predictor[d].routed;
    into->predictor[d].predicted += after.predictor[d].predicted - before.predictor[d].predicted;
    into->predictor[d].hits += after.predictor[d].hits - before.predictor[d].hits;
  }
  if (into->layers.size() < after.layers.size()) into->layers.resize(after.layers.size());
  for (size_t l = 0; l < after.layers.size(); ++l) {
    const arch::LayerStats none;
    const arch::LayerStats& b = l < before.layers.size() ? before.layers[l] : none;
    const arch::LayerStats& a = after.layers[l];
    arch::LayerStats& i = into->layers[l];
    i.compute_seconds += a.compute_seconds - b.compute_seconds;
    i.expert_wait_seconds += a.expert_wait_seconds - b.expert_wait_seconds;
    i.predictor.layers += a.predictor.layers - b.predictor.layers;
    i.predictor.routed += a.predictor.routed - b.predictor.routed;
    i.predictor.predicted += a.predictor.predicted - b.predictor.predicted;
    i.predictor.hits += a.predictor.hits - b.predictor.hits;
  }
}

}  // namespace

GenerationScheduler::GenerationScheduler(const Options& options, const arch::Model& model,
                                         const tokenizer::Tokenizer* tokenizer,
                                         ClusterExperts* cluster, ThreadPool* pool)
    : options_(options), model_(model), tokenizer_(tokenizer), cluster_(cluster), pool_(pool) {
  if (options.prefix_cache_bytes > 0) {
    PrefixCache::Options cache;
    cache.block_tokens = options.prefix_block_tokens;
    cache.capacity_bytes = options.prefix_cache_bytes;
    prefix_cache_ = std::make_unique<PrefixCache>(cache);
  }
}

GenerationScheduler::~GenerationScheduler() { Stop(); }

absl::StatusOr<std::unique_ptr<GenerationScheduler>> GenerationScheduler::Create(
    const Options& options, const arch::Model& model, const tokenizer::Tokenizer* tokenizer,
    ClusterExperts* cluster, ThreadPool* pool) {
  if (options.sessions < 1) return absl::InvalidArgumentError("--sessions must be >= 1");
  if (options.prefix_block_tokens < 1) {
    return absl::InvalidArgumentError("the prefix cache's block_tokens must be >= 1");
  }
  const int draft_max = options.speculation.draft_max;
  if (draft_max < 1 || draft_max > kMaxDraftTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("--draft-max ", draft_max, " is outside [1, ", kMaxDraftTokens, "]"));
  }
  std::unique_ptr<GenerationScheduler> scheduler(
      new GenerationScheduler(options, model, tokenizer, cluster, pool));
  COLIBRI_ASSIGN_OR_RETURN(Engine * first, scheduler->EngineFor(options.first_path));
  scheduler->n_ctx_ = first->session->n_ctx();
  if (!options.prefix_cache_dir.empty()) COLIBRI_RETURN_IF_ERROR(scheduler->OpenPrefixDisk(*first));
  if (options.build_token_trie_at_start && tokenizer != nullptr) {
    scheduler->trie_building_ = std::async(std::launch::async, [tokenizer] {
                         return std::shared_ptr<const grammar::TokenTrie>(
                             grammar::TokenTrie::Build(*tokenizer));
                       }).share();
  }
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

std::vector<GenerationScheduler::HalvesDecision> GenerationScheduler::pipeline_halves() const {
  absl::MutexLock lock(&mu_);
  std::vector<HalvesDecision> all = halves_[0];
  all.insert(all.end(), halves_[1].begin(), halves_[1].end());
  return all;
}

GrammarCache::Stats GenerationScheduler::grammar_cache() const {
  absl::MutexLock lock(&mu_);
  return grammar_stats_;
}

absl::StatusOr<GenerationScheduler::Engine*> GenerationScheduler::EngineFor(ops::NumericPath path) {
  std::unique_ptr<Engine>& engine = engines_[path == ops::NumericPath::kExact ? 1 : 0];
  if (engine != nullptr) return engine.get();
  auto e = std::make_unique<Engine>();
  e->path = path;
  if (cluster_ != nullptr) {
    e->remote = cluster_->Backend(path);
    e->backend = e->remote;
  } else {
    e->local = std::make_unique<moe::LocalExpertBackend>(&model_.experts(),
                                                         model_.config().n_expert, path, pool_);
    e->backend = e->local.get();
  }
  if (!options_.routing_observers.empty()) {
    e->observed =
        std::make_unique<moe::ObservedExpertBackend>(e->backend, options_.routing_observers);
    e->backend = e->observed.get();
  }
  arch::SessionOptions session_options;
  session_options.n_ctx = options_.ctx_size;
  session_options.n_batch = options_.batch_size;
  session_options.path = path;
  session_options.prefetch = options_.prefetch;
  session_options.n_seq = options_.sessions;
  session_options.pipeline_halves = options_.pipeline_halves;
  session_options.kv_type = options_.kv_type;
  COLIBRI_ASSIGN_OR_RETURN(e->session,
                           arch::Session::Create(model_, e->backend, pool_, session_options));
  e->used.assign(options_.sessions, false);
  speculative::DraftPlannerOptions planner;
  planner.max_draft = options_.speculation.draft_max;
  planner.adaptive = options_.speculation.adaptive;
  e->planner = std::make_unique<speculative::DraftPlanner>(planner);
  if (options_.speculation.draft == DraftKind::kMtp && !options_.speculation.make_drafter) {
    const arch::ModelConfig& config = model_.config();
    if (config.n_nextn_layer == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--draft mtp: ", model_.file().path(), " has no NextN/MTP block (",
                       config.arch, ".nextn_predict_layers is absent or 0); use --draft ngram"));
    }
    // Its routed experts run here, also with nodes (as in `run`).
    speculative::MtpOptions mtp_options;
    mtp_options.n_ctx = e->session->n_ctx();
    mtp_options.n_batch = options_.batch_size;
    mtp_options.n_seq = options_.sessions;
    mtp_options.path = path;
    COLIBRI_ASSIGN_OR_RETURN(
        e->mtp, speculative::MtpModule::Open(model_.file().path(), pool_, mtp_options));
  }
  if (options_.pipeline_halves == arch::PipelineHalves::kAuto &&
      e->backend->SecondChannel() != nullptr) {
    e->halves = std::make_unique<HalvesChooser>();
  }
  e->reuse = prefix_cache_ != nullptr;
  if (e->reuse && e->session->kv_cache().has_window_layers()) {
    e->reuse = false;
    if (options_.log != nullptr) {
      *options_.log << "serve: prefix reuse is off: " << model_.config().arch
                    << " has sliding-window layers, whose KV ring keeps only the last "
                    << model_.config().sliding_window << " positions" << std::endl;
    }
  } else if (e->reuse && e->mtp != nullptr) {
    e->reuse = false;
    if (options_.log != nullptr) {
      *options_.log << "serve: prefix reuse is off with --draft mtp (the NextN block needs the "
                       "hidden state of every prompt position)"
                    << std::endl;
    }
  }
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
      if (options_.metrics != nullptr) options_.metrics->OnGenerationEnd(a.status(), 0, 0, 0);
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
  if (a->options.max_tokens < 0) return absl::InvalidArgumentError("max_tokens must be >= 0");
  if (a->options.top_logprobs < 0 || a->options.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs, "]"));
  }
  COLIBRI_ASSIGN_OR_RETURN(a->sampler,
                           sampling::Sampler::Create(spec.sampling, model_.config().n_vocab));
  if (spec.constraint != nullptr) {
    if (tokenizer_ == nullptr) {
      return absl::FailedPreconditionError(
          "constrained decoding needs the model's tokenizer, and this model has none");
    }
    if (trie_ == nullptr) {
      // Built in the background since Create (waited for here only if it is
      // not done yet), or now.
      trie_ = trie_building_.valid() ? trie_building_.get()
                                     : std::shared_ptr<const grammar::TokenTrie>(
                                           grammar::TokenTrie::Build(*tokenizer_));
      grammars_ = std::make_unique<GrammarCache>(trie_);
    }
    a->constraint = std::make_unique<TokenConstraint>(grammars_->For(spec.constraint), tokenizer_);
    absl::MutexLock lock(&mu_);
    grammar_stats_ = grammars_->stats();
  }
  COLIBRI_ASSIGN_OR_RETURN(Engine * engine, EngineFor(spec.path));
  a->engine = spec.path == ops::NumericPath::kExact ? 1 : 0;
  // At most `sessions` generations are active, so a slot is free.
  a->seq = static_cast<int>(std::find(engine->used.begin(), engine->used.end(), false) -
                            engine->used.begin());
  if (a->seq >= options_.sessions) return absl::InternalError("no free generation slot");
  engine->used[a->seq] = true;
  engine->session->Reset(a->seq);
  ReusePrefix(*engine, *a);
  a->emitter = std::make_unique<TokenEmitter>(*a->sampler, tokenizer_, a->options);
  const SpeculationOptions& speculation = options_.speculation;
  if (a->constraint != nullptr) {
    if (speculation.grammar_drafts) {
      a->drafter = std::make_unique<ForcedTokenDrafter>(a->constraint.get());
    }
  } else if (speculation.make_drafter) {
    a->drafter = speculation.make_drafter();
  } else if (engine->mtp != nullptr) {
    auto drafter = std::make_unique<speculative::MtpDrafter>(*engine->mtp, a->seq);
    a->mtp = drafter.get();
    a->drafter = std::move(drafter);
  } else if (speculation.draft == DraftKind::kNgram) {
    a->drafter = std::make_unique<speculative::NgramDrafter>();
  }
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
  std::vector<Active*> decoding;
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
    a->chunk.assign(1, a->next);
    decoding.push_back(a);
    --budget;
  }
  bool prompt_waiting = false;
  for (const auto& a : active) {
    prompt_waiting |=
        !a->finished && a->engine == e && a->prompt_done < static_cast<int>(a->prompt.size());
  }
  // Then drafts: at most half of what is left while a prompt waits, so that
  // prompts keep moving.
  double draft_seconds = 0;
  if (!decoding.empty() && budget > 0) {
    draft_seconds = PlanDrafts(e, decoding, prompt_waiting ? budget / 2 : budget);
  }
  std::vector<arch::SequenceChunk> chunks;
  std::vector<Active*> members;
  for (Active* a : decoding) {
    const bool verify = a->chunk.size() > 1;
    chunks.push_back(
        {a->seq, a->chunk, verify, &a->logits, a->mtp != nullptr ? &a->hidden : nullptr});
    members.push_back(a);
    budget -= static_cast<int>(a->chunk.size()) - 1;
  }
  for (auto& a : active) {  // then prompt chunks, oldest first
    if (a->finished || a->engine != e || budget == 0) continue;
    const int left = static_cast<int>(a->prompt.size()) - a->prompt_done;
    if (left == 0) continue;
    const int take = std::min(left, budget);
    // Only the chunk that ends the prompt needs logits, unless every prompt
    // position's are reported.
    const bool all = a->options.all_prompt_logits;
    chunks.push_back({a->seq, absl::MakeConstSpan(a->prompt).subspan(a->prompt_done, take), all,
                      take == left || all ? &a->logits : nullptr,
                      a->mtp != nullptr ? &a->hidden : nullptr});
    members.push_back(a.get());
    budget -= take;
  }
  if (chunks.empty()) return;

  const RemoteBackendStats remote_before =
      engine->remote != nullptr ? engine->remote->stats() : RemoteBackendStats();
  const arch::SessionStats before = session.stats();
  const int tokens = session.n_batch() - budget;
  const bool choose_halves = engine->halves != nullptr && tokens >= 2;
  if (choose_halves) {
    session.set_pipeline_halves(engine->halves->Split(tokens) ? arch::PipelineHalves::kOn
                                                              : arch::PipelineHalves::kOff);
  }
  const auto step_start = Clock::now();
  const absl::Status status = session.EvaluateBatch(chunks);
  const double step_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
  // The drafters' time counts in the step's cost: drafts that need a forward
  // of the NextN block cost that forward too. Only decode steps are the
  // plan's evidence: a step with a prompt chunk costs what a prompt costs
  // (attention over new rows, every expert a long chunk routes to), and one
  // measured at a prompt's size would stand in for every longer decode step.
  const bool decode_only = members.size() == decoding.size();
  if (status.ok() && decode_only) {
    engine->planner->Observe(tokens, draft_seconds + step_seconds);
  }
  if (choose_halves && status.ok()) {
    ObserveHalves(e, tokens, session.stats().split_batches > before.split_batches, step_seconds);
  }
  const RemoteBackendStats remote_after =
      engine->remote != nullptr ? engine->remote->stats() : RemoteBackendStats();
  arch::SessionStats delta;
  AddDelta(session.stats(), before, &delta);
  if (options_.timeline != nullptr) {
    StepRecord record;
    record.end = absl::Now();
    record.seconds = step_seconds;
    record.tokens = tokens;
    record.generations = static_cast<int>(members.size());
    record.prompt = !decode_only;
    record.expert_wait_seconds = delta.expert_wait_seconds;
    record.node_compute_seconds = 1e-6 * static_cast<double>(remote_after.slowest_compute_micros -
                                                             remote_before.slowest_compute_micros);
    record.node_disk_seconds = 1e-6 * static_cast<double>(remote_after.slowest_disk_micros -
                                                          remote_before.slowest_disk_micros);
    options_.timeline->Add(record);
  }
  {
    absl::MutexLock lock(&mu_);
    overlap_.wait_seconds += delta.expert_wait_seconds;
    overlap_.outstanding_seconds += delta.expert_outstanding_seconds;
    overlap_.split_batches += delta.split_batches;
    const arch::PredictorStats& p = delta.predictor[0];
    predictor_.layers += p.layers;
    predictor_.routed += p.routed;
    predictor_.predicted += p.predicted;
    predictor_.hits += p.hits;
  }
  for (size_t j = 0; j < members.size(); ++j) {
    Active& a = *members[j];
    AddDelta(session.stats(), before, &a.outcome.steps);
    a.outcome.expert_round_trips += remote_after.round_trips - remote_before.round_trips;
    a.outcome.expert_bytes_sent += remote_after.bytes_sent - remote_before.bytes_sent;
    a.outcome.fallback_routes += remote_after.fallback_routes - remote_before.fallback_routes;
    const int rows = static_cast<int>(chunks[j].tokens.size());
    if (j < decoding.size()) {
      SpeculationStats& s = a.outcome.result.speculation;
      if (rows > 1) {
        ++s.verify_steps;
        s.drafted += rows - 1;
        s.verify_seconds += draft_seconds + step_seconds;
      } else {
        ++s.plain_steps;
        s.plain_seconds += step_seconds;
      }
    }
    if (!status.ok()) {
      Finish(a, status);
      continue;
    }
    if (a.mtp != nullptr) {
      a.mtp->OnHiddenStates(session.n_past(a.seq) - rows, rows, a.hidden.data());
    }
    if (j < decoding.size()) {
      Advance(a, rows, /*fed=*/true);
    } else {
      AfterPromptChunk(a, rows);
    }
  }
}

void GenerationScheduler::AfterPromptChunk(Active& a, int chunk_tokens) {
  a.prompt_done += chunk_tokens;
  const bool done = a.prompt_done == static_cast<int>(a.prompt.size());
  if (a.options.all_prompt_logits || done) {
    const absl::Status reported = a.job->OnLogits(a.logits);
    if (!reported.ok()) {
      Finish(a, reported);
      return;
    }
  }
  if (!done) return;
  // The first token is sampled from the last position's row.
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  a.logits.erase(a.logits.begin(), a.logits.end() - static_cast<ptrdiff_t>(n_vocab));
  a.outcome.result.prompt_seconds =
      std::chrono::duration<double>(Clock::now() - a.prompt_start).count();
  a.outcome.prompt_steps = a.outcome.steps;
  for (int32_t id : a.prompt) a.sampler->Accept(id);
  if (a.drafter != nullptr) a.drafter->Accept(a.prompt);
  a.job->OnPromptDone();
  a.generate_start = a.token_clock = Clock::now();
  if (a.options.max_tokens == 0) {
    Complete(a);
    return;
  }
  Advance(a, 1, /*fed=*/false);
}

void GenerationScheduler::ObserveHalves(int e, int tokens, bool split, double seconds) {
  HalvesChooser& chooser = *engines_[e]->halves;
  const std::optional<HalvesChooser::Change> change = chooser.Observe(tokens, split, seconds);
  if (change.has_value() && options_.log != nullptr) {
    *options_.log << "serve: pipeline halves (" << (e == 1 ? "exact" : "fast")
                  << " path): " << change->Describe() << std::endl;
  }
  std::vector<HalvesDecision> decisions;
  for (const HalvesChooser::Octave& octave : chooser.octaves()) {
    decisions.push_back({e == 1 ? ops::NumericPath::kExact : ops::NumericPath::kFast, octave});
  }
  absl::MutexLock lock(&mu_);
  halves_[e] = std::move(decisions);
}

double GenerationScheduler::PlanDrafts(int e, absl::Span<Active* const> decoding, int budget) {
  Engine& engine = *engines_[e];
  const arch::Session& session = *engine.session;
  // Each generation's guess, as long as it could use: within draft_max, the
  // tokens it may still generate (the last one sampled is never fed), its
  // context and what its cache can drop again.
  std::vector<std::vector<int32_t>> guesses(decoding.size());
  std::vector<speculative::DraftCandidate> candidates(decoding.size());
  std::vector<int> undrafted(decoding.size());
  for (size_t i = 0; i < decoding.size(); ++i) {
    Active& a = *decoding[i];
    undrafted[i] = a.undrafted_steps;
    if (a.drafter == nullptr || a.final_feed.has_value()) continue;
    const int generated = static_cast<int>(a.outcome.result.tokens.size());
    const int most =
        std::min({options_.speculation.draft_max, a.options.max_tokens - generated - 1,
                  session.n_ctx() - session.n_past(a.seq) - 1, session.max_truncate()});
    if (most <= 0) continue;
    // A costly drafter (a model) is asked once the plan knows how many
    // drafts it will evaluate; until then it is taken to fill its cap.
    if (!a.drafter->ProposeIsCostly()) a.drafter->Propose(most, &guesses[i]);
    const int offered = a.drafter->ProposeIsCostly() ? most : static_cast<int>(guesses[i].size());
    candidates[i] = {a.acceptance.rate(), offered};
  }
  const std::vector<int> plan = engine.planner->Plan(candidates, absl::MakeSpan(undrafted), budget);
  double draft_seconds = 0;
  for (size_t i = 0; i < decoding.size(); ++i) {
    Active& a = *decoding[i];
    a.undrafted_steps = undrafted[i];
    int k = plan[i];
    if (k <= 0) continue;
    if (a.drafter->ProposeIsCostly()) {
      const auto start = Clock::now();
      a.drafter->Propose(k, &guesses[i]);
      draft_seconds += std::chrono::duration<double>(Clock::now() - start).count();
      k = std::min(k, static_cast<int>(guesses[i].size()));
      if (k == 0) continue;
    }
    a.chunk.insert(a.chunk.end(), guesses[i].begin(), guesses[i].begin() + k);
    a.undrafted_steps = 0;
  }
  return draft_seconds;
}

void GenerationScheduler::Advance(Active& a, int rows, bool fed) {
  GenerationResult& result = a.outcome.result;
  arch::Session& session = *engines_[a.engine]->session;
  const size_t n_vocab = static_cast<size_t>(model_.config().n_vocab);
  const int drafted = rows - 1;
  // Position of the chunk's first token; drafts follow it.
  const int base = session.n_past(a.seq) - rows;
  int accepted = 0;
  bool rejected = false;
  std::optional<FinishReason> end;
  for (int r = 0; r < rows; ++r) {
    const absl::Span<const float> row =
        absl::MakeConstSpan(a.logits).subspan(static_cast<size_t>(r) * n_vocab, n_vocab);
    if (fed) {
      const absl::Status reported = a.job->OnLogits(row);
      if (!reported.ok()) {
        Finish(a, reported);
        return;
      }
      const auto now = Clock::now();
      result.token_seconds.push_back(std::chrono::duration<float>(now - a.token_clock).count());
      a.token_clock = now;
    }
    if (a.final_feed.has_value()) {  // its logits were the last ones wanted
      end = a.final_feed;
      break;
    }
    GeneratedToken token;
    absl::Span<const float> sample_row = row;
    if (a.constraint != nullptr) {
      absl::StatusOr<absl::Span<const float>> masked = a.constraint->Apply(row);
      if (!masked.ok()) {
        Finish(a, masked.status());
        return;
      }
      sample_row = *masked;
    }
    end = a.emitter->Emit(sample_row, a.on_token, &result, &token);
    if (a.constraint != nullptr) {
      absl::Status accepted = a.constraint->Accept(token.id);
      absl::StatusOr<bool> complete = false;
      if (accepted.ok()) complete = a.constraint->Complete();
      if (!complete.ok()) accepted = complete.status();
      if (!accepted.ok()) {
        Finish(a, accepted);
        return;
      }
      if (*complete && (!end.has_value() || *end == FinishReason::kEndOfGeneration)) {
        end = FinishReason::kStop;
      }
    }
    if (a.drafter != nullptr) a.drafter->Accept({&token.id, 1});
    if (!end.has_value() && static_cast<int>(result.tokens.size()) == a.options.max_tokens) {
      end = FinishReason::kLength;
    }
    if (end.has_value()) {
      // The last token is sampled but not evaluated, unless its logits (or
      // an end of generation's) are wanted.
      if (a.options.evaluate_every_token &&
          (*end == FinishReason::kLength || *end == FinishReason::kEndOfGeneration)) {
        a.final_feed = end;
        a.next = token.id;
        end.reset();
      }
      break;
    }
    if (r < drafted && token.id == a.chunk[r + 1]) {
      ++accepted;  // the sampled token was drafted: its logits are the next row
      continue;
    }
    rejected = r < drafted;
    a.next = token.id;
    break;
  }
  if (drafted > 0) {
    result.speculation.accepted += accepted;
    a.acceptance.Observe(accepted, rejected);
    if (options_.metrics != nullptr) options_.metrics->OnDrafts(accepted, drafted - accepted);
  }
  if (end.has_value()) {
    result.finish_reason = *end;
    Complete(a);
    return;
  }
  if (drafted > 0) {
    // Keep the chunk's first token and the accepted drafts.
    const int keep = base + 1 + accepted;
    session.Truncate(a.seq, keep);
    if (session.n_past(a.seq) != keep) {
      Finish(a, absl::InternalError(absl::StrCat("speculative decoding: truncating sequence ",
                                                 a.seq, " to ", keep, " positions left ",
                                                 session.n_past(a.seq))));
      return;
    }
  }
  if (session.n_past(a.seq) >= n_ctx_) {
    result.finish_reason = FinishReason::kContextFull;
    Complete(a);
  }
}

void GenerationScheduler::Complete(Active& a) {
  GenerationResult& result = a.outcome.result;
  if (a.constraint != nullptr) a.outcome.grammar_masks_computed = a.constraint->masks_computed();
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
  a.mtp = nullptr;
  a.drafter.reset();  // an MTP drafter frees its slot of the NextN block
  Engine& engine = *engines_[a.engine];
  if (outcome.ok() && engine.reuse) CachePrefix(engine, a, outcome->result.tokens);
  engine.used[a.seq] = false;
  engine.session->Release(a.seq);  // its KV memory, until reused
  if (options_.metrics != nullptr) {
    options_.metrics->OnGenerationEnd(outcome.status(), a.outcome.prompt_tokens,
                                      a.outcome.cached_prompt_tokens, a.generated);
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
