// The deterministic automaton of a CompiledGrammar, built on demand (subset
// construction one transition at a time), so that a step is a table lookup
// once the states around it have been seen.
//
// The subsets are of positions: an NFA state and a stack of frames (StackOp),
// interned as a stack id. Stacks stay bounded (call levels by
// CompiledGrammar::max_call_level, key sets by the schema's nesting), so the
// automaton is finite; it holds only the stacks the text has reached.
//
// Thread-safety: not thread-safe (Next() grows the tables); one per matcher.
#ifndef COLIBRI_MODEL_GRAMMAR_LAZY_DFA_H_
#define COLIBRI_MODEL_GRAMMAR_LAZY_DFA_H_

#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "model/grammar/byte_nfa.h"

namespace colibri::grammar {

class LazyDfa {
 public:
  // The state no word leads out of: every byte was refused.
  static constexpr int32_t kDead = 0;

  // `grammar` must outlive the DFA. At most `max_states` DFA states are built;
  // past that, Next() answers kDead and overflowed() turns true. With
  // `track_keys` false, key sets are not kept (kKey and kCloseKeys always
  // pass, the frames stay empty): a larger language whose states do not
  // depend on the keys written, whose transitions through a key move are
  // marked (KeyStep) so that a caller can check them on the exact automaton.
  LazyDfa(const CompiledGrammar& grammar, size_t max_states, bool track_keys = true);

  int32_t start() const { return start_; }
  bool IsAccepting(int32_t state) const { return accepting_[state]; }
  // Some position of `state` is NfaState::plain_universal: every plain string
  // text leads from it to a state that is not kDead.
  bool PlainUniversal(int32_t state) const { return universal_[state]; }

  // The state after `byte` from `state`.
  int32_t Next(int32_t state, uint8_t byte) {
    const int32_t t = transitions_[static_cast<size_t>(state) * 256 + byte];
    if (t >= 0) return t;
    ComputeRow(state);
    return transitions_[static_cast<size_t>(state) * 256 + byte];
  }
  // Whether the transition on `byte` from `state` took a key move (kKey,
  // kCloseKeys); with `hard_only`, one that is not a soft kKey. Valid once
  // Next(state, byte) has been called.
  bool KeyStep(int32_t state, uint8_t byte, bool hard_only = false) const {
    return (key_steps_[static_cast<size_t>(state) * 256 + byte] & (hard_only ? kHard : kAny)) != 0;
  }
  // The state of this automaton holding the positions of `other`'s `state`
  // (same grammar), closed under this automaton's moves; sets `*key_step`
  // when that closure took a key move.
  int32_t Import(const LazyDfa& other, int32_t state, bool* key_step);

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
  // Interns the closure of `seeds` under epsilon and stack moves (keeping only
  // positions with byte edges and the accept state with an empty stack) as a
  // DFA state.
  int32_t Intern(const std::vector<uint64_t>& seeds);

  // The id of `other`'s stack `stack` in this automaton.
  int32_t ImportStack(const LazyDfa& other, int32_t stack);

  // A stack frame: a call's return state and level, or a key set.
  struct Frame {
    StateId ret;    // kNoReturn for a key set
    uint64_t bits;  // call: level; key set: the keys seen
    bool operator==(const Frame& o) const { return ret == o.ret && bits == o.bits; }
  };
  static constexpr StateId kNoReturn = ~StateId{0};
  struct StackNode {
    int32_t parent;  // -1 for the empty stack
    Frame top;
  };
  // The id of `parent` with `top` pushed.
  int32_t Push(int32_t parent, Frame top);
  static uint64_t Position(StateId s, int32_t stack) {
    return (uint64_t{s} << 32) | static_cast<uint32_t>(stack);
  }

  const CompiledGrammar& grammar_;
  const size_t max_states_;
  const bool track_keys_;
  bool overflowed_ = false;
  static constexpr uint8_t kAny = 1, kHard = 2;
  uint8_t key_step_ = 0;  // the last Intern()'s key moves, k* bits
  int32_t start_ = kDead;
  std::vector<std::vector<uint64_t>> sets_;  // [dfa state] sorted Position()s
  std::vector<bool> accepting_;            // [dfa state]
  std::vector<bool> universal_;            // [dfa state] PlainUniversal()
  static constexpr uint8_t kAnyExit = 1, kPlainExit = 2;
  std::vector<uint8_t> exits_;             // [dfa state] k*Exit bits, once its row is computed
  std::vector<int32_t> transitions_;       // [dfa state][256], -1: not computed yet
  std::vector<uint8_t> key_steps_;         // [dfa state][256] KeyStep bits
  absl::flat_hash_map<int32_t, int32_t> imported_stacks_;  // Import's stack ids
  absl::flat_hash_map<std::vector<uint64_t>, int32_t> ids_;
  std::vector<StackNode> stacks_;  // [stack id]; 0 is the empty stack
  absl::flat_hash_map<std::tuple<int32_t, StateId, uint64_t>, int32_t> stack_ids_;
  absl::flat_hash_set<uint64_t> seen_;  // closure scratch
  std::vector<uint64_t> todo_;
};

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_LAZY_DFA_H_
