// What a forward step of n tokens costs on this run: a running mean of the
// measured step time per token count, the cost side of the draft plan
// (draft_planner.h).
//
// A longer draft is not a linear cost: each drafted token may route to
// experts nobody else in the step needs, so the union of experts per layer
// widens (more bytes read, more remote work, more disk misses on a cold
// tier), and a step of n tokens costs what it cost when a step of n tokens
// last ran. StepCost therefore keeps one exponential moving average per
// token count that was measured, and estimates the others from their measured
// neighbours: linear between two measured counts; above the largest, the
// slope of the two largest (not below zero; flat with one measured count);
// below the smallest, the smallest's.
//
// Thread-safety: none; one per batched session (serve) or per generation
// (run).
#ifndef COLIBRI_MODEL_SPECULATIVE_STEP_COST_H_
#define COLIBRI_MODEL_SPECULATIVE_STEP_COST_H_

#include <map>

namespace colibri::speculative {

class StepCost {
 public:
  // `weight`: weight of a new measurement in its count's moving average, in
  // (0, 1]. Default: 0.2.
  explicit StepCost(double weight = 0.2);

  // A step of `tokens` >= 1 tokens took `seconds` >= 0 (other values are
  // ignored).
  void Observe(int tokens, double seconds);

  // Estimated seconds of a step of `tokens` >= 1 tokens (see above); 0 while
  // nothing is measured.
  double Seconds(int tokens) const;

  bool empty() const { return mean_.empty(); }
  // Whether a step of exactly `tokens` tokens was measured.
  bool measured(int tokens) const { return mean_.count(tokens) > 0; }
  // Largest token count measured (0 while nothing is).
  int largest_measured() const { return mean_.empty() ? 0 : mean_.rbegin()->first; }

 private:
  const double weight_;
  std::map<int, double> mean_;  // token count -> moving average of its seconds
};

}  // namespace colibri::speculative

#endif  // COLIBRI_MODEL_SPECULATIVE_STEP_COST_H_
