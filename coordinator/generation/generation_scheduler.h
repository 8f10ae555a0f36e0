// The generation core of `run` and `serve`, shared by every front end (the
// `run` command, the gRPC Inference service and the OpenAI-compatible HTTP
// API): continuous batching of up to `sessions` generations, and a FIFO queue
// of jobs in front of them. `run` is a client with one session.
//
// A front end describes a request as a GenerationSpec, wraps it in its own
// GenerationJob (which receives the tokens, optionally the logits, and the
// outcome) and submits it. One stepping thread runs every active generation
// together: per numeric path, one batched arch::Session holds a KV cache slot
// per generation, and each step is one forward pass (Session::EvaluateBatch)
// over the next token of every decoding generation plus prompt chunks of new
// ones, within batch_size tokens (decoding generations first, so that a long
// prompt does not stall them), so each MoE layer costs one round trip per
// involved node for all of them. Jobs join and leave between steps; a
// cancelled job leaves (and frees its slot) at the next step. Sampling, stop
// strings and logprobs are coordinator::TokenEmitter's, and the kernels are
// batch-invariant: a generation's tokens and logits are those it would have
// alone.
//
// Speculative decoding (Options::speculation): a decoding generation's chunk
// is its next token and up to draft_max tokens its drafter guesses follow
// it, so the step verifies every generation's drafts in the same forward
// pass. Each generation then samples from its rows in order with its own
// sampler (same RNG stream, penalties, stop strings, end of generation and
// max tokens as plain decoding), accepts drafts while they equal the sampled
// tokens, and truncates its KV slot to what it accepted; its tokens are
// reported as they are accepted. The drafts of a step are planned together by
// the session's speculative::DraftPlanner from each generation's acceptance
// and the step times measured on this run per token count (a longer step
// reads a wider union of experts), after the decoding tokens and before
// prompt chunks in the step's budget (at most half of what is left while a
// prompt waits). With --draft mtp each generation drafts with the model's
// NextN block (speculative::MtpDrafter, one block sequence per slot, freed
// with it), fed the hidden states of that generation's rows of every step;
// the block runs on this thread before the step, and its time counts in the
// step's cost. The job's callbacks run on the stepping thread: they must not
// block (queue the output for the client; never wait for it).
//
// Prefix reuse (Options::prefix_cache_bytes): when a generation ends
// successfully, the KV rows of its prompt and generated tokens go to a
// PrefixCache shared by every generation; a new one copies the rows of its
// longest cached prefix (whole blocks, leaving at least one prompt token to
// evaluate for its logits) into its slot and evaluates only the rest. The
// kernels are batch-invariant, so its tokens and logits are those it would
// have without reuse. Off for models with sliding-window layers (their ring
// does not keep old positions; logged once), with --draft mtp (the NextN
// block needs every position's hidden state) and for a generation that
// reports every prompt position's logits.
//
// With Options::prefix_cache_dir the cache has a disk tier
// (PrefixDiskStore): the blocks a generation caches are queued to a writer
// thread that writes them there (never on the stepping thread), and a new
// generation whose prefix goes on past the blocks in RAM continues it with
// the blocks on disk (read on the stepping thread when it is admitted; then
// cached in RAM too), also after a restart or a crash of the process.
//
// Two pipelined half-batches (Options::pipeline_halves): with kAuto and
// expert nodes, each step of at least two tokens (several generations, or a
// prompt chunk split at its middle) runs split or unsplit
// as a HalvesChooser decides from the step times measured on this run (per
// numeric path); its decisions are logged once per change and reported by
// pipeline_halves(). kOn and kOff are the session's fixed rules.
//
// Constrained decoding (GenerationSpec::constraint): before each sample the
// logits of the tokens the grammar refuses next are set to -inf (so
// logprobs are those of the masked distribution), the sampled token advances
// the grammar, and the generation ends with FinishReason::kStop once its text
// is complete and only an end-of-generation token could follow (or the model
// sampled one where the text could end). The vocabulary's TokenTrie is built
// on a thread of its own when the scheduler starts (Options::
// build_token_trie_at_start), else on the stepping thread, when the first
// constrained generation is admitted (which waits for a background build
// only if it is not done yet), and shared by every later one. The
// generations of one grammar (equal
// automata, also when each request compiled its own) share one matcher
// (GrammarCache, token_constraint.h): each mask is computed once for all of
// them; the last 8 grammars are kept. With SpeculationOptions::grammar_drafts
// a constrained generation drafts the tokens its grammar forces next (keys,
// punctuation, enum tails: spelled as a generation of the grammar last
// sampled them there, else as the tokenizer spells them; other drafters are
// not used for it), planned and verified as any drafts: the
// grammar advances by the sampled tokens only, so its output is the same
// with or without them. Unconstrained generations sample from the model's
// logits unchanged.
//
// Thread-safety: Submit, Cancel (on a job), n_ctx, active_generations, queued
// and predictor are thread-safe; BeginShutdown and Stop are called by the
// owner.
#ifndef COLIBRI_COORDINATOR_GENERATION_GENERATION_SCHEDULER_H_
#define COLIBRI_COORDINATOR_GENERATION_GENERATION_SCHEDULER_H_

#include <atomic>
#include <future>
#include <cstdint>
#include <deque>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/thread_pool.h"
#include "coordinator/generation/generation.h"
#include "coordinator/generation/halves_chooser.h"
#include "coordinator/generation/prefix_cache.h"
#include "coordinator/generation/prefix_disk_store.h"
#include "coordinator/generation/speculation_options.h"
#include "coordinator/generation/token_constraint.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/grammar/byte_nfa.h"
#include "model/grammar/token_trie.h"
#include "model/moe/routing_observer.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {

class ClusterExperts;  // cluster_experts.h
class ServeMetrics;    // serve_metrics.h
class StepTimeline;    // step_timeline.h

// One request, as the scheduler runs it.
struct GenerationSpec {
  // The prompt's token ids, fed exactly as given; when empty, `text` is
  // tokenized on the worker. Default: none.
  std::vector<int32_t> prompt_ids;
  // The prompt text, tokenized with BOS/EOS as the vocabulary asks.
  // Default: "".
  std::string text;
  // Recognise special-token text (e.g. "<|im_start|>") in `text`.
  // Default: false.
  bool parse_special = false;
  // Numeric path of the session used. Default: fast.
  ops::NumericPath path = ops::NumericPath::kFast;
  // Sampling, validated by the front end (the sampler's errors are returned
  // otherwise). Default: greedy.
  sampling::SamplingOptions sampling;
  // Limits, stop strings, logprobs, text decoding and logits reporting.
  GenerationOptions generation;
  // Constrained decoding: the generated text is a word of this grammar
  // (see "Constrained decoding" above). Needs the scheduler's tokenizer.
  // Default: null (unconstrained).
  std::shared_ptr<const grammar::CompiledGrammar> constraint;
};

// What a finished generation reports besides its tokens.
// The session and expert counters are those of the forward steps the
// generation took part in, which it shared with the generations batched with
// it.
struct GenerationOutcome {
  GenerationResult result;
  int prompt_tokens = 0;
  // Prompt tokens whose KV rows came from the prefix cache (not evaluated).
  int cached_prompt_tokens = 0;
  // The session's counters over the generation's steps, and over those up to
  // the end of its prompt (steps - prompt_steps: its decode).
  arch::SessionStats steps;
  arch::SessionStats prompt_steps;
  int64_t expert_round_trips = 0;  // 0 with local experts
  int64_t expert_bytes_sent = 0;
  int64_t fallback_routes = 0;
  // Constrained decoding: the grammar masks this generation computed (the
  // others were already cached by generations of the same grammar).
  int64_t grammar_masks_computed = 0;
};

// A submitted request and where its output goes; a front end derives from it.
// The scheduler calls OnToken for every token and then OnFinish exactly once,
// both on the stepping thread (OnFinish may also come from BeginShutdown's
// caller for a job still queued), never concurrently.
class GenerationJob {
 public:
  explicit GenerationJob(GenerationSpec spec) : spec_(std::move(spec)) {}
  virtual ~GenerationJob() = default;
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  const GenerationSpec& spec() const { return spec_; }
  // Stops the generation at its next token (or before it starts); OnFinish
  // then gets CANCELLED. Thread-safe.
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // A generated token; false cancels the generation.
  virtual bool OnToken(const GeneratedToken& token) = 0;
  // Each evaluated row of logits, in order: first the prompt's
  // ([n][n_vocab] per prompt chunk with all_prompt_logits, else [n_vocab]
  // for its last position), then one [n_vocab] per token fed back (with
  // evaluate_every_token also the last one and an end-of-generation one). A
  // failure ends the generation with it. Default: ignores them.
  virtual absl::Status OnLogits(absl::Span<const float> rows) {
    (void)rows;
    return absl::OkStatus();
  }
  // Once the prompt is evaluated, before the first token is sampled.
  // Default: nothing.
  virtual void OnPromptDone() {}
  // The outcome: CANCELLED after Cancel, UNAVAILABLE when the scheduler shut
  // down before the job ran, InvalidArgument for a prompt that does not fit,
  // or the session's and backend's errors.
  virtual void OnFinish(absl::StatusOr<GenerationOutcome> outcome) = 0;

 private:
  friend class GenerationScheduler;
  const GenerationSpec spec_;
  std::atomic<bool> cancelled_{false};
  absl::Time submitted_;  // set by Submit, read by the worker after
};

class GenerationScheduler {
 public:
  struct Options {
    // Concurrent generations: the KV cache slots of the batched session of
    // each numeric path; more jobs queue. Default: 1.
    int sessions = 1;
    // The numeric path whose session Create makes (so that its errors show
    // there); the other path's is made when a job first asks for it.
    // Default: kFast.
    ops::NumericPath first_path = ops::NumericPath::kFast;
    // Context size of every generation. Default: 0, meaning min(model, 4096).
    int ctx_size = 0;
    // Tokens per forward step: one per decoding generation, the rest for
    // prompt chunks. Default: 512.
    int batch_size = 512;
    // Next-layer expert prediction of every session. Default: off.
    arch::PrefetchOptions prefetch;
    // Pipelining of two half-batches in every step: kAuto decides from
    // measured step times (see above), kOn / kOff as arch::PipelineHalves.
    // Default: kAuto.
    arch::PipelineHalves pipeline_halves = arch::PipelineHalves::kAuto;
    // Element type of every session's KV cache. Default: kF32.
    arch::KvType kv_type = arch::KvType::kF32;
    // Where the kAuto decisions are logged, a line per change; borrowed.
    // Default: null (not logged).
    std::ostream* log = nullptr;
    // Speculative decoding of every generation (draft kNone: plain; kMtp
    // needs a NextN block in the model's file, else Create fails with
    // InvalidArgument). Default: plain.
    SpeculationOptions speculation;
    // Receives the token timings and outcomes; borrowed, must outlive the
    // scheduler. Default: null (none recorded).
    ServeMetrics* metrics = nullptr;
    // Bytes of KV rows the prefix cache keeps for reuse (see above); 0 turns
    // reuse off. Default: 0.
    int64_t prefix_cache_bytes = 0;
    // Tokens per prefix cache block: the granularity of reuse. Default: 16.
    int prefix_block_tokens = 16;
    // Directory of the prefix cache's disk tier (see above); unused when
    // reuse is off. Default: "" (no disk tier).
    std::string prefix_cache_dir;
    // Build the vocabulary's TokenTrie (constrained decoding) in the
    // background from Create on, so the first constrained generation does
    // not hold every generation while it is built. Default: false (built
    // when first needed).
    bool build_token_trie_at_start = false;
    // Bytes of files the disk tier keeps (PrefixDiskStore::Options::
    // capacity_bytes; -1: min(4 GiB, half the directory's free space); 0:
    // no disk tier). Default: -1.
    int64_t prefix_cache_disk_bytes = -1;
    // Receives every forward step's timing; borrowed, must outlive the
    // scheduler. Default: null.
    StepTimeline* timeline = nullptr;
    // Receive every forward step's routing and prediction hints as they
    // reach the expert backend (model/moe/routing_observer.h), on the
    // stepping threads; borrowed, must outlive the scheduler. Default: none.
    std::vector<moe::RoutingObserver*> routing_observers;
  };

  // model, tokenizer (null: id prompts only), cluster (null: experts computed
  // here) and pool are borrowed and must outlive the scheduler. Creates the
  // session of first_path, so session errors show here; InvalidArgument for
  // sessions < 1 or draft_max outside [1, kMaxDraftTokens]; the disk tier's
  // errors (PrefixDiskStore::Open).
  static absl::StatusOr<std::unique_ptr<GenerationScheduler>> Create(
      const Options& options, const arch::Model& model, const tokenizer::Tokenizer* tokenizer,
      ClusterExperts* cluster, ThreadPool* pool);
  // Calls Stop.
  ~GenerationScheduler();
  GenerationScheduler(const GenerationScheduler&) = delete;
  GenerationScheduler& operator=(const GenerationScheduler&) = delete;

  // Queues `job`; Unavailable (and no callback) once shutting down.
  absl::Status Submit(std::shared_ptr<GenerationJob> job);
  // Cancels running jobs and finishes queued ones with UNAVAILABLE; later
  // Submits fail. Idempotent.
  void BeginShutdown();
  // BeginShutdown, then joins the stepping thread. Idempotent.
  void Stop();

  // The context size every session has.
  int n_ctx() const { return n_ctx_; }
  // Concurrent generations (Options::sessions).
  int sessions() const { return options_.sessions; }
  // Jobs running now / waiting for a slot.
  int active_generations() const;
  int queued() const;
  // Depth-1 expert prediction over every generation so far.
  arch::PredictorStats predictor() const;
  // How the steps overlapped compute with the experts, summed over every
  // step since start. Thread-safe.
  struct ExpertOverlap {
    double outstanding_seconds = 0;  // experts were outstanding
    double wait_seconds = 0;         // the stepping thread was blocked on them
    int64_t split_batches = 0;       // steps run as two pipelined halves
  };
  ExpertOverlap expert_overlap() const;
  // The kAuto decisions so far: per numeric path, every octave of step
  // sizes decided in (none with kOn, kOff or local experts). Thread-safe.
  struct HalvesDecision {
    ops::NumericPath path = ops::NumericPath::kFast;
    HalvesChooser::Octave octave;
  };
  std::vector<HalvesDecision> pipeline_halves() const;
  // The prefix cache's occupancy (zeros when reuse is off). Thread-safe.
  PrefixCache::Stats prefix_cache() const;
  // The disk tier's (null without one). Thread-safe.
  const PrefixDiskStore* prefix_disk() const { return prefix_disk_.get(); }
  // How constrained generations found their grammar's shared matcher (zeros
  // before the first one). Thread-safe.
  GrammarCache::Stats grammar_cache() const;

 private:
  struct Engine;
  struct Active;

  GenerationScheduler(const Options& options, const arch::Model& model,
                      const tokenizer::Tokenizer* tokenizer, ClusterExperts* cluster,
                      ThreadPool* pool);
  // The engine of `path`, created (with its backend) on first use.
  absl::StatusOr<Engine*> EngineFor(ops::NumericPath path);
  void StepLoop();
  // Prepares `job` to run in a free slot of its path's engine.
  absl::StatusOr<std::unique_ptr<Active>> Admit(std::shared_ptr<GenerationJob> job);
  // One forward step of the active generations of engine `e`.
  void Step(int e, std::vector<std::unique_ptr<Active>>& active);
  // Gives engine e's HalvesChooser the time of its last step (of `tokens`
  // tokens, run split or not); logs a change of decision.
  void ObserveHalves(int e, int tokens, bool split, double seconds);
  // Drafts of the decoding generations `decoding` for the next step of
  // engine `e`, within `budget` tokens: appends them to each one's chunk.
  // Returns the seconds costly drafters (MTP) spent proposing them.
  double PlanDrafts(int e, absl::Span<Active* const> decoding, int budget);
  // After the step that evaluated `a`'s prompt chunk `chunk_tokens`: reports
  // its logits; once the prompt is done, samples the first token.
  void AfterPromptChunk(Active& a, int chunk_tokens);
  // Samples the next tokens of `a` from the `rows` rows of a->logits, row r
  // after chunk token r, accepting drafts while they are the sampled tokens;
  // truncates its slot to the accepted ones; finishes it when it ends.
  // `fed` says the rows follow tokens fed back (reported as such), not the
  // prompt.
  void Advance(Active& a, int rows, bool fed);
  // Ends `a` with `outcome` (reported to its job); frees its slot.
  void Finish(Active& a, absl::StatusOr<GenerationOutcome> outcome);
  void Complete(Active& a);
  // Copies the rows of the longest cached prefix of `a`'s prompt into its
  // slot and skips them; sets a.outcome.cached_prompt_tokens.
  void ReusePrefix(Engine& engine, Active& a);
  // Opens the disk tier (Create) for blocks of `engine`'s KV cache, unless
  // reuse is off or its budget is 0.
  absl::Status OpenPrefixDisk(const Engine& engine);
  // Caches the rows of `a`'s prompt and the generated `tokens` its slot
  // holds (and queues them for the disk tier).
  void CachePrefix(Engine& engine, Active& a, absl::Span<const int32_t> generated);

  const Options options_;
  const arch::Model& model_;
  const tokenizer::Tokenizer* const tokenizer_;
  ClusterExperts* const cluster_;
  ThreadPool* const pool_;
  int n_ctx_ = 0;
  // [0] fast path, [1] exact path; used by the stepping thread only (and by
  // Create before it starts).
  std::unique_ptr<Engine> engines_[2];
  // Null when Options::prefix_cache_bytes is 0.
  std::unique_ptr<PrefixCache> prefix_cache_;
  // Null without Options::prefix_cache_dir or reuse; set by Create.
  std::unique_ptr<PrefixDiskStore> prefix_disk_;
  // The tokenizer's vocabulary for constrained decoding: the build Create
  // started with Options::build_token_trie_at_start (else not valid), and the
  // trie the stepping thread takes from it (or builds) for the first
  // constrained generation, then read-only.
  std::shared_future<std::shared_ptr<const grammar::TokenTrie>> trie_building_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  // The grammars' shared matchers; made with trie_, used by the stepping thread.
  std::unique_ptr<GrammarCache> grammars_;

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<GenerationJob>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<GenerationJob>> running_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  arch::PredictorStats predictor_ ABSL_GUARDED_BY(mu_);
  ExpertOverlap overlap_ ABSL_GUARDED_BY(mu_);
  std::vector<HalvesDecision> halves_[2] ABSL_GUARDED_BY(mu_);  // [engine]
  GrammarCache::Stats grammar_stats_ ABSL_GUARDED_BY(mu_);
  std::thread stepper_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_GENERATION_SCHEDULER_H_
