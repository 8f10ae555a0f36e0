#include "model/grammar/json_schema_compiler.h"

#include <cctype>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "model/grammar/json_primitives.h"
#include "model/grammar/regex_compiler.h"
#include "model/grammar/schema_compiler_internal.h"

namespace colibri::grammar {
namespace internal {
namespace {

// Largest magnitude of a numeric bound (so that bounds and their negations fit
// in int64).
constexpr double kMaxBound = 1e18;
// Nesting of a schema document beyond which it is refused before compiling.
constexpr int kMaxDocumentDepth = 1000;

// Validation keywords with no grammar here: their presence is an error.
constexpr const char* kUnsupported[] = {
    "not", "if", "then", "else", "dependentSchemas", "dependentRequired", "dependencies",
    "$dynamicRef", "$recursiveRef", "multipleOf"};

bool Constrains(const Json& schema, std::initializer_list<const char*> ignored) {
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    if (IsAnnotation(it.key())) continue;
    bool skip = false;
    for (const char* k : ignored) skip = skip || it.key() == k;
    if (!skip) return true;
  }
  return false;
}

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The texts of an enum or const value: its compact dump, and for a number
// with an integral value below 2^53 both its integer and its fraction
// spelling ("2" and "2.0" are the same number to JSON Schema).
std::vector<std::string> Spellings(const Json& value) {
  std::vector<std::string> out = {Dump(value)};
  if (!value.is_number()) return out;
  const double d = value.get<double>();
  if (d != std::floor(d) || !(std::fabs(d) < 9007199254740992.0)) return out;
  const std::string other = value.is_number_float() ? Dump(Json(static_cast<int64_t>(d)))
                                                    : Dump(Json(static_cast<double>(d)));
  if (other != out[0] && other != "-0") out.push_back(other);
  return out;
}

}  // namespace

absl::Status SchemaCompiler::Error(const std::string& ptr, absl::string_view keyword,
                                   absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("#", ptr, ": ", keyword, ": ", what));
}

absl::Status SchemaCompiler::Prefix(const absl::Status& status, const std::string& ptr,
                                    absl::string_view keyword) {
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    return absl::ResourceExhaustedError(
        absl::StrCat("#", ptr, ": ", keyword, ": ", status.message()));
  }
  return Error(ptr, keyword, status.message());
}

std::string SchemaCompiler::Child(const std::string& ptr, absl::string_view key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~') {
      escaped += "~0";
    } else if (c == '/') {
      escaped += "~1";
    } else {
      escaped += c;
    }
  }
  return absl::StrCat(ptr, "/", escaped);
}

bool SchemaCompiler::Inhabited(Fragment f) {
  const std::vector<NfaState>& states = nfa_->states();
  if (stamps_.size() < states.size()) stamps_.resize(states.size() + states.size() / 2, 0);
  const uint32_t stamp = ++stamp_;
  std::vector<StateId> todo = {f.in};
  stamps_[f.in] = stamp;
  auto visit = [&](StateId t) {
    if (stamps_[t] != stamp) {
      stamps_[t] = stamp;
      todo.push_back(t);
    }
  };
  while (!todo.empty()) {
    const StateId s = todo.back();
    todo.pop_back();
    if (s == f.out) {
      proven_[f.in] = f.out;
      return true;
    }
    if (s != f.in) {
      // Every word into a proven fragment can leave it by its out.
      if (auto it = proven_.find(s); it != proven_.end()) {
        visit(it->second);
        continue;
      }
    }
    ForEachSuccessor(states[s], visit);
  }
  return false;
}

bool SchemaCompiler::RefsReplaceSiblings(const Json& root) {
  if (!root.is_object()) return false;
  auto it = root.find("$schema");
  if (it == root.end() || !it->is_string()) return false;
  const std::string& uri = it->get_ref<const std::string&>();
  for (const char* draft : {"draft-03/", "draft-04/", "draft-06/", "draft-07/"}) {
    if (uri.find(draft) != std::string::npos) return true;
  }
  return false;
}

absl::StatusOr<const Json*> SchemaCompiler::Resolve(const std::string& ref,
                                                    const std::string& ptr) const {
  if (ref.empty() || ref[0] != '#') {
    return Error(ptr, "$ref", absl::StrCat("\"", ref, "\": only references into this "
                                           "document (\"#...\") are supported"));
  }
  if (ref.size() > 1 && ref[1] != '/') {
    return Error(ptr, "$ref", absl::StrCat("\"", ref, "\": anchors are not supported"));
  }
  const Json* at = &root_;
  if (ref.size() <= 1) return at;
  for (absl::string_view raw : absl::StrSplit(absl::string_view(ref).substr(2), '/')) {
    std::string token;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '~' && i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
        token += raw[i + 1] == '0' ? '~' : '/';
        ++i;
      } else if (raw[i] == '%' && i + 2 < raw.size() && std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
        token += static_cast<char>(std::stoi(std::string(raw.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        token += raw[i];
      }
    }
    if (at->is_object()) {
      auto it = at->find(token);
      if (it == at->end()) {
        return Error(ptr, "$ref", absl::StrCat("\"", ref, "\" points to nothing"));
      }
      at = &*it;
      continue;
    }
    if (at->is_array() && !token.empty() &&
        token.find_first_not_of("0123456789") == std::string::npos && token.size() < 9) {
      const size_t index = std::stoul(token);
      if (index < at->size()) {
        at = &(*at)[index];
        continue;
      }
    }
    return Error(ptr, "$ref", absl::StrCat("\"", ref, "\" points to nothing"));
  }
  if (at->is_object() || at->is_boolean()) return at;
  return Error(ptr, "$ref", absl::StrCat("\"", ref, "\" does not point to a schema"));
}

absl::StatusOr<const Json*> SchemaCompiler::Flatten(const Json& schema,
                                                    const std::string& ptr) const {
  const Json* at = &schema;
  for (int hops = 0; hops < 64; ++hops) {
    if (!at->is_object()) return at;
    auto ref = at->find("$ref");
    if (ref == at->end()) return at;
    if (!ref->is_string()) return Error(ptr, "$ref", "is not a string");
    // Siblings: not a plain alias (unless the draft ignores them).
    if (!refs_replace_ && Constrains(*at, {"$ref"})) return at;
    COLIBRI_ASSIGN_OR_RETURN(at, Resolve(ref->get<std::string>(), ptr));
  }
  return Error(ptr, "$ref", "references lead in a circle");
}

absl::StatusOr<uint64_t> SchemaCompiler::Count(const Json& schema, const std::string& ptr,
                                               const char* keyword, uint64_t fallback) const {
  auto it = schema.find(keyword);
  if (it == schema.end()) return fallback;
  if (it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0)) {
    return it->get<uint64_t>();
  }
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (d >= 0 && d == std::floor(d) && d < 1e15) return static_cast<uint64_t>(d);
  }
  return Error(ptr, keyword, "is not a non-negative integer");
}

absl::StatusOr<Fragment> SchemaCompiler::Value(const Json& schema, const std::string& ptr,
                                               Context ctx) {
  if (++ctx.depth > options_.max_schema_depth) {
    return Error(ptr, "schema",
                 absl::StrCat("nests deeper than ", options_.max_schema_depth, " schemas"));
  }
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) return nfa_->Nothing();
    if (!any_entry_) {
      absl::StatusOr<StateId> entry = JsonAnyValueEntry(nfa_);
      if (!entry.ok()) return Prefix(entry.status(), ptr, "true");
      any_entry_ = *entry;
    }
    absl::StatusOr<Fragment> any = JsonAnyValueCall(nfa_, *any_entry_);
    if (!any.ok()) return Prefix(any.status(), ptr, "true");
    return any;
  }
  if (!schema.is_object()) return Error(ptr, "schema", "is neither an object nor a boolean");
  if (schema.contains("$ref")) return Reference(schema, ptr, std::move(ctx));
  if (schema.contains("allOf")) return AllOf(schema, ptr, std::move(ctx));
  const bool any_of = schema.contains("anyOf");
  const bool one_of = schema.contains("oneOf");
  if (any_of && one_of) {
    // anyOf(A) and oneOf(B): the conjunction, merged.
    return Error(ptr, "oneOf", "together with anyOf is not supported");
  }
  if (any_of) return AnyOf(schema, ptr, std::move(ctx), "anyOf");
  if (one_of) return AnyOf(schema, ptr, std::move(ctx), "oneOf");
  for (const char* keyword : kUnsupported) {
    if (schema.contains(keyword)) return Error(ptr, keyword, "is not supported");
  }
  if (schema.contains("enum") || schema.contains("const")) {
    return Literals(schema, ptr, std::move(ctx));
  }
  return Typed(schema, ptr, std::move(ctx));
}

absl::StatusOr<Fragment> SchemaCompiler::Reference(const Json& schema, const std::string& ptr,
                                                   Context ctx) {
  const Json& ref = schema["$ref"];
  if (!ref.is_string()) return Error(ptr, "$ref", "is not a string");
  const std::string target_ptr = ref.get<std::string>();
  COLIBRI_ASSIGN_OR_RETURN(const Json* target, Resolve(target_ptr, ptr));
  int expansions = 0;
  for (const auto& [active, structure] : ctx.refs) {
    if (active != target_ptr) continue;
    if (structure == ctx.structure) {
      return Error(ptr, "$ref",
                   absl::StrCat("\"", target_ptr, "\" refers to itself before any text: the "
                                "recursion has no base case"));
    }
    ++expansions;
  }
  deepest_expansion_ = std::max(deepest_expansion_, expansions);
  // Deeper recursion is refused: the grammar keeps a sound subset.
  if (expansions >= options_.max_ref_depth) return nfa_->Nothing();
  ctx.refs.emplace_back(target_ptr, ctx.structure);
  const std::string where = target_ptr.size() > 1 ? target_ptr.substr(1) : "";
  if (refs_replace_ || !Constrains(schema, {"$ref"})) {
    return Value(*target, where, std::move(ctx));
  }
  // Siblings of $ref apply too (2019-09 and later, and documents that name no
  // draft).
  Json siblings = schema;
  siblings.erase("$ref");
  Json both = {{"allOf", Json::array({*target, siblings})}};
  return Value(both, ptr, std::move(ctx));
}

absl::StatusOr<Fragment> SchemaCompiler::AllOf(const Json& schema, const std::string& ptr,
                                               Context ctx) {
  // Collect the conjuncts, following allOf inside allOf and plain $ref aliases.
  std::vector<const Json*> todo = {&schema};
  std::vector<Json> rests;
  rests.reserve(256);
  Json merged = true;
  int visited = 0;
  while (!todo.empty()) {
    if (++visited > 200) return Error(ptr, "allOf", "too many schemas to merge (over 200)");
    const Json* s = todo.back();
    todo.pop_back();
    COLIBRI_ASSIGN_OR_RETURN(s, Flatten(*s, ptr));
    if (s->is_object() && s->contains("$ref")) {
      // A $ref with siblings: its target and the siblings are conjuncts.
      COLIBRI_ASSIGN_OR_RETURN(const Json* target, Resolve((*s)["$ref"].get<std::string>(), ptr));
      rests.push_back(*s);
      rests.back().erase("$ref");
      // A stack: pushed last, merged first (properties keep document order).
      todo.push_back(&rests.back());
      todo.push_back(target);
      continue;
    }
    if (s->is_object() && s->contains("allOf")) {
      const Json& list = (*s)["allOf"];
      if (!list.is_array()) return Error(ptr, "allOf", "is not an array");
      rests.push_back(*s);
      rests.back().erase("allOf");
      todo.push_back(&rests.back());
      for (auto item = list.rbegin(); item != list.rend(); ++item) todo.push_back(&*item);
      continue;
    }
    absl::StatusOr<Json> next = MergeSchemas(merged, *s);
    if (!next.ok()) return Prefix(next.status(), ptr, "allOf");
    merged = std::move(*next);
  }
  return Value(merged, ptr, std::move(ctx));
}

absl::StatusOr<Fragment> SchemaCompiler::AnyOf(const Json& schema, const std::string& ptr,
                                               Context ctx, const std::string& keyword) {
  const Json& list = schema[keyword];
  if (!list.is_array() || list.empty()) return Error(ptr, keyword, "is not a non-empty array");
  Json rest = schema;
  rest.erase(keyword);
  const bool has_rest = Constrains(rest, {});
  if (keyword == "oneOf") {
    // Exactly one must match: as anyOf only when no two can match together.
    std::vector<const Json*> flat;
    for (const Json& alternative : list) {
      COLIBRI_ASSIGN_OR_RETURN(const Json* f, Flatten(alternative, ptr));
      flat.push_back(f);
    }
    for (size_t i = 0; i < flat.size(); ++i) {
      for (size_t j = i + 1; j < flat.size(); ++j) {
        if (!Disjoint(*flat[i], *flat[j])) {
          return Error(ptr, "oneOf",
                       absl::StrCat("alternatives ", i, " and ", j,
                                    " may both match; oneOf is enforced only when its "
                                    "alternatives exclude each other (by type or by a required "
                                    "property's const/enum)"));
        }
      }
    }
  }
  std::vector<Fragment> parts;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = Child(Child(ptr, keyword), std::to_string(i));
    absl::StatusOr<Fragment> part;
    if (has_rest) {
      Json both = {{"allOf", Json::array({rest, list[i]})}};
      part = Value(both, where, ctx);
    } else {
      part = Value(list[i], where, ctx);
    }
    if (!part.ok()) return part.status();
    parts.push_back(*part);
  }
  return nfa_->Alternate(parts);
}

absl::StatusOr<Fragment> SchemaCompiler::Literals(const Json& schema, const std::string& ptr,
                                                  Context ctx) {
  Json values;
  const char* keyword = "enum";
  if (schema.contains("const")) {
    keyword = "const";
    values = Json::array({schema["const"]});
    if (schema.contains("enum")) {
      COLIBRI_ASSIGN_OR_RETURN(Json merged, MergeSchemas(Json{{"const", schema["const"]}},
                                                         Json{{"enum", schema["enum"]}}));
      values = merged["enum"];
    }
  } else {
    values = schema["enum"];
    if (!values.is_array()) return Error(ptr, "enum", "is not an array");
  }
  // The other keywords apply too: keep the values their grammar accepts.
  Json rest = schema;
  rest.erase("enum");
  rest.erase("const");
  std::optional<CompiledGrammar> check;
  if (Constrains(rest, {"type", "nullable"}) || rest.contains("type")) {
    ByteNfa scratch(options_.max_nfa_states);
    SchemaCompiler sub(root_, options_, &scratch, split_patterns_);
    absl::StatusOr<Fragment> f = sub.Value(rest, ptr, ctx);
    // What the check's compile did decides the retries as much as ours.
    deepest_expansion_ = std::max(deepest_expansion_, sub.deepest_expansion_);
    split_used_ |= sub.split_used_;
    if (!f.ok()) return f.status();
    check.emplace(std::move(scratch));
    check->start = f->in;
    check->accept = f->out;
  }
  std::vector<Fragment> parts;
  for (const Json& value : values) {
    for (const std::string& text : Spellings(value)) {
      if (check && !GrammarAccepts(*check, text)) continue;
      absl::StatusOr<Fragment> f = nfa_->Literal(text);
      if (!f.ok()) return Prefix(f.status(), ptr, keyword);
      parts.push_back(*f);
    }
  }
  return nfa_->Alternate(parts);
}

absl::StatusOr<Fragment> SchemaCompiler::Typed(const Json& schema, const std::string& ptr,
                                               Context ctx) {
  static const char* kTypes[] = {"null", "boolean", "integer", "number",
                                 "string", "array", "object"};
  std::vector<std::string> types;
  if (auto it = schema.find("type"); it != schema.end()) {
    std::vector<Json> names;
    if (it->is_array()) {
      names.assign(it->begin(), it->end());
    } else {
      names.push_back(*it);
    }
    for (const Json& name : names) {
      bool known = false;
      for (const char* t : kTypes) known = known || (name.is_string() && name == t);
      if (!known) return Error(ptr, "type", absl::StrCat(Dump(name), " is not a JSON type"));
      types.push_back(name.get<std::string>());
    }
  } else {
    types.assign(std::begin(kTypes), std::end(kTypes));
  }
  if (auto it = schema.find("nullable"); it != schema.end() && *it == true) {
    types.push_back("null");
  }
  auto has = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
  std::vector<Fragment> parts;
  for (const char* t : kTypes) {
    if (!has(t)) continue;
    const std::string type = t;
    absl::StatusOr<Fragment> f;
    if (type == "null") {
      f = nfa_->Literal("null");
    } else if (type == "boolean") {
      COLIBRI_ASSIGN_OR_RETURN(Fragment yes, nfa_->Literal("true"));
      COLIBRI_ASSIGN_OR_RETURN(Fragment no, nfa_->Literal("false"));
      f = nfa_->Alternate({yes, no});
    } else if (type == "integer") {
      if (has("number")) continue;  // number covers it
      f = Integer(schema, ptr);
    } else if (type == "number") {
      f = Number(schema, ptr);
    } else if (type == "string") {
      f = String(schema, ptr);
    } else if (type == "array") {
      f = Array(schema, ptr, ctx);
    } else {
      f = Object(schema, ptr, ctx);
    }
    if (!f.ok()) return f.status();
    parts.push_back(*f);
  }
  return nfa_->Alternate(parts);
}

absl::StatusOr<Fragment> SchemaCompiler::String(const Json& schema, const std::string& ptr) {
  COLIBRI_ASSIGN_OR_RETURN(uint64_t min_length, Count(schema, ptr, "minLength", 0));
  std::optional<uint64_t> max_length;
  if (schema.contains("maxLength")) {
    COLIBRI_ASSIGN_OR_RETURN(max_length, Count(schema, ptr, "maxLength", 0));
  }
  // Each keyword gives a body language; the string's body is in all of them.
  std::vector<Fragment> bodies;
  if (auto pattern = schema.find("pattern"); pattern != schema.end()) {
    if (!pattern->is_string()) return Error(ptr, "pattern", "is not a string");
    absl::StatusOr<Fragment> f = CompileRegex(pattern->get<std::string>(), nfa_);
    if (!f.ok()) return Prefix(f.status(), ptr, "pattern");
    bodies.push_back(*f);
  }
  if (auto format = schema.find("format"); format != schema.end()) {
    if (!format->is_string()) return Error(ptr, "format", "is not a string");
    absl::StatusOr<Fragment> f = JsonFormatBody(nfa_, format->get<std::string>());
    if (!f.ok()) return Prefix(f.status(), ptr, "format");
    bodies.push_back(*f);
  }
  if (min_length > 0 || max_length || bodies.empty()) {
    absl::StatusOr<Fragment> f = JsonStringBody(nfa_, min_length, max_length);
    if (!f.ok()) return Prefix(f.status(), ptr, max_length ? "maxLength" : "minLength");
    bodies.push_back(*f);
  }
  Fragment body = bodies[0];
  for (size_t i = 1; i < bodies.size(); ++i) {
    absl::StatusOr<Fragment> both = nfa_->Intersect(body, bodies[i]);
    if (!both.ok()) return Prefix(both.status(), ptr, "pattern");
    body = *both;
  }
  return Quoted(nfa_, body);
}

namespace {

// The numeric bounds of a schema as (value, inclusive), draft-4 boolean
// exclusive flags included.
struct Bounds {
  std::optional<std::pair<double, bool>> lo, hi;
};

absl::StatusOr<Bounds> ReadBounds(const Json& schema, const std::string& ptr) {
  Bounds b;
  auto number = [&](const char* k) -> absl::StatusOr<std::optional<double>> {
    auto it = schema.find(k);
    if (it == schema.end() || it->is_boolean()) return std::nullopt;
    if (!it->is_number()) return SchemaCompiler::Error(ptr, k, "is not a number");
    const double v = it->get<double>();
    if (!(std::fabs(v) <= kMaxBound)) {
      return SchemaCompiler::Error(ptr, k, "bounds beyond +-1e18 are not supported");
    }
    return v;
  };
  auto flag = [&](const char* k) {
    auto it = schema.find(k);
    return it != schema.end() && *it == true;
  };
  COLIBRI_ASSIGN_OR_RETURN(std::optional<double> minimum, number("minimum"));
  COLIBRI_ASSIGN_OR_RETURN(std::optional<double> maximum, number("maximum"));
  COLIBRI_ASSIGN_OR_RETURN(std::optional<double> ex_min, number("exclusiveMinimum"));
  COLIBRI_ASSIGN_OR_RETURN(std::optional<double> ex_max, number("exclusiveMaximum"));
  if (minimum) b.lo = std::make_pair(*minimum, !flag("exclusiveMinimum"));
  if (ex_min && (!b.lo || *ex_min >= b.lo->first)) b.lo = std::make_pair(*ex_min, false);
  if (maximum) b.hi = std::make_pair(*maximum, !flag("exclusiveMaximum"));
  if (ex_max && (!b.hi || *ex_max <= b.hi->first)) b.hi = std::make_pair(*ex_max, false);
  return b;
}

}  // namespace

absl::StatusOr<Fragment> SchemaCompiler::Integer(const Json& schema, const std::string& ptr) {
  COLIBRI_ASSIGN_OR_RETURN(Bounds b, ReadBounds(schema, ptr));
  std::optional<int64_t> lo, hi;
  if (b.lo) {
    const double v = b.lo->first;
    lo = static_cast<int64_t>(std::floor(v));
    if (static_cast<double>(*lo) < v || !b.lo->second) ++*lo;
  }
  if (b.hi) {
    const double v = b.hi->first;
    hi = static_cast<int64_t>(std::ceil(v));
    if (static_cast<double>(*hi) > v || !b.hi->second) --*hi;
  }
  absl::StatusOr<Fragment> f = JsonInteger(nfa_, lo, hi);
  if (!f.ok()) return Prefix(f.status(), ptr, "type");
  return f;
}

absl::StatusOr<Fragment> SchemaCompiler::Number(const Json& schema, const std::string& ptr) {
  COLIBRI_ASSIGN_OR_RETURN(Bounds b, ReadBounds(schema, ptr));
  std::optional<NumberBound> lo, hi;
  for (const auto* bound : {&b.lo, &b.hi}) {
    if (*bound && (*bound)->first != std::floor((*bound)->first)) {
      return Error(ptr, bound == &b.lo ? "minimum" : "maximum",
                   "a fractional bound on a number is not supported");
    }
  }
  if (b.lo) lo = NumberBound{static_cast<int64_t>(b.lo->first), b.lo->second};
  if (b.hi) hi = NumberBound{static_cast<int64_t>(b.hi->first), b.hi->second};
  absl::StatusOr<Fragment> f = JsonNumber(nfa_, lo, hi);
  if (!f.ok()) return Prefix(f.status(), ptr, "type");
  return f;
}

namespace {

// Nesting depth of a JSON document, without recursion.
int DocumentDepth(const Json& doc, int limit) {
  std::vector<std::pair<const Json*, int>> todo = {{&doc, 1}};
  int deepest = 0;
  while (!todo.empty()) {
    auto [at, depth] = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, depth);
    if (deepest > limit) return deepest;
    if (at->is_structured()) {
      for (const Json& child : *at) todo.emplace_back(&child, depth + 1);
    }
  }
  return deepest;
}

}  // namespace
}  // namespace internal

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchema(
    const nlohmann::ordered_json& schema, const SchemaCompileOptions& options) {
  if (internal::DocumentDepth(schema, internal::kMaxDocumentDepth) >
      internal::kMaxDocumentDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "#: schema: the document nests deeper than ", internal::kMaxDocumentDepth, " levels"));
  }
  // Out of states: again without splitting keys by their patterns, then
  // with shallower $ref unrolling (smaller languages, still sound), down to
  // one level.
  SchemaCompileOptions attempt = options;
  absl::StatusOr<Fragment> f;
  std::optional<ByteNfa> nfa;
  bool split_patterns = true;
  while (true) {
    nfa.emplace(attempt.max_nfa_states);
    internal::SchemaCompiler compiler(schema, attempt, &*nfa, split_patterns);
    f = compiler.Value(schema, "", internal::Context());
    if (f.ok() || f.status().code() != absl::StatusCode::kResourceExhausted) break;
    if (compiler.split_used()) {
      split_patterns = false;
      continue;
    }
    const int shallower = std::max(1, attempt.max_ref_depth / 2);
    // No $ref was cut at the shallower depth before the budget ran out: the
    // compile would repeat itself up to the same point.
    if (attempt.max_ref_depth <= 1 || compiler.deepest_expansion() < shallower) break;
    attempt.max_ref_depth = shallower;
    split_patterns = true;
  }
  if (!f.ok()) return f.status();
  if (!NfaAcceptsSomething(*nfa, f->in, f->out)) {
    return absl::InvalidArgumentError(
        "#: schema: no finite instance satisfies it (contradicting keywords, or a $ref "
        "recursion with no base case)");
  }
  auto grammar = std::make_shared<CompiledGrammar>(std::move(*nfa));
  grammar->start = f->in;
  grammar->accept = f->out;
  grammar->max_call_level = static_cast<uint64_t>(std::max(0, options.max_any_depth));
  return std::shared_ptr<const CompiledGrammar>(std::move(grammar));
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchemaText(
    absl::string_view text, const SchemaCompileOptions& options) {
  nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("the schema is not valid JSON");
  return CompileJsonSchema(schema, options);
}

bool GrammarAccepts(const CompiledGrammar& grammar, absl::string_view bytes) {
  // Configurations: an NFA state and the whole stack, (return state or
  // kNoReturn for a key set, level or keys) from the bottom up.
  constexpr StateId kNoReturn = ~StateId{0};
  using Stack = std::vector<std::pair<StateId, uint64_t>>;
  using Config = std::pair<StateId, Stack>;
  const std::vector<NfaState>& states = grammar.nfa.states();
  auto close = [&](std::vector<Config> todo) {
    std::set<Config> out;
    while (!todo.empty()) {
      Config c = std::move(todo.back());
      todo.pop_back();
      if (!out.insert(c).second) continue;
      const NfaState& state = states[c.first];
      for (StateId t : state.epsilon) todo.emplace_back(t, c.second);
      const bool call = !c.second.empty() && c.second.back().first != kNoReturn;
      const bool keys = !c.second.empty() && c.second.back().first == kNoReturn;
      for (const OpEdge& op : state.ops) {
        Stack next = c.second;
        if (op.op == StackOp::kCall) {
          const uint64_t level = op.arg + (op.arg != 0 && call ? c.second.back().second : 0);
          if (level > grammar.max_call_level) continue;
          next.emplace_back(op.ret, level);
          todo.emplace_back(op.to, std::move(next));
        } else if (op.op == StackOp::kReturn && call) {
          next.pop_back();
          todo.emplace_back(c.second.back().first, std::move(next));
        } else if (op.op == StackOp::kOpenKeys) {
          next.emplace_back(kNoReturn, 0);
          todo.emplace_back(op.to, std::move(next));
        } else if (op.op == StackOp::kKey && keys && (next.back().second & op.arg) == 0) {
          next.back().second |= op.arg;
          todo.emplace_back(op.to, std::move(next));
        } else if (op.op == StackOp::kCloseKeys && keys &&
                   (next.back().second & op.arg) == op.arg) {
          next.pop_back();
          todo.emplace_back(op.to, std::move(next));
        }
      }
    }
    return out;
  };
  std::set<Config> current = close({Config(grammar.start, {})});
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    std::vector<Config> next;
    for (const Config& config : current) {
      for (const ByteEdge& e : states[config.first].edges) {
        if (b >= e.lo && b <= e.hi) next.emplace_back(e.to, config.second);
      }
    }
    if (next.empty()) return false;
    current = close(std::move(next));
  }
  return current.count(Config(grammar.accept, {})) > 0;
}

}  // namespace colibri::grammar
