// Objects and arrays of the JSON Schema compiler (see schema_compiler_internal.h).
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/grammar/json_primitives.h"
#include "model/grammar/key_patterns.h"
#include "model/grammar/regex_compiler.h"
#include "model/grammar/schema_compiler_internal.h"

namespace colibri::grammar::internal {
namespace {

std::string Quote(const std::string& name) {
  return Json(name).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<Fragment> SchemaCompiler::Object(const Json& schema, const std::string& ptr,
                                                Context ctx) {
  ++ctx.structure;
  static const char* kUnsupportedHere[] = {"propertyNames", "unevaluatedItems"};
  for (const char* k : kUnsupportedHere) {
    if (schema.contains(k)) return Error(ptr, k, "is not supported");
  }
  // Patterns of other keys and the schemas of their values.
  std::vector<std::pair<std::string, const Json*>> patterns;
  if (auto it = schema.find("patternProperties"); it != schema.end()) {
    if (!it->is_object()) return Error(ptr, "patternProperties", "is not an object");
    for (auto p = it->begin(); p != it->end(); ++p) patterns.emplace_back(p.key(), &p.value());
  }
  // Declared properties in order, then required names not declared.
  std::vector<std::pair<std::string, const Json*>> fields;
  std::vector<bool> required;
  static const Json kTrue = true;
  const Json* extra = &kTrue;
  if (auto it = schema.find("additionalProperties"); it != schema.end()) {
    extra = &*it;
  } else if (auto un = schema.find("unevaluatedProperties"); un != schema.end()) {
    if (*un != false) return Error(ptr, "unevaluatedProperties", "is supported only as false");
    extra = &*un;
  }
  if (auto it = schema.find("properties"); it != schema.end()) {
    if (!it->is_object()) return Error(ptr, "properties", "is not an object");
    for (auto p = it->begin(); p != it->end(); ++p) fields.emplace_back(p.key(), &p.value());
  }
  std::vector<std::string> required_names;
  if (auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) return Error(ptr, "required", "is not an array");
    for (const Json& name : *it) {
      if (!name.is_string()) return Error(ptr, "required", "holds a non-string");
      required_names.push_back(name.get<std::string>());
    }
  }
  for (const std::string& name : required_names) {
    auto known = std::find_if(fields.begin(), fields.end(),
                              [&](const auto& f) { return f.first == name; });
    if (known == fields.end()) fields.emplace_back(name, extra);
  }
  // A declared name that a pattern matches must satisfy the pattern's schema too.
  std::vector<Json> conjunctions;
  conjunctions.reserve(fields.size());
  for (auto& field : fields) {
    Json both = {{"allOf", Json::array({*field.second})}};
    for (const auto& [pattern, pattern_schema] : patterns) {
      ByteNfa scratch(options_.max_nfa_states);
      absl::StatusOr<Fragment> f = CompileRegex(pattern, &scratch);
      if (!f.ok()) return Prefix(f.status(), Child(ptr, "patternProperties"), "pattern");
      CompiledGrammar check(std::move(scratch));
      check.start = f->in;
      check.accept = f->out;
      const std::string quoted = Quote(field.first);
      if (GrammarAccepts(check, quoted.substr(1, quoted.size() - 2))) {
        both["allOf"].push_back(*pattern_schema);
      }
    }
    if (both["allOf"].size() > 1) {
      conjunctions.push_back(std::move(both));
      field.second = &conjunctions.back();
    }
  }
  for (const auto& field : fields) {
    required.push_back(std::find(required_names.begin(), required_names.end(), field.first) !=
                       required_names.end());
  }
  COLIBRI_ASSIGN_OR_RETURN(uint64_t min_properties, Count(schema, ptr, "minProperties", 0));
  const uint64_t n_required = static_cast<uint64_t>(std::count(required.begin(), required.end(), true));
  if (min_properties > n_required) {
    return Error(ptr, "minProperties", "above the number of required properties is not supported");
  }
  const bool extra_allowed = !(extra->is_boolean() && !extra->get<bool>());
  if (schema.contains("maxProperties")) {
    COLIBRI_ASSIGN_OR_RETURN(uint64_t max_properties, Count(schema, ptr, "maxProperties", 0));
    if (extra_allowed || !patterns.empty() || max_properties < fields.size()) {
      return Error(ptr, "maxProperties",
                   "is supported only when no more properties than it allows can appear");
    }
  }
  // Up to kMaxTrackedKeys declared and required keys come in any order: the
  // object's members loop over one hub (nothing written yet: `hub_empty`, else
  // `hub_full`) and a key set on the matcher's stack refuses a key seen before
  // and a close before every required key. More keys than that come in order
  // (before field i: empty[i], full[i]), a subset.
  constexpr size_t kMaxTrackedKeys = 64;
  const size_t n = fields.size();
  const bool any_order = n > 0 && n <= kMaxTrackedKeys;
  StateId hub_empty, hub_full;  // where other keys and the close attach
  COLIBRI_ASSIGN_OR_RETURN(Fragment open, nfa_->Literal("{"));
  COLIBRI_ASSIGN_OR_RETURN(Fragment close, nfa_->Literal("}"));
  // Other keys are any string but the declared names.
  const bool free_other_keys = extra_allowed && patterns.empty();
  if (any_order) {
    COLIBRI_ASSIGN_OR_RETURN(hub_empty, nfa_->AddState());
    COLIBRI_ASSIGN_OR_RETURN(hub_full, nfa_->AddState());
    COLIBRI_ASSIGN_OR_RETURN(const StateId closing, nfa_->AddState());
    uint64_t required_keys = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t bit = uint64_t{1} << i;
      if (required[i]) required_keys |= bit;
      const std::string where = Child(Child(ptr, "properties"), fields[i].first);
      COLIBRI_ASSIGN_OR_RETURN(Fragment value, Value(*fields[i].second, where, ctx));
      // A required key whose value has no instance: neither has the object.
      if (required[i] && !Inhabited(value)) return nfa_->Nothing();
      const std::string quoted = Quote(fields[i].first);
      if (free_other_keys) {
        // The key is marked seen before its closing quote: a key seen before
        // can still go on as another key, so no byte leads to a dead end,
        // and only tokens that complete the name depend on the key set.
        const std::string name = quoted.substr(0, quoted.size() - 1);
        COLIBRI_ASSIGN_OR_RETURN(Fragment first, nfa_->Literal(name));
        COLIBRI_ASSIGN_OR_RETURN(Fragment later, nfa_->Literal("," + name));
        COLIBRI_ASSIGN_OR_RETURN(Fragment tail, nfa_->Literal("\":"));
        COLIBRI_ASSIGN_OR_RETURN(const StateId named, nfa_->AddState());
        nfa_->AddEpsilon(hub_empty, first.in);
        nfa_->AddEpsilon(hub_full, later.in);
        nfa_->AddEpsilon(first.out, named);
        nfa_->AddEpsilon(later.out, named);
        nfa_->AddOp(named, OpEdge{StackOp::kKey, tail.in, /*soft=*/1, bit});
        nfa_->AddEpsilon(tail.out, value.in);
      } else {
        // The key is marked seen before its first byte, so that no byte
        // leads into a key that would be refused later.
        COLIBRI_ASSIGN_OR_RETURN(Fragment first, nfa_->Literal(quoted + ":"));
        COLIBRI_ASSIGN_OR_RETURN(Fragment later, nfa_->Literal("," + quoted + ":"));
        nfa_->AddOp(hub_empty, OpEdge{StackOp::kKey, first.in, 0, bit});
        nfa_->AddOp(hub_full, OpEdge{StackOp::kKey, later.in, 0, bit});
        nfa_->AddEpsilon(first.out, value.in);
        nfa_->AddEpsilon(later.out, value.in);
      }
      nfa_->AddEpsilon(value.out, hub_full);
    }
    nfa_->AddOp(open.out, OpEdge{StackOp::kOpenKeys, hub_empty, 0, 0});
    nfa_->AddEpsilon(hub_empty, closing);
    nfa_->AddEpsilon(hub_full, closing);
    nfa_->AddOp(closing, OpEdge{StackOp::kCloseKeys, close.in, 0, required_keys});
  } else {
    std::vector<StateId> empty(n + 1), full(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      COLIBRI_ASSIGN_OR_RETURN(empty[i], nfa_->AddState());
      COLIBRI_ASSIGN_OR_RETURN(full[i], nfa_->AddState());
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string key = Quote(fields[i].first) + ":";
      COLIBRI_ASSIGN_OR_RETURN(Fragment first, nfa_->Literal(key));
      COLIBRI_ASSIGN_OR_RETURN(Fragment later, nfa_->Literal("," + key));
      const std::string where = Child(Child(ptr, "properties"), fields[i].first);
      COLIBRI_ASSIGN_OR_RETURN(Fragment value, Value(*fields[i].second, where, ctx));
      nfa_->AddEpsilon(empty[i], first.in);
      nfa_->AddEpsilon(first.out, value.in);
      nfa_->AddEpsilon(full[i], later.in);
      nfa_->AddEpsilon(later.out, value.in);
      nfa_->AddEpsilon(value.out, full[i + 1]);
      if (!required[i]) {
        nfa_->AddEpsilon(empty[i], empty[i + 1]);
        nfa_->AddEpsilon(full[i], full[i + 1]);
      }
    }
    hub_empty = empty[n];
    hub_full = full[n];
    nfa_->AddEpsilon(open.out, empty[0]);
    nfa_->AddEpsilon(hub_empty, close.in);
    nfa_->AddEpsilon(hub_full, close.in);
  }
  // Other keys: with patterns, split by the patterns they match (the keys
  // no pattern matches under additionalProperties); else any other key.
  std::vector<Fragment> pairs;
  std::vector<std::string> names;
  for (const auto& field : fields) names.push_back(field.first);
  auto add_pair = [&](Fragment key_body, const Json& value_schema,
                      const std::string& where) -> absl::Status {
    COLIBRI_ASSIGN_OR_RETURN(Fragment key, Quoted(nfa_, key_body));
    COLIBRI_ASSIGN_OR_RETURN(Fragment colon, nfa_->Literal(":"));
    COLIBRI_ASSIGN_OR_RETURN(Fragment value, Value(value_schema, where, ctx));
    pairs.push_back(nfa_->Concat(nfa_->Concat(key, colon), value));
    return absl::OkStatus();
  };
  bool split = false;
  if (!patterns.empty() && split_patterns_) {
    COLIBRI_ASSIGN_OR_RETURN(
        split, PatternPairs(patterns, names, extra_allowed ? extra : nullptr, ptr, ctx, &pairs));
    split_used_ |= split;
  }
  if (!patterns.empty() && !split) {
    // A subset: keys some pattern matches, each value held to every
    // pattern's schema.
    Json every = {{"allOf", Json::array()}};
    for (const auto& pattern : patterns) every["allOf"].push_back(*pattern.second);
    for (const auto& [pattern, pattern_schema] : patterns) {
      const std::string where = Child(Child(ptr, "patternProperties"), pattern);
      absl::StatusOr<Fragment> matching = CompileRegex(pattern, nfa_);
      if (!matching.ok()) return Prefix(matching.status(), where, "pattern");
      absl::StatusOr<Fragment> others = JsonStringExceptBody(nfa_, names);
      if (!others.ok()) return Prefix(others.status(), ptr, "patternProperties");
      COLIBRI_ASSIGN_OR_RETURN(Fragment key, nfa_->Intersect(*matching, *others));
      COLIBRI_RETURN_IF_ERROR(
          add_pair(key, patterns.size() == 1 ? *pattern_schema : every, where));
    }
  } else if (patterns.empty() && extra_allowed) {
    absl::StatusOr<Fragment> key = JsonStringExceptBody(nfa_, names);
    if (!key.ok()) return Prefix(key.status(), ptr, "additionalProperties");
    COLIBRI_RETURN_IF_ERROR(add_pair(*key, *extra, Child(ptr, "additionalProperties")));
  }
  if (!pairs.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment pair, nfa_->Alternate(pairs));
    COLIBRI_ASSIGN_OR_RETURN(Fragment comma, nfa_->Literal(","));
    nfa_->AddEpsilon(hub_empty, pair.in);
    nfa_->AddEpsilon(hub_full, comma.in);
    nfa_->AddEpsilon(comma.out, pair.in);
    nfa_->AddEpsilon(pair.out, hub_full);
  }
  return Fragment{open.in, close.out};
}

absl::StatusOr<bool> SchemaCompiler::PatternPairs(
    const std::vector<std::pair<std::string, const Json*>>& patterns,
    const std::vector<std::string>& names, const Json* extra, const std::string& ptr,
    const Context& ctx, std::vector<Fragment>* pairs) {
  // Deterministic states of the patterns together; past this the caller
  // keeps its subset.
  constexpr size_t kMaxPatternStates = 1024;
  std::vector<Fragment> matchers;
  for (const auto& [pattern, pattern_schema] : patterns) {
    absl::StatusOr<Fragment> f = CompileRegex(pattern, nfa_);
    if (!f.ok()) {
      return Prefix(f.status(), Child(Child(ptr, "patternProperties"), pattern), "pattern");
    }
    matchers.push_back(*f);
  }
  absl::StatusOr<std::vector<KeyClass>> classes =
      SplitKeysByPatterns(nfa_, matchers, extra != nullptr, kMaxPatternStates);
  if (!classes.ok()) {
    if (classes.status().code() == absl::StatusCode::kResourceExhausted) return false;
    return Prefix(classes.status(), ptr, "patternProperties");
  }
  for (const KeyClass& key_class : *classes) {
    Json value = {{"allOf", Json::array()}};
    std::string where = Child(ptr, "patternProperties");
    for (size_t i = 0; i < patterns.size(); ++i) {
      if ((key_class.patterns >> i & 1) == 0) continue;
      value["allOf"].push_back(*patterns[i].second);
      where = Child(Child(ptr, "patternProperties"), patterns[i].first);
    }
    if (key_class.patterns == 0) {
      value = *extra;
      where = Child(ptr, "additionalProperties");
    } else if (value["allOf"].size() == 1) {
      value = Json(value["allOf"][0]);
    } else {
      where = Child(ptr, "patternProperties");
    }
    absl::StatusOr<Fragment> others = JsonStringExceptBody(nfa_, names);
    if (!others.ok()) return Prefix(others.status(), ptr, "patternProperties");
    COLIBRI_ASSIGN_OR_RETURN(Fragment body, nfa_->Intersect(key_class.body, *others));
    COLIBRI_ASSIGN_OR_RETURN(Fragment key, Quoted(nfa_, body));
    COLIBRI_ASSIGN_OR_RETURN(Fragment colon, nfa_->Literal(":"));
    COLIBRI_ASSIGN_OR_RETURN(Fragment v, Value(value, where, ctx));
    pairs->push_back(nfa_->Concat(nfa_->Concat(key, colon), v));
  }
  return true;
}

absl::StatusOr<Fragment> SchemaCompiler::Array(const Json& schema, const std::string& ptr,
                                               Context ctx) {
  ++ctx.structure;
  if (schema.contains("contains")) return Error(ptr, "contains", "is not supported");
  if (schema.contains("unevaluatedItems")) {
    return Error(ptr, "unevaluatedItems", "is not supported");
  }
  COLIBRI_ASSIGN_OR_RETURN(uint64_t min_items, Count(schema, ptr, "minItems", 0));
  std::optional<uint64_t> max_items;
  if (schema.contains("maxItems")) {
    COLIBRI_ASSIGN_OR_RETURN(max_items, Count(schema, ptr, "maxItems", 0));
  }
  if (auto it = schema.find("uniqueItems"); it != schema.end() && *it == true) {
    if (!max_items || *max_items > 1) {
      return Error(ptr, "uniqueItems", "is not supported (except with maxItems <= 1)");
    }
  }
  // Positional schemas, then the schema of every later item (nullptr: none).
  std::vector<std::pair<const Json*, std::string>> prefix;
  static const Json kTrue = true;
  const Json* rest = &kTrue;
  std::string rest_ptr = Child(ptr, "items");
  auto items = schema.find("items");
  if (auto p = schema.find("prefixItems"); p != schema.end()) {
    if (!p->is_array()) return Error(ptr, "prefixItems", "is not an array");
    for (size_t i = 0; i < p->size(); ++i) {
      prefix.emplace_back(&(*p)[i], Child(Child(ptr, "prefixItems"), std::to_string(i)));
    }
    if (items != schema.end()) rest = &*items;
  } else if (items != schema.end() && items->is_array()) {
    for (size_t i = 0; i < items->size(); ++i) {
      prefix.emplace_back(&(*items)[i], Child(rest_ptr, std::to_string(i)));
    }
    if (auto a = schema.find("additionalItems"); a != schema.end()) {
      rest = &*a;
      rest_ptr = Child(ptr, "additionalItems");
    }
  } else if (items != schema.end()) {
    rest = &*items;
  }
  const bool rest_allowed = !(rest->is_boolean() && !rest->get<bool>());
  std::optional<uint64_t> limit = max_items;
  if (!rest_allowed) {
    limit = limit ? std::min<uint64_t>(*limit, prefix.size()) : prefix.size();
  }
  if (limit && *limit < min_items) return nfa_->Nothing();
  // Items written one by one up to `unrolled`, then (unbounded) a loop.
  const uint64_t unrolled =
      limit ? *limit : std::max<uint64_t>(prefix.size(), std::max<uint64_t>(min_items, 1));
  if (unrolled > nfa_->max_states() / 4) {
    return Error(ptr, max_items ? "maxItems" : "minItems", "too many items to enforce");
  }
  COLIBRI_ASSIGN_OR_RETURN(Fragment open, nfa_->Literal("["));
  COLIBRI_ASSIGN_OR_RETURN(Fragment close, nfa_->Literal("]"));
  StateId at = open.out;
  for (uint64_t k = 0; k < unrolled; ++k) {
    if (k >= min_items) nfa_->AddEpsilon(at, close.in);
    const bool positional = k < prefix.size();
    const Json& item = positional ? *prefix[k].first : *rest;
    const std::string& where = positional ? prefix[k].second : rest_ptr;
    COLIBRI_ASSIGN_OR_RETURN(Fragment value, Value(item, where, ctx));
    if (k > 0) {
      COLIBRI_ASSIGN_OR_RETURN(Fragment comma, nfa_->Literal(","));
      value = nfa_->Concat(comma, value);
    }
    nfa_->AddEpsilon(at, value.in);
    at = value.out;
  }
  nfa_->AddEpsilon(at, close.in);
  if (!limit && rest_allowed) {
    // More items of the rest schema: ("," item)* after the unrolled ones.
    COLIBRI_ASSIGN_OR_RETURN(Fragment value, Value(*rest, rest_ptr, ctx));
    COLIBRI_ASSIGN_OR_RETURN(Fragment comma, nfa_->Literal(","));
    nfa_->AddEpsilon(at, comma.in);
    nfa_->AddEpsilon(comma.out, value.in);
    nfa_->AddEpsilon(value.out, comma.in);
    nfa_->AddEpsilon(value.out, close.in);
  }
  return Fragment{open.in, close.out};
}

}  // namespace colibri::grammar::internal
