// Whether serve's next batched step runs as two pipelined half-batches
// (arch::Session, `--pipeline-halves auto`), decided from the step times
// measured on this run.
//
// Splitting a step pays when the coordinator's own compute for one half
// (attention, norms, routing) hides behind the other half's expert round
// trips; it costs when the halves are too small for that, since every MoE
// layer then pays two requests per node and two smaller matrix products. The
// balance depends on the link, the nodes and the batch, so HalvesChooser
// measures it: it times steps in both modes and runs the faster one.
//
// Steps are grouped by their token count into octaves (2-3, 4-7, 8-15, ...
// tokens), each with its own decision. Per mode, a speculative::StepCost keeps
// the moving average of the step time per token count, so the two modes are
// compared at the step's own token count (interpolated between measured
// counts). In each octave:
//   - the first step in each mode is not counted (it pays one-off costs, such
//     as the first split step's buffers);
//   - until both modes have Options::min_samples counted steps, it
//     alternates; then it runs the faster (its first decision);
//   - after that, one step in every probe_interval + 1 runs the other mode,
//     to keep its time current, and it switches only when the other mode's
//     estimate is below the current one's by more than Options::margin
//     (hysteresis: noise does not make it flap).
//
// Thread-safety: none; one per batched session, used by the stepping thread.
#ifndef COLIBRI_COORDINATOR_HALVES_CHOOSER_H_
#define COLIBRI_COORDINATOR_HALVES_CHOOSER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/speculative/step_cost.h"

namespace colibri::coordinator {

class HalvesChooser {
 public:
  struct Options {
    // Steps in the chosen mode between two probes of the other, per octave.
    // Default: 16.
    int probe_interval = 16;
    // Counted steps of each mode an octave needs before it compares them.
    // Default: 2.
    int min_samples = 2;
    // The other mode must be faster by more than this share of the current
    // mode's step time to be switched to. Default: 0.05.
    double margin = 0.05;
    // Weight of a new step time in its token count's moving average.
    // Default: 0.25.
    double weight = 0.25;
    // Mode of an octave before anything is measured. Default: split.
    bool initial_split = true;
  };

  // What the chooser knows of one octave of token counts.
  struct Octave {
    int min_tokens = 0;  // the octave: [min_tokens, max_tokens]
    int max_tokens = 0;
    bool split = false;   // the mode its non-probe steps run in
    int last_tokens = 0;  // token count of its last counted step
    // Estimated seconds of a step of last_tokens tokens in each mode; 0 while
    // that mode is not measured.
    double split_seconds = 0;
    double unsplit_seconds = 0;
    int64_t steps = 0;     // steps decided
    int64_t probes = 0;    // of which ran in the other mode to measure it
    int64_t switches = 0;  // changes of `split` after both were measured
  };

  // A change of an octave's decision, to log.
  struct Change {
    Octave octave;  // after the change
    std::string Describe() const;
  };

  HalvesChooser() : HalvesChooser(Options()) {}
  explicit HalvesChooser(const Options& options);

  // Whether the next step, of `tokens` >= 2 tokens in at least two sequences,
  // should split.
  bool Split(int tokens);

  // The step of `tokens` tokens that Split was just asked about ran in mode
  // `split` and took `seconds`. Returns the change of its octave's decision,
  // if this measurement made one.
  std::optional<Change> Observe(int tokens, bool split, double seconds);

  // Every octave a step was decided in, smallest first.
  std::vector<Octave> octaves() const;

 private:
  struct State {
    Octave figures;
    int seen[2] = {0, 0};  // [split] steps observed, the first not counted
    bool decided = false;  // both modes measured: figures.split is the faster
    int since_probe = 0;   // steps in the chosen mode since the last probe
  };
  static int OctaveOf(int tokens);
  State& StateOf(int tokens);
  // Counted steps of mode `split` in `s`.
  static int Counted(const State& s, bool split) {
    return s.seen[split] > 0 ? s.seen[split] - 1 : 0;
  }

  const Options options_;
  speculative::StepCost cost_[2];  // [split]
  std::vector<State> octaves_;     // [OctaveOf(tokens)]
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_HALVES_CHOOSER_H_
