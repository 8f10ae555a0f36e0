// Grammars built from pieces: literal byte strings, runs of UTF-8 text and
// already compiled grammars (JSON Schema, see json_schema_compiler.h) in
// sequence, as alternatives, and repeated with a separator; any piece may
// leave out the words that contain given strings. Used to constrain output to
// a wrapper the schema compiler does not know about, such as a model family's
// tool-call syntax around the arguments of one of several functions (JSON, or
// raw text that must not hold the wrapper's closing tags).
//
// The pieces' automata are copied, so the result owns its automaton and the
// pieces may be dropped. Thread-safety: every function is thread-safe (the
// compiled grammars read are immutable).
#ifndef COLIBRI_MODEL_GRAMMAR_GRAMMAR_COMPOSE_H_
#define COLIBRI_MODEL_GRAMMAR_GRAMMAR_COMPOSE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/byte_nfa.h"

namespace colibri::grammar {

// One piece of a sequence: `grammar`'s language when it is set; else, with
// `text`, any valid UTF-8 text of text_min..text_max code points; else the
// bytes of `literal` (possibly empty). Of that language, the words that
// contain one of `excluding` (non-empty byte strings) are left out.
struct GrammarPart {
  std::string literal;
  std::shared_ptr<const CompiledGrammar> grammar;
  // Default: false (a literal or a grammar).
  bool text = false;
  // Code points of a text piece; text_max < 0 is unbounded. Default: 0, -1.
  int text_min = 0;
  int text_max = -1;
  // Default: none.
  std::vector<std::string> excluding;

  static GrammarPart Literal(std::string bytes) { return {std::move(bytes), nullptr}; }
  static GrammarPart Of(std::shared_ptr<const CompiledGrammar> g,
                        std::vector<std::string> excluding = {}) {
    GrammarPart p{"", std::move(g)};
    p.excluding = std::move(excluding);
    return p;
  }
  static GrammarPart Text(int min_chars, int max_chars, std::vector<std::string> excluding) {
    GrammarPart p;
    p.text = true;
    p.text_min = min_chars;
    p.text_max = max_chars;
    p.excluding = std::move(excluding);
    return p;
  }
};
using GrammarSequence = std::vector<GrammarPart>;

struct ComposeOptions {
  // Automaton states at most in the result; past it ResourceExhausted.
  // Default: 1000000.
  size_t max_nfa_states = 1000000;
  // The alternatives' union is repeated min_repeats..max_repeats times
  // (each repetition chooses again), `separator` between repetitions.
  // Default: exactly once.
  int min_repeats = 1;
  int max_repeats = 1;
  std::string separator;
};

// The language of `alternatives` (each the concatenation of its parts),
// repeated as `options` say. InvalidArgument when there is no alternative,
// the repeat bounds are not 1 <= min <= max, a text piece's bounds are not
// 0 <= min <= max (or max < 0), an excluded string is empty, or the result
// accepts nothing;
// ResourceExhausted past max_nfa_states.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> ComposeGrammar(
    const std::vector<GrammarSequence>& alternatives, const ComposeOptions& options);

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_GRAMMAR_COMPOSE_H_
