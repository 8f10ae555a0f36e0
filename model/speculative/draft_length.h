// Adaptive draft length: how many drafted tokens a verify step should carry,
// chosen from what the run has measured so far.
//
// A step of n tokens costs T(n), measured on this run per token count
// (StepCost, step_cost.h): the union of experts a step reads widens with its
// tokens, so the cost of a draft is what steps of that size actually cost
// here, not an assumed constant. A sequence's k drafts are worth
// a + a^2 + ... + a^k expected extra tokens, with a its per-draft acceptance
// (each draft is accepted only if the ones before it were), estimated from
// decayed counts (DraftAcceptance). PlanDrafts then chooses the drafts of
// every decoding sequence of a step together: the number that maximises the
// expected tokens per second of the step, (tokens without drafts + expected
// accepted drafts) / T(tokens + drafts), taking each sequence's drafts in the
// order of their expected worth. Drafting stops where it does not pay on this
// run: when drafts are rejected, or when their tokens cost as much as they
// save.
//
// DraftLength is that policy for one generation (`run`): it measures a plain
// step, tries initial_draft drafts, then plans from the measurements. While
// drafting does not pay, every probe_interval-th step still drafts so that
// the acceptance can recover; while it does, every probe_interval-th step is
// plain so that T(1) stays measured. `serve`'s scheduler plans its batched
// steps with PlanDrafts directly over one StepCost per batched session.
//
// Thread-safety: none; one DraftLength or DraftAcceptance per generation.
#ifndef COLIBRI_MODEL_SPECULATIVE_DRAFT_LENGTH_H_
#define COLIBRI_MODEL_SPECULATIVE_DRAFT_LENGTH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "model/speculative/step_cost.h"

namespace colibri::speculative {

struct DraftLengthOptions {
  // Most drafted tokens per verify step, >= 1. Default: 8.
  int max_draft = 8;
  // Drafts per step before the cost of a longer step is measured. Default: 4
  // (capped by max_draft).
  int initial_draft = 4;
  // Steps between probes (see above). Default: 16.
  int probe_interval = 16;
  // false: every step asks for max_draft drafts (for tests and for
  // measuring a fixed length). Default: true.
  bool adaptive = true;
  // Weight of a new timing in the per-token-count moving averages.
  // Default: 0.2.
  double timing_weight = 0.2;
  // Decay of the acceptance counts per verify step. Default: 0.9.
  double acceptance_decay = 0.9;
};

// Per-draft acceptance of one sequence, from decayed counts of accepted and
// rejected drafts with a prior of one of each.
class DraftAcceptance {
 public:
  explicit DraftAcceptance(double decay = 0.9) : decay_(decay) {}

  // One verify step: `accepted` drafts were the sampled tokens; `rejected`
  // when the next draft was not (false when the drafts ran out or the
  // generation ended first).
  void Observe(int accepted, bool rejected);
  // accepted / (accepted + rejected), in (0, 1).
  double rate() const { return accepted_ / (accepted_ + rejected_); }

 private:
  double decay_;
  double accepted_ = 1;
  double rejected_ = 1;
};

// One decoding sequence of a step, as PlanDrafts sees it.
struct DraftCandidate {
  double acceptance = 0;  // per-draft acceptance, in [0, 1]
  int most = 0;           // drafts it may carry (its cap, its context, its tokens left)
};

// Drafts for each candidate of a step that holds `base_tokens` >= 1 tokens
// and yields `base_yield` tokens without drafts, at most `budget` drafts in
// all: the plan that maximises expected yield / cost.Seconds(tokens) (see
// above). All zeros while `cost` is empty.
std::vector<int> PlanDrafts(const StepCost& cost, int base_tokens, double base_yield,
                            absl::Span<const DraftCandidate> candidates, int budget);

class DraftLength {
 public:
  explicit DraftLength(const DraftLengthOptions& options);

  // Drafts to ask for at the next step (0: a plain step).
  int Next();

  // Reports a plain step (one token evaluated) that took `seconds`.
  void OnPlainStep(double seconds);
  // Reports a verify step of `drafted` >= 1 drafts, `accepted` of them
  // accepted, that took `seconds`.
  void OnVerifyStep(int drafted, int accepted, double seconds);

  // The estimates behind Next(), for stats and tests.
  double acceptance() const { return acceptance_.rate(); }
  double plain_seconds() const { return cost_.Seconds(1); }  // 0 until measured
  // Per drafted token, from a plain step to the longest step measured; 0
  // until both are measured.
  double draft_seconds() const;
  const StepCost& cost() const { return cost_; }

 private:
  const DraftLengthOptions options_;
  StepCost cost_;
  DraftAcceptance acceptance_;
  int steps_since_probe_ = 0;
};

}  // namespace colibri::speculative

#endif  // COLIBRI_MODEL_SPECULATIVE_DRAFT_LENGTH_H_
