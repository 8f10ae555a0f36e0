// JSON Schema (draft 2020-12 and the common keywords of drafts 4-7) compiled
// to a CompiledGrammar: the language of the compact serializations of the
// instances the schema accepts, or a sound subset of it. Anything the grammar
// cannot enforce is an InvalidArgument naming the keyword and the JSON pointer
// of the schema it is in ("#/properties/a: pattern: lookaround is not
// supported"); the compiler never lets an invalid instance through to make a
// schema compile.
//
// Supported: type (and type lists, nullable), enum, const, properties,
// required, additionalProperties (false / true / schema; unevaluatedProperties
// false alike), items / prefixItems / additionalItems, minItems, maxItems,
// minLength, maxLength, pattern, format (date, time, date-time, uuid, email,
// ipv4), minimum / maximum / exclusiveMinimum / exclusiveMaximum (integers, and
// numbers with integral bounds), anyOf, oneOf (when its alternatives exclude
// each other by type or by a required property's const/enum values), allOf
// (merged, see schema_merge.h), $ref to "#..." pointers (into $defs,
// definitions or anywhere in the document; recursion unrolled to a bounded
// depth; keywords beside a $ref apply unless "$schema" names draft 3 to 7).
//
// Subsets (valid instances the grammar refuses, documented in
// docs/structured-output.md): object properties come in any order up to 64
// declared and required keys per object, past that in the order of
// `properties`, then required names not declared there, then other keys;
// recursion ($ref cycles, values of unconstrained schemas) nests at most the
// configured depths; strings use few escapes (ByteNfa::JsonStringChar);
// bounded numbers have no exponent; enum values match as written (an integral
// number also in its other spelling: 2 and 2.0).
#ifndef COLIBRI_MODEL_GRAMMAR_JSON_SCHEMA_COMPILER_H_
#define COLIBRI_MODEL_GRAMMAR_JSON_SCHEMA_COMPILER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/byte_nfa.h"
#include "nlohmann/json.hpp"

namespace colibri::grammar {

struct SchemaCompileOptions {
  // Automaton states at most (about 40 bytes each plus edges); a larger schema
  // is ResourceExhausted. Default: 1000000.
  size_t max_nfa_states = 1000000;
  // How many times one $ref may be expanded inside itself; deeper instances of
  // a recursive schema are refused. A schema that outgrows max_nfa_states is
  // compiled again with this halved, down to 1.
  // Default: 4.
  int max_ref_depth = 4;
  // How deep arrays and objects may nest inside a value of an unconstrained
  // schema ({} or true, additionalProperties absent): 0 allows scalars and
  // empty containers only. Enforced by the matcher's stack
  // (CompiledGrammar::max_call_level), so it does not change the automaton's
  // size; deeper text is refused (its opening bracket is masked out).
  // Default: 64.
  int max_any_depth = 64;
  // How deep schemas may nest (applicators, properties, items). Default: 64.
  int max_schema_depth = 64;
};

// Compiles `schema`. InvalidArgument for what cannot be enforced (naming
// keyword and pointer) or a schema no finite instance satisfies;
// ResourceExhausted past the options' bounds.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchema(
    const nlohmann::ordered_json& schema, const SchemaCompileOptions& options);

// The same from text; InvalidArgument when it is not JSON.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchemaText(
    absl::string_view text, const SchemaCompileOptions& options);

// True when `bytes` is a word of the grammar (a reference walk over the NFA,
// for tests and the enum checks).
bool GrammarAccepts(const CompiledGrammar& grammar, absl::string_view bytes);

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_JSON_SCHEMA_COMPILER_H_
