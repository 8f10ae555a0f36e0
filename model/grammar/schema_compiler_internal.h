// The compiler behind CompileJsonSchema, shared by its two source files
// (json_schema_compiler.cc: applicators, references, scalars;
// schema_containers.cc: objects and arrays). Not a public interface.
#ifndef COLIBRI_MODEL_GRAMMAR_SCHEMA_COMPILER_INTERNAL_H_
#define COLIBRI_MODEL_GRAMMAR_SCHEMA_COMPILER_INTERNAL_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/byte_nfa.h"
#include "model/grammar/json_schema_compiler.h"
#include "model/grammar/schema_merge.h"

namespace colibri::grammar::internal {

// Where the compiler is: for bounds and cycle detection.
struct Context {
  int depth = 0;       // schema nesting
  int structure = 0;   // arrays and objects entered (text consumed)
  // $ref targets being expanded, with `structure` when each was entered.
  std::vector<std::pair<std::string, int>> refs;
};

class SchemaCompiler {
 public:
  // split_patterns: tell object keys apart by the exact set of
  // patternProperties they match (PatternPairs); false keeps the smaller
  // subset (keys some pattern matches, values held to every pattern).
  SchemaCompiler(const Json& root, const SchemaCompileOptions& options, ByteNfa* nfa,
                 bool split_patterns = true)
      : root_(root),
        options_(options),
        nfa_(nfa),
        refs_replace_(RefsReplaceSiblings(root)),
        split_patterns_(split_patterns) {}

  // Whether some object's keys were split by their patterns.
  bool split_used() const { return split_used_; }
  // The most times one $ref was found expanded inside itself: a compile again
  // with max_ref_depth above this builds the same automaton.
  int deepest_expansion() const { return deepest_expansion_; }

  // Whether the document's "$schema" names draft 3, 4, 6 or 7, where a $ref
  // replaces the keywords beside it (later drafts apply them too).
  static bool RefsReplaceSiblings(const Json& root);

  // The fragment of the instances of `schema`, found at JSON pointer `ptr`.
  absl::StatusOr<Fragment> Value(const Json& schema, const std::string& ptr, Context ctx);

  // "#/ptr: keyword: what" as InvalidArgument.
  static absl::Status Error(const std::string& ptr, absl::string_view keyword,
                            absl::string_view what);
  // `status` with "#/ptr: keyword: " before its message.
  static absl::Status Prefix(const absl::Status& status, const std::string& ptr,
                             absl::string_view keyword);
  static std::string Child(const std::string& ptr, absl::string_view key);

 private:
  absl::StatusOr<Fragment> Reference(const Json& schema, const std::string& ptr, Context ctx);
  absl::StatusOr<Fragment> AllOf(const Json& schema, const std::string& ptr, Context ctx);
  absl::StatusOr<Fragment> AnyOf(const Json& schema, const std::string& ptr, Context ctx,
                                 const std::string& keyword);
  absl::StatusOr<Fragment> Literals(const Json& schema, const std::string& ptr, Context ctx);
  absl::StatusOr<Fragment> Typed(const Json& schema, const std::string& ptr, Context ctx);
  absl::StatusOr<Fragment> String(const Json& schema, const std::string& ptr);
  absl::StatusOr<Fragment> Integer(const Json& schema, const std::string& ptr);
  absl::StatusOr<Fragment> Number(const Json& schema, const std::string& ptr);
  // schema_containers.cc
  absl::StatusOr<Fragment> Object(const Json& schema, const std::string& ptr, Context ctx);
  absl::StatusOr<Fragment> Array(const Json& schema, const std::string& ptr, Context ctx);
  // The (key ":" value) fragments of an object's other keys, split by the
  // `patterns` (regex, value schema) each key matches, and with `extra` (the
  // additionalProperties schema; nullptr: none allowed) the keys no pattern
  // matches; never one of `names`. False (nothing added to `pairs`) when the
  // patterns are too many or their automaton too large to split.
  absl::StatusOr<bool> PatternPairs(
      const std::vector<std::pair<std::string, const Json*>>& patterns,
      const std::vector<std::string>& names, const Json* extra, const std::string& ptr,
      const Context& ctx, std::vector<Fragment>* pairs);

  // Whether some word leads through `f` (stack moves taken as possible).
  // Remembers the fragments it proved and jumps over them when it meets
  // them again inside a larger one, so nested required values are walked
  // once.
  bool Inhabited(Fragment f);

  // The schema at "#..." `ref`, or nullptr with an error.
  absl::StatusOr<const Json*> Resolve(const std::string& ref, const std::string& ptr) const;
  // `schema` with a top-level $ref replaced by its target, repeatedly (for
  // merging and the oneOf test). Sets `target_ptr` to where it ended.
  absl::StatusOr<const Json*> Flatten(const Json& schema, const std::string& ptr) const;
  // A non-negative integer keyword, or `fallback` when absent.
  absl::StatusOr<uint64_t> Count(const Json& schema, const std::string& ptr,
                                 const char* keyword, uint64_t fallback) const;

  const Json& root_;
  const SchemaCompileOptions& options_;
  ByteNfa* nfa_;
  // RefsReplaceSiblings(root_): keywords beside a $ref are ignored.
  const bool refs_replace_;
  const bool split_patterns_;
  bool split_used_ = false;
  int deepest_expansion_ = 0;
  // Inhabited(): proven fragments (in -> out), and visit marks (a state is
  // marked when its entry equals `stamp_`).
  absl::flat_hash_map<StateId, StateId> proven_;
  std::vector<uint32_t> stamps_;
  uint32_t stamp_ = 0;
  // The shared fragment of unconstrained values (JsonAnyValueEntry), once made.
  std::optional<StateId> any_entry_;
};

}  // namespace colibri::grammar::internal

#endif  // COLIBRI_MODEL_GRAMMAR_SCHEMA_COMPILER_INTERNAL_H_
