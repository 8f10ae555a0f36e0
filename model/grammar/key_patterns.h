// Object keys split by the `patternProperties` patterns they match: one
// language per set of matching patterns, the empty set included (the keys no
// pattern matches, for additionalProperties). Built by determinizing the
// patterns together (subset construction), so every class is exact, and each
// class is emitted as an automaton with no dead ends.
//
// Thread-safety: works on one ByteNfa under construction; not thread-safe.
#ifndef COLIBRI_MODEL_GRAMMAR_KEY_PATTERNS_H_
#define COLIBRI_MODEL_GRAMMAR_KEY_PATTERNS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/grammar/byte_nfa.h"

namespace colibri::grammar {

// The key bodies that exactly the patterns of bit set `patterns` match
// (bit i: patterns[i] of SplitKeysByPatterns).
struct KeyClass {
  uint64_t patterns;
  Fragment body;
};

// Classes of the byte strings by the pattern fragments (in `nfa`, without
// stack moves) that match them; only classes with some string, and the empty
// set of patterns only with `with_unmatched`. The class fragments accept any
// byte strings, JSON string bodies or not: intersect them with a string body.
// ResourceExhausted when the patterns' deterministic automaton needs more than
// `max_dfa_states` states or when there are more than 16 patterns;
// InvalidArgument when a pattern fragment has stack moves. The pattern
// fragments are left unused.
absl::StatusOr<std::vector<KeyClass>> SplitKeysByPatterns(ByteNfa* nfa,
                                                          const std::vector<Fragment>& patterns,
                                                          bool with_unmatched,
                                                          size_t max_dfa_states);

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_KEY_PATTERNS_H_
