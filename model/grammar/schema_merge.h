// allOf as one schema: the keywords of several schemas merged where their
// conjunction is again a plain schema (types intersected, properties merged,
// required united, bounds tightened, enums intersected; nested conflicts left
// as allOf for the compiler), and the test that oneOf's alternatives exclude
// each other (so that oneOf may be compiled as anyOf).
#ifndef COLIBRI_MODEL_GRAMMAR_SCHEMA_MERGE_H_
#define COLIBRI_MODEL_GRAMMAR_SCHEMA_MERGE_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace colibri::grammar {

using Json = nlohmann::ordered_json;

// Keywords that only annotate (ignored by validation).
bool IsAnnotation(const std::string& keyword);

// The conjunction of `a` and `b` (schemas without a top-level $ref or allOf:
// the caller resolves those first). InvalidArgument naming the keyword when
// the conjunction is not expressible (two different patterns or formats, two
// anyOf lists, tuple arrays of different lengths, unknown keywords on both).
absl::StatusOr<Json> MergeSchemas(const Json& a, const Json& b);

// The JSON types an instance of `schema` (no top-level $ref) may have, as a
// bit set: 1 null, 2 boolean, 4 integer, 8 non-integral number, 16 string,
// 32 array, 64 object.
int PossibleTypes(const Json& schema);

// True when no instance can match both schemas (no top-level $ref): their
// possible types are disjoint, or both are objects requiring a property whose
// const/enum values are disjoint.
bool Disjoint(const Json& a, const Json& b);

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_SCHEMA_MERGE_H_
