// The fragments of compact JSON text that schemas are built from: literals,
// strings (length bounds, patterns, formats), integers and numbers in ranges,
// unconstrained values (nesting bounded by a stack), object keys other than given names.
//
// Whitespace policy: compact text only (no whitespace between tokens), as
// written by nlohmann::json::dump() without indent. Strings use the escapes
// of ByteNfa::JsonStringChar. Numbers: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?,
// no "-0" for integers.
#ifndef COLIBRI_MODEL_GRAMMAR_JSON_PRIMITIVES_H_
#define COLIBRI_MODEL_GRAMMAR_JSON_PRIMITIVES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/byte_nfa.h"

namespace colibri::grammar {

// String bodies (the text between the quotes) and quoted strings.
//
// A body of `min_length` to `max_length` (nullopt: unbounded) code points.
absl::StatusOr<Fragment> JsonStringBody(ByteNfa* nfa, uint64_t min_length,
                                        std::optional<uint64_t> max_length);
// A body in `format`: date, time, date-time, uuid, email, ipv4, uri (http,
// https and scheme:path forms without "//"). InvalidArgument for other
// formats. The grammars are sound subsets of the RFCs (e.g. February has 28
// days, no leap seconds, simple e-mail local parts).
absl::StatusOr<Fragment> JsonFormatBody(ByteNfa* nfa, absl::string_view format);
// A body other than the given names (object keys beside declared
// properties). InvalidArgument when a name needs escapes or is not ASCII.
absl::StatusOr<Fragment> JsonStringExceptBody(ByteNfa* nfa,
                                              const std::vector<std::string>& names);
// `body` between quotes.
absl::StatusOr<Fragment> Quoted(ByteNfa* nfa, Fragment body);
// A quoted string of `min_length` to `max_length` code points.
absl::StatusOr<Fragment> JsonString(ByteNfa* nfa, uint64_t min_length,
                                    std::optional<uint64_t> max_length);

// Integers in [lo, hi]; nullopt: unbounded on that side.
absl::StatusOr<Fragment> JsonInteger(ByteNfa* nfa, std::optional<int64_t> lo,
                                     std::optional<int64_t> hi);

// A bound on a number: value and whether it is inclusive.
struct NumberBound {
  int64_t value;
  bool inclusive;
};
// Numbers (fractions allowed) between integer bounds. With a bound, numbers are
// written without exponent (a sound subset); without bounds, any JSON number.
absl::StatusOr<Fragment> JsonNumber(ByteNfa* nfa, std::optional<NumberBound> lo,
                                    std::optional<NumberBound> hi);

// Any JSON value, as one shared fragment per automaton: returns its entry
// state. It is entered by a call (StackOp::kCall) and ends with a return; the
// values inside its arrays and objects are calls of itself one level deeper,
// so nesting is bounded by CompiledGrammar::max_call_level, not by its size.
absl::StatusOr<StateId> JsonAnyValueEntry(ByteNfa* nfa);
// A fragment that calls the shared any-value fragment at `entry` (level 0).
absl::StatusOr<Fragment> JsonAnyValueCall(ByteNfa* nfa, StateId entry);

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_JSON_PRIMITIVES_H_
