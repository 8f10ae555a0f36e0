#include "coordinator/generation/halves_chooser.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace colibri::coordinator {

std::string HalvesChooser::Change::Describe() const {
  const Octave& o = octave;
  return absl::StrFormat(
      "steps of %d-%d tokens now run %s (split / unsplit step time %.3f over %d pairs; "
      "recent steps: split %.2f ms, unsplit %.2f ms)",
      o.min_tokens, o.max_tokens, o.split ? "split in two pipelined halves" : "unsplit", o.ratio,
      o.pairs, o.split_seconds * 1e3, o.unsplit_seconds * 1e3);
}

HalvesChooser::HalvesChooser(const Options& options) : options_(options) {}

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
    // The mode this token count last did not run in, so that a pair forms.
    const auto it = s.last.find(tokens);
    return it == s.last.end() ? mode : !it->second.split;
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
  const int64_t step = ++s.observed;
  // The first steps of a mode pay one-off costs.
  if (s.seen[split]++ < options_.warmup_steps) return std::nullopt;
  if (!(seconds > 0)) return std::nullopt;
  Octave& o = s.figures;
  double& mean = split ? o.split_seconds : o.unsplit_seconds;
  mean = mean == 0 ? seconds : mean + options_.weight * (seconds - mean);

  const auto it = s.last.find(tokens);
  const bool paired = it != s.last.end() && it->second.split != split &&
                      step - it->second.step <= options_.pair_distance;
  if (paired) {
    const double log_ratio =
        split ? std::log(seconds / it->second.seconds) : std::log(it->second.seconds / seconds);
    const double weight = std::max(options_.weight, 1.0 / static_cast<double>(o.pairs + 1));
    s.log_ratio += weight * (log_ratio - s.log_ratio);
    o.ratio = std::exp(s.log_ratio);
    ++o.pairs;
    ++s.pairs_since_switch;
  }
  s.last[tokens] = {split, seconds, step};
  if (!paired || s.pairs_since_switch < options_.min_pairs) return std::nullopt;
  if (!s.decided) {
    // The first decision takes the faster mode, and is reported either way.
    s.decided = true;
    s.pairs_since_switch = 0;
    o.split = o.ratio < 1;
    return Change{o};
  }
  const bool other_faster = o.split ? o.ratio > 1 + options_.margin : o.ratio < 1 - options_.margin;
  if (!other_faster) return std::nullopt;
  o.split = !o.split;
  ++o.switches;
  s.since_probe = 0;
  s.pairs_since_switch = 0;
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
