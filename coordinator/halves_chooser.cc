#include "coordinator/halves_chooser.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace colibri::coordinator {

std::string HalvesChooser::Change::Describe() const {
  const Octave& o = octave;
  return absl::StrFormat(
      "steps of %d-%d tokens now run %s (step time at %d tokens: split %.2f ms, unsplit %.2f ms)",
      o.min_tokens, o.max_tokens, o.split ? "split in two pipelined halves" : "unsplit",
      o.last_tokens, o.split_seconds * 1e3, o.unsplit_seconds * 1e3);
}

HalvesChooser::HalvesChooser(const Options& options)
    : options_(options),
      cost_{speculative::StepCost(options.weight), speculative::StepCost(options.weight)} {}

int HalvesChooser::OctaveOf(int tokens) {
  int octave = 0;
  while (tokens > 1) {
    tokens >>= 1;
    ++octave;
  }
  return octave;
}

HalvesChooser::State& HalvesChooser::StateOf(int tokens) {
  const int octave = OctaveOf(std::max(tokens, 1));
  while (static_cast<int>(octaves_.size()) <= octave) {
    const int o = static_cast<int>(octaves_.size());
    octaves_.emplace_back();
    Octave& figures = octaves_.back().figures;
    figures.min_tokens = 1 << o;
    figures.max_tokens = (2 << o) - 1;
    figures.split = options_.initial_split;
  }
  return octaves_[octave];
}

bool HalvesChooser::Split(int tokens) {
  State& s = StateOf(tokens);
  ++s.figures.steps;
  const bool mode = s.figures.split;
  if (!s.decided) {
    // Measure both: the mode with fewer steps so far, the current one on a tie.
    return s.seen[!mode] < s.seen[mode] ? !mode : mode;
  }
  if (++s.since_probe > options_.probe_interval) {
    s.since_probe = 0;
    ++s.figures.probes;
    return !mode;
  }
  return mode;
}

std::optional<HalvesChooser::Change> HalvesChooser::Observe(int tokens, bool split,
                                                            double seconds) {
  State& s = StateOf(tokens);
  if (s.seen[split]++ == 0) return std::nullopt;  // a first step pays one-off costs
  cost_[split].Observe(tokens, seconds);
  Octave& o = s.figures;
  o.last_tokens = tokens;
  o.split_seconds = Counted(s, true) > 0 ? cost_[1].Seconds(tokens) : 0;
  o.unsplit_seconds = Counted(s, false) > 0 ? cost_[0].Seconds(tokens) : 0;
  if (Counted(s, true) < options_.min_samples || Counted(s, false) < options_.min_samples) {
    return std::nullopt;
  }
  const double current = o.split ? o.split_seconds : o.unsplit_seconds;
  const double other = o.split ? o.unsplit_seconds : o.split_seconds;
  if (!s.decided) {
    // The first decision takes the faster mode, and is reported either way.
    s.decided = true;
    if (other < current) o.split = !o.split;
    return Change{o};
  }
  if (other >= current * (1 - options_.margin)) return std::nullopt;
  o.split = !o.split;
  ++o.switches;
  s.since_probe = 0;
  return Change{o};
}

std::vector<HalvesChooser::Octave> HalvesChooser::octaves() const {
  std::vector<Octave> out;
  for (const State& s : octaves_) {
    if (s.figures.steps > 0) out.push_back(s.figures);
  }
  return out;
}

}  // namespace colibri::coordinator
