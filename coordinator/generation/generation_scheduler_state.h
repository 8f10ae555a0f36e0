// The generation scheduler's private state, shared by its translation units
// (generation_scheduler.cc: admission, steps, tokens; generation_scheduler_
// prefix.cc: prefix reuse). Not for use outside them.
#ifndef COLIBRI_COORDINATOR_GENERATION_GENERATION_SCHEDULER_STATE_H_
#define COLIBRI_COORDINATOR_GENERATION_GENERATION_SCHEDULER_STATE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/cluster/remote_expert_backend.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/token_constraint.h"
#include "model/moe/routing_observer.h"
#include "model/speculative/draft_planner.h"
#include "model/speculative/mtp_drafter.h"

namespace colibri::coordinator {

using Clock = std::chrono::steady_clock;

// A batched session and its expert backend, for one numeric path.
struct GenerationScheduler::Engine {
  ops::NumericPath path = ops::NumericPath::kFast;
  std::unique_ptr<moe::ExpertBackend> local;  // the backend without nodes
  moe::ExpertBackend* backend = nullptr;      // local, or the cluster's for this path
  RemoteExpertBackend* remote = nullptr;      // backend, when over nodes
  // Options::routing_observers: reports what reaches the backend, then
  // passes it on.
  std::unique_ptr<moe::ObservedExpertBackend> observed;
  std::unique_ptr<arch::Session> session;
  std::vector<bool> used;  // [sessions] slots taken by an active generation
  uint64_t steps = 0;      // Step calls, to rotate the decoding order
  // The drafts of every step, from the step times measured on this session.
  std::unique_ptr<speculative::DraftPlanner> planner;
  // --draft mtp: the model's NextN block, one sequence per slot.
  std::unique_ptr<speculative::MtpModule> mtp;
  // Split or unsplit steps, with kAuto over nodes (null otherwise).
  std::unique_ptr<HalvesChooser> halves;
  // Generations of this session reuse cached prefixes (see the header).
  bool reuse = false;
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
  std::unique_ptr<TokenConstraint> constraint;  // null: unconstrained
  std::function<bool(const GeneratedToken&)> on_token;
  int32_t next = 0;           // the token to evaluate next, once the prompt is done
  // evaluate_every_token: how the generation ends once `next`, its last
  // token, is evaluated for its logits.
  std::optional<FinishReason> final_feed;
  std::vector<float> logits;  // [rows][n_vocab] of the last step
  // Speculation (drafter null: plain decoding).
  std::unique_ptr<speculative::Drafter> drafter;
  // --draft mtp: the drafter, which sees this generation's hidden states.
  speculative::MtpDrafter* mtp = nullptr;
  std::vector<float> hidden;  // [rows][n_embd] of the last step, for mtp
  speculative::DraftAcceptance acceptance;
  std::vector<int32_t> chunk;  // [1 + drafts] next and its drafts, this step
  int undrafted_steps = 0;     // steps since it last carried drafts
  GenerationOutcome outcome;   // result and counters so far
  Clock::time_point prompt_start, generate_start;
  Clock::time_point token_clock;  // the end of the prompt or the last token fed, for token_seconds
  absl::Time last_token;  // submission, then each token: for the latency metrics
  int generated = 0;      // tokens reported through on_token
  bool finished = false;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_GENERATION_SCHEDULER_STATE_H_
