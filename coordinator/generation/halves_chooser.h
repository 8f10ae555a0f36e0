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
// Step times drift with the machine's load far more than the two modes
// differ, so the modes are compared in pairs: a step's time against the
// other mode's step of the same token count a few steps before (the probe
// against the steps around it). The decision follows a moving average of the
// log of those split / unsplit ratios. Steps are grouped by token count into
// octaves (2-3, 4-7, 8-15, ... tokens), each with its own decision. In each:
//   - the first Options::warmup_steps steps in each mode are not counted
//     (they pay one-off costs: the first split step's buffers, the second
//     channel's connections to the nodes);
//   - until Options::min_pairs pairs are measured, a step runs in the mode
//     its token count last did not (so that pairs form);
//   - then it runs the faster mode (its first decision); after that, one step
//     in every probe_interval + 1 runs the other, and it switches when the
//     averaged ratio favours the other mode by more than Options::margin
//     (hysteresis: noise does not make it flap).
//
// Thread-safety: none; one per batched session, used by the stepping thread.
#ifndef COLIBRI_COORDINATOR_GENERATION_HALVES_CHOOSER_H_
#define COLIBRI_COORDINATOR_GENERATION_HALVES_CHOOSER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace colibri::coordinator {

class HalvesChooser {
 public:
  struct Options {
    // Steps in the chosen mode between two probes of the other, per octave.
    // Default: 16.
    int probe_interval = 16;
    // Pairs an octave needs before its first decision, and between two
    // switches. Default: 3.
    int min_pairs = 3;
    // Steps of each mode an octave does not count at first. Default: 3.
    int warmup_steps = 3;
    // A pair: the other mode's step of the same token count at most this many
    // steps (of the octave) before. Default: 4.
    int pair_distance = 4;
    // The averaged ratio must favour the other mode by more than this share
    // to switch. Default: 0.08.
    double margin = 0.08;
    // Weight of a new pair in the moving average of the log ratio (the plain
    // mean while the pairs are fewer than 1 / weight), and of a new step in
    // its mode's time (the figures). Default: 0.2.
    double weight = 0.2;
    // Mode of an octave before anything is measured. Default: split.
    bool initial_split = true;
  };

  // What the chooser knows of one octave of token counts.
  struct Octave {
    int min_tokens = 0;  // the octave: [min_tokens, max_tokens]
    int max_tokens = 0;
    bool split = false;  // the mode its non-probe steps run in
    // Averaged split / unsplit step time ratio over the pairs; 0 before any.
    double ratio = 0;
    int64_t pairs = 0;
    // Moving averages of the step time in each mode (of any token count in
    // the octave; for the reader: decisions use `ratio`); 0 while unmeasured.
    double split_seconds = 0;
    double unsplit_seconds = 0;
    int64_t steps = 0;     // steps decided
    int64_t probes = 0;    // of which ran in the other mode to measure it
    int64_t switches = 0;  // changes of `split` after the first decision
  };

  // A change of an octave's decision, to log.
  struct Change {
    Octave octave;  // after the change
    std::string Describe() const;
  };

  HalvesChooser() : HalvesChooser(Options()) {}
  explicit HalvesChooser(const Options& options);

  // Whether the next step, of `tokens` >= 2 tokens, should split.
  bool Split(int tokens);

  // The step of `tokens` tokens that Split was just asked about ran in mode
  // `split` and took `seconds`. Returns the change of its octave's decision,
  // if this measurement made one.
  std::optional<Change> Observe(int tokens, bool split, double seconds);

  // Every octave a step was decided in, smallest first.
  std::vector<Octave> octaves() const;

 private:
  // The last counted step of one token count.
  struct Last {
    bool split = false;
    double seconds = 0;
    int64_t step = 0;  // the octave's observation index
  };
  struct State {
    Octave figures;
    int seen[2] = {0, 0};  // [split] steps observed, warmup_steps not counted
    int64_t observed = 0;  // steps observed
    double log_ratio = 0;  // moving average of log(split / unsplit)
    int64_t pairs_since_switch = 0;
    bool decided = false;      // figures.split follows the ratio
    int since_probe = 0;       // steps in the chosen mode since the last probe
    std::map<int, Last> last;  // [tokens]
  };
  static int OctaveOf(int tokens);
  State& StateOf(int tokens);

  const Options options_;
  std::vector<State> octaves_;  // [OctaveOf(tokens)]
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_HALVES_CHOOSER_H_
