// The draft policy: how many drafted tokens each decoding sequence of a
// forward step carries, chosen from what the run has measured so far. `run`
// and `serve` share it (coordinator/generation/generation_scheduler.h plans every step
// with one DraftPlanner per batched session).
//
// A step of n tokens costs T(n), measured on this run per token count
// (StepCost, step_cost.h): the union of experts a step reads widens with its
// tokens, so the cost of a draft is what steps of that size actually cost
// here, not an assumed constant. A sequence's k drafts are worth
// a + a^2 + ... + a^k expected extra tokens, with a its per-draft acceptance
// (each draft is accepted only if the ones before it were), estimated from
// decayed counts (DraftAcceptance). PlanDrafts chooses the drafts of every
// decoding sequence of a step together: the number that maximises the
// expected tokens per second of the step, (tokens without drafts + expected
// accepted drafts) / T(tokens + drafts), taking each sequence's drafts in the
// order of their expected worth. Drafting stops where it does not pay on this
// run: when drafts are rejected, or when their tokens cost as much as they
// save.
//
// DraftPlanner measures steps of the decoding tokens alone first, then tries
// initial_draft drafts, then plans from the measurements. Every
// probe_interval-th step is plain so that the cost without drafts stays
// measured, and a sequence left without drafts for probe_interval steps
// drafts again so that its acceptance can recover.
//
// Thread-safety: none; one DraftPlanner per batched session, one
// DraftAcceptance per sequence.
#ifndef COLIBRI_MODEL_SPECULATIVE_DRAFT_PLANNER_H_
#define COLIBRI_MODEL_SPECULATIVE_DRAFT_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "model/speculative/step_cost.h"

namespace colibri::speculative {

struct DraftPlannerOptions {
  // Most drafted tokens per verify step, >= 1. Default: 8.
  int max_draft = 8;
  // Drafts per step before the cost of a longer step is measured. Default: 4
  // (capped by max_draft).
  int initial_draft = 4;
  // Steps between probes (see above). Default: 16.
  int probe_interval = 16;
  // false: every sequence drafts as many as it may (its cap) at every step
  // (for tests and for measuring a fixed length). Default: true.
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

class DraftPlanner {
 public:
  explicit DraftPlanner(const DraftPlannerOptions& options);

  // Drafts for each decoding sequence of the next step, at most `budget` in
  // all and candidates[i].most (already capped by max_draft, the tokens the
  // sequence may still generate, its context) for each. undrafted[i] counts
  // the steps since sequence i last carried drafts: Plan increments it for a
  // sequence it leaves without drafts while others are planned, and gives
  // initial_draft drafts to one that reaches probe_interval; the caller sets
  // it to 0 when the sequence's drafts are evaluated.
  std::vector<int> Plan(absl::Span<const DraftCandidate> candidates, absl::Span<int> undrafted,
                        int budget);
  // A step of `tokens` tokens (drafts included) took `seconds`, the
  // drafters' time for its drafts included.
  void Observe(int tokens, double seconds) { cost_.Observe(tokens, seconds); }

  const StepCost& cost() const { return cost_; }

 private:
  const DraftPlannerOptions options_;
  StepCost cost_;
  uint64_t steps_ = 0;  // Plan calls with something to draft, for the probes
};

}  // namespace colibri::speculative

#endif  // COLIBRI_MODEL_SPECULATIVE_DRAFT_PLANNER_H_
