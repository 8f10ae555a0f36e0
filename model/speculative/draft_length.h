// Adaptive draft length: how many drafted tokens a verify step should carry,
// chosen from what the run has measured so far.
//
// A verify step of k drafts costs t(k + 1), the time to evaluate k + 1
// tokens, and yields 1 + (accepted drafts) tokens; a plain step costs t(1)
// and yields 1. With a per-draft acceptance rate a (each draft is accepted
// only if the ones before it were), the expected yield of k drafts is
// 1 + a + a^2 + ... + a^k. The controller models t(n) = t1 + m * (n - 1)
// from exponential moving averages of the measured plain steps (t1) and the
// marginal cost of a drafted token in verify steps (m), estimates a from
// decayed counts of accepted and rejected drafts, and picks the k in
// [0, max_draft] that maximises yield / cost. Longer drafts are chosen as a
// rises; k = 0 (plain decoding) when drafting does not pay on this run.
// While it does not, every probe_interval-th step still drafts so that a
// can recover; while it does, every probe_interval-th step is plain so that
// t1 stays measured.
//
// Thread-safety: none; one per generation.
#ifndef COLIBRI_MODEL_SPECULATIVE_DRAFT_LENGTH_H_
#define COLIBRI_MODEL_SPECULATIVE_DRAFT_LENGTH_H_

#include <cstdint>

namespace colibri::speculative {

struct DraftLengthOptions {
  // Most drafted tokens per verify step, >= 1. Default: 8.
  int max_draft = 8;
  // Drafts per step before anything is measured. Default: 4 (capped by
  // max_draft).
  int initial_draft = 4;
  // Steps between probes (see above). Default: 16.
  int probe_interval = 16;
  // false: every step asks for max_draft drafts (for tests and for
  // measuring a fixed length). Default: true.
  bool adaptive = true;
  // Weight of a new timing in the moving averages. Default: 0.2.
  double timing_weight = 0.2;
  // Decay of the acceptance counts per verify step. Default: 0.9.
  double acceptance_decay = 0.9;
};

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
  double acceptance() const;
  double plain_seconds() const { return t1_; }        // 0 until measured
  double draft_seconds() const { return marginal_; }  // per drafted token; 0 until measured

 private:
  // Expected tokens per second with k drafts (k = 0: plain).
  double Rate(int k) const;

  const DraftLengthOptions options_;
  double t1_ = 0;
  double marginal_ = 0;
  bool marginal_known_ = false;
  // Decayed counts; a prior of one accepted and one rejected draft.
  double accepted_ = 1;
  double rejected_ = 1;
  int steps_since_probe_ = 0;
};

}  // namespace colibri::speculative

#endif  // COLIBRI_MODEL_SPECULATIVE_DRAFT_LENGTH_H_
