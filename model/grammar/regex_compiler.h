// ECMA-262 regular expressions (the dialect of JSON Schema's `pattern`)
// compiled to a fragment of a ByteNfa that matches JSON string bodies: the
// characters between the quotes, in the encodings ByteNfa::JsonStringChar
// accepts, whose decoded text the regex matches.
//
// Supported: literals, `.`, classes `[...]` / `[^...]` with ranges, \d \w \s and
// their negations, escapes (\n \t \r \f \v \0 \xHH \uHHHH and escaped
// punctuation), groups `(...)`, `(?:...)`, `(?<name>...)`, alternation,
// quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same strings), and
// the anchors ^ and $ at the start and end of a top-level alternative.
// JSON Schema patterns are unanchored: an alternative without ^ may start
// anywhere, one without $ may end anywhere.
// Not regular or not supported (InvalidArgument naming it): lookaround,
// backreferences, \b \B, \p{...}, \cX, anchors elsewhere.
#ifndef COLIBRI_MODEL_GRAMMAR_REGEX_COMPILER_H_
#define COLIBRI_MODEL_GRAMMAR_REGEX_COMPILER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/byte_nfa.h"

namespace colibri::grammar {

// Emits the string-body fragment of `pattern` (UTF-8) into `nfa`.
// InvalidArgument for a malformed or unsupported pattern (the message says what
// and at which character); ResourceExhausted past the NFA's state budget.
absl::StatusOr<Fragment> CompileRegex(absl::string_view pattern, ByteNfa* nfa);

// A regex that matches exactly the whole string (anchored both ends), for the
// built-in formats: the same dialect, with ^ and $ implied.
absl::StatusOr<Fragment> CompileAnchoredRegex(absl::string_view pattern, ByteNfa* nfa);

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_REGEX_COMPILER_H_
