// A nondeterministic finite automaton over bytes, built Thompson-style from
// fragments (one entry state, one exit state), and the pieces of JSON text
// every schema needs: UTF-8 code point sets, string characters, literals.
//
// The JSON Schema compiler (json_schema_compiler.h) and the regex compiler
// (regex_compiler.h) emit into one ByteNfa; a fragment is "copied" by emitting
// it again. A state budget bounds the automaton: every Add* fails with
// ResourceExhausted past it, so hostile schemas end in a clean error.
//
// Thread-safety: a ByteNfa under construction is not thread-safe; once built it
// is immutable and any number of threads may read it.
#ifndef COLIBRI_MODEL_GRAMMAR_BYTE_NFA_H_
#define COLIBRI_MODEL_GRAMMAR_BYTE_NFA_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::grammar {

using StateId = uint32_t;

// One edge: bytes in [lo, hi] lead to `to`.
struct ByteEdge {
  uint8_t lo;
  uint8_t hi;
  StateId to;
};

// Moves that consume no byte but work on a stack of frames kept beside the
// automaton's state (the matcher's state is the set of (NFA state, stack)
// pairs, see LazyDfa), for what a finite automaton cannot do in linear size:
// values of unconstrained schemas nesting to any depth (a call of one shared
// fragment per container) and object keys in any order (the set of keys seen).
enum class StackOp : uint8_t {
  // Push a call frame returning to `ret` and go to `to`. Its level is `arg`
  // plus, when `arg` is not 0, the level of the call frame on top; refused
  // when the level exceeds CompiledGrammar::max_call_level.
  kCall,
  // Pop the call frame on top and go to its `ret` (`to` unused).
  kReturn,
  // Push an empty key set and go to `to`.
  kOpenKeys,
  // Add the keys of bit mask `arg` to the key set on top and go to `to`;
  // refused when one of them is there already. With `ret` 1 ("soft"), the
  // text refused here always has another way on in plain string text (the key
  // may go on as another key).
  kKey,
  // Pop the key set on top and go to `to`; refused unless it holds every key
  // of bit mask `arg`.
  kCloseKeys,
};

struct OpEdge {
  StackOp op;
  StateId to;
  StateId ret;  // kCall: the return state; kKey: 1 if soft
  uint64_t arg;
};

struct NfaState {
  std::vector<ByteEdge> edges;
  std::vector<StateId> epsilon;
  std::vector<OpEdge> ops;
  // Every plain JSON string text (see TokenTrie: no '"', '\\' or control
  // characters, the last UTF-8 character possibly cut short) leads from here
  // to a state that can go on, by byte and epsilon moves alone, so the matcher
  // need not prove it. A hint that never changes the language. Default: false.
  bool plain_universal = false;
};

// A piece of automaton: entering `in` and reaching `out` consumes one word of
// the fragment's language. `out` has no outgoing edges when the fragment is
// made, so it can be linked onwards.
struct Fragment {
  StateId in;
  StateId out;
};

// Inclusive code point ranges, sorted and disjoint after Normalize().
struct CodepointSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;

  void Add(uint32_t lo, uint32_t hi) { ranges.emplace_back(lo, hi); }
  // Sorts, merges overlapping and adjacent ranges, clips to [0, 0x10FFFF] and
  // removes the surrogates (not encodable in UTF-8).
  void Normalize();
  // All code points not in this set (after Normalize()).
  CodepointSet Complement() const;
  bool Contains(uint32_t c) const;
};

class ByteNfa {
 public:
  // max_states: AddState fails past this many states.
  explicit ByteNfa(size_t max_states) : max_states_(max_states) {}

  absl::StatusOr<StateId> AddState();
  void AddEdge(StateId from, uint8_t lo, uint8_t hi, StateId to) {
    states_[from].edges.push_back({lo, hi, to});
  }
  void AddEpsilon(StateId from, StateId to) { states_[from].epsilon.push_back(to); }
  void AddOp(StateId from, OpEdge op) { states_[from].ops.push_back(op); }
  // Sets NfaState::plain_universal; the caller vouches for it.
  void MarkPlainUniversal(StateId s) { states_[s].plain_universal = true; }

  // Fragment accepting only the empty word.
  absl::StatusOr<Fragment> Empty();
  // Fragment accepting nothing (no path from in to out).
  absl::StatusOr<Fragment> Nothing();
  absl::StatusOr<Fragment> Literal(absl::string_view bytes);
  absl::StatusOr<Fragment> ByteRange(uint8_t lo, uint8_t hi);
  // One UTF-8 encoded code point of `set` (normalized).
  absl::StatusOr<Fragment> Utf8(const CodepointSet& set);
  // One character of a JSON string's body whose decoded code point is in `set`,
  // in the encodings this engine writes and accepts: the character itself,
  // except '"' as \", '\' as \\, and U+0000..U+001F as \b \f \n \r \t or
  // \u00XX (hex digits in either case). No other escapes (\/, \uXXXX for
  // other characters) are accepted, so every string has few spellings.
  absl::StatusOr<Fragment> JsonStringChar(const CodepointSet& set);

  // a then b; either a or b; a zero or more times; a or nothing.
  Fragment Concat(Fragment a, Fragment b);
  absl::StatusOr<Fragment> Alternate(const std::vector<Fragment>& parts);
  absl::StatusOr<Fragment> Star(Fragment a);
  absl::StatusOr<Fragment> Optional(Fragment a);

  // The words of both fragments (product construction over the pairs of
  // states reachable together). The fragments themselves are left unused.
  // `b` must have no stack moves; `a`'s key-set moves (kOpenKeys, kKey,
  // kCloseKeys) are kept, as they consume no byte and return nowhere.
  // InvalidArgument when a call or return (StackOp::kCall, kReturn: a value
  // of an unconstrained schema) or any move of `b` is reachable, since the
  // state a return goes to cannot be paired with `b`'s.
  absl::StatusOr<Fragment> Intersect(Fragment a, Fragment b);

  const std::vector<NfaState>& states() const { return states_; }
  size_t size() const { return states_.size(); }
  size_t max_states() const { return max_states_; }

 private:
  size_t max_states_;
  std::vector<NfaState> states_;
};

// A finished grammar: the language of words leading from `start` to `accept`.
// Immutable; shared by every matcher of the grammar.
struct CompiledGrammar {
  explicit CompiledGrammar(ByteNfa automaton) : nfa(std::move(automaton)) {}
  ByteNfa nfa;
  StateId start = 0;
  StateId accept = 0;
  // The highest level of a call frame (StackOp::kCall): how deep arrays and
  // objects nest inside a value of an unconstrained schema. Default: 64.
  uint64_t max_call_level = 64;
};

// Calls visit(t) for every state t one move from `state` leads to, stack
// moves taken as always possible: a call also reaches its return state, a
// return leads nowhere (its caller's return state is reached by the call).
template <typename Visit>
void ForEachSuccessor(const NfaState& state, Visit&& visit) {
  for (const ByteEdge& e : state.edges) visit(e.to);
  for (StateId t : state.epsilon) visit(t);
  for (const OpEdge& op : state.ops) {
    if (op.op == StackOp::kReturn) continue;
    visit(op.to);
    if (op.op == StackOp::kCall) visit(op.ret);
  }
}

// True when some word leads from `start` to `accept` (stack moves taken as
// always possible, a call as reaching its return state).
bool NfaAcceptsSomething(const ByteNfa& nfa, StateId start, StateId accept);

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_BYTE_NFA_H_
