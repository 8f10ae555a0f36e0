// The deterministic automaton of a CompiledGrammar, built on demand (subset
// construction one transition at a time), so that a step is a table lookup
// once the states around it have been seen.
//
// Thread-safety: not thread-safe (Next() grows the tables); one per matcher.
#ifndef COLIBRI_MODEL_GRAMMAR_LAZY_DFA_H_
#define COLIBRI_MODEL_GRAMMAR_LAZY_DFA_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "model/grammar/byte_nfa.h"

namespace colibri::grammar {

class LazyDfa {
 public:
  // The state no word leads out of: every byte was refused.
  static constexpr int32_t kDead = 0;

  // `grammar` must outlive the DFA. At most `max_states` DFA states are built;
  // past that, Next() answers kDead and overflowed() turns true.
  LazyDfa(const CompiledGrammar& grammar, size_t max_states);

  int32_t start() const { return start_; }
  bool IsAccepting(int32_t state) const { return accepting_[state]; }

  // The state after `byte` from `state`.
  int32_t Next(int32_t state, uint8_t byte) {
    const int32_t t = transitions_[static_cast<size_t>(state) * 256 + byte];
    if (t >= 0) return t;
    ComputeRow(state);
    return transitions_[static_cast<size_t>(state) * 256 + byte];
  }
  // Whether some byte leads out of `state`; with `plain_only`, some byte
  // that can be in plain string text (not '"', '\\' or below 0x20).
  bool HasExit(int32_t state, bool plain_only) {
    if (transitions_[static_cast<size_t>(state) * 256] < 0) ComputeRow(state);
    return (exits_[state] & (plain_only ? kPlainExit : kAnyExit)) != 0;
  }

  bool overflowed() const { return overflowed_; }
  size_t size() const { return sets_.size(); }

 private:
  // Fills all 256 transitions of `state`, one subset per class of bytes that
  // the state's edges do not tell apart.
  void ComputeRow(int32_t state);
  // Interns the epsilon closure of `seeds` (keeping only states with byte edges
  // and the accept state) as a DFA state.
  int32_t Intern(const std::vector<StateId>& seeds);

  const CompiledGrammar& grammar_;
  const size_t max_states_;
  bool overflowed_ = false;
  int32_t start_ = kDead;
  std::vector<std::vector<StateId>> sets_;  // [dfa state] sorted NFA states
  std::vector<bool> accepting_;            // [dfa state]
  static constexpr uint8_t kAnyExit = 1, kPlainExit = 2;
  std::vector<uint8_t> exits_;             // [dfa state] k*Exit bits, once its row is computed
  std::vector<int32_t> transitions_;       // [dfa state][256], -1: not computed yet
  absl::flat_hash_map<std::vector<StateId>, int32_t> ids_;
  std::vector<uint32_t> mark_;  // [nfa state] closure stamp
  uint32_t stamp_ = 0;
  std::vector<StateId> todo_;
};

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_LAZY_DFA_H_
