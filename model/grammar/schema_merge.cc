#include "model/grammar/schema_merge.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace colibri::grammar {
namespace {

constexpr int kNull = 1, kBoolean = 2, kInteger = 4, kFraction = 8, kString = 16, kArray = 32,
              kObject = 64, kAll = 127;

int TypeBits(const std::string& name) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBoolean;
  if (name == "integer") return kInteger;
  if (name == "number") return kInteger | kFraction;
  if (name == "string") return kString;
  if (name == "array") return kArray;
  if (name == "object") return kObject;
  return 0;
}

int ValueBits(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return kNull;
    case Json::value_t::boolean: return kBoolean;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return kInteger;
    case Json::value_t::number_float: {
      const double d = v.get<double>();
      return d == static_cast<double>(static_cast<int64_t>(d)) ? kInteger : kFraction;
    }
    case Json::value_t::string: return kString;
    case Json::value_t::array: return kArray;
    case Json::value_t::object: return kObject;
    default: return 0;
  }
}

Json AllOf(const Json& a, const Json& b) { return Json{{"allOf", Json::array({a, b})}}; }

// The type list of `bits` (integer inside number collapses to number).
Json TypeList(int bits) {
  Json list = Json::array();
  if (bits & kNull) list.push_back("null");
  if (bits & kBoolean) list.push_back("boolean");
  if ((bits & kInteger) && (bits & kFraction)) {
    list.push_back("number");
  } else if (bits & kInteger) {
    list.push_back("integer");
  } else if (bits & kFraction) {
    list.push_back("number");  // fractions alone are not expressible: keep number
  }
  if (bits & kString) list.push_back("string");
  if (bits & kArray) list.push_back("array");
  if (bits & kObject) list.push_back("object");
  return list;
}

int DeclaredTypes(const Json& schema) {
  auto it = schema.find("type");
  if (it == schema.end()) return kAll;
  int bits = 0;
  if (it->is_string()) {
    bits = TypeBits(it->get<std::string>());
  } else if (it->is_array()) {
    for (const Json& t : *it) {
      if (t.is_string()) bits |= TypeBits(t.get<std::string>());
    }
  }
  auto nullable = schema.find("nullable");
  if (nullable != schema.end() && nullable->is_boolean() && nullable->get<bool>()) bits |= kNull;
  return bits;
}

// Values of a const or enum, or null when neither is present.
const Json* Literals(const Json& schema, Json* scratch) {
  if (auto it = schema.find("const"); it != schema.end()) {
    *scratch = Json::array({*it});
    return scratch;
  }
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array()) return &*it;
  return nullptr;
}

bool IsMinKeyword(const std::string& k) {
  return k == "minimum" || k == "minLength" || k == "minItems" || k == "minProperties";
}
bool IsMaxKeyword(const std::string& k) {
  return k == "maximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties";
}

}  // namespace

bool IsAnnotation(const std::string& k) {
  static const std::set<std::string> kAnnotations = {
      "title",    "description", "default",    "examples",   "$comment",  "$schema",
      "$id",      "id",          "readOnly",   "writeOnly",  "deprecated", "$anchor",
      "$defs",    "definitions", "contentMediaType", "contentEncoding", "contentSchema",
      "$vocabulary", "discriminator", "xml", "externalDocs", "example"};
  return kAnnotations.count(k) > 0 || k.rfind("x-", 0) == 0;
}

int PossibleTypes(const Json& schema) {
  if (schema.is_boolean()) return schema.get<bool>() ? kAll : 0;
  if (!schema.is_object()) return kAll;
  int bits = DeclaredTypes(schema);
  Json scratch;
  if (const Json* literals = Literals(schema, &scratch)) {
    int lit = 0;
    for (const Json& v : *literals) lit |= ValueBits(v);
    bits &= lit;
  }
  return bits;
}

namespace {

bool LiteralsDisjoint(const Json& a, const Json& b) {
  Json scratch_a, scratch_b;
  const Json* la = Literals(a, &scratch_a);
  const Json* lb = Literals(b, &scratch_b);
  if (la == nullptr || lb == nullptr) return false;
  for (const Json& v : *la) {
    if (std::find(lb->begin(), lb->end(), v) != lb->end()) return false;
  }
  return true;
}

// `a` admits no key but its properties, and `b` requires one of the others.
bool RequiresUndeclared(const Json& a, const Json& b) {
  auto extra = a.find("additionalProperties");
  if (extra == a.end() || *extra != false || a.contains("patternProperties")) return false;
  auto required = b.find("required");
  if (required == b.end() || !required->is_array()) return false;
  auto declared = a.find("properties");
  for (const Json& name : *required) {
    if (!name.is_string()) continue;
    if (declared == a.end() || !declared->is_object() ||
        !declared->contains(name.get<std::string>())) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool Disjoint(const Json& a, const Json& b) {
  if ((PossibleTypes(a) & PossibleTypes(b)) == 0) return true;
  if (!a.is_object() || !b.is_object()) return false;
  if (LiteralsDisjoint(a, b)) return true;
  // Objects alone from here on.
  if ((PossibleTypes(a) & PossibleTypes(b)) != kObject) return false;
  if (RequiresUndeclared(a, b) || RequiresUndeclared(b, a)) return true;
  // A property both require whose values cannot be the same.
  auto ra = a.find("required");
  auto rb = b.find("required");
  auto pa = a.find("properties");
  auto pb = b.find("properties");
  if (ra == a.end() || rb == b.end() || pa == a.end() || pb == b.end()) return false;
  if (!ra->is_array() || !rb->is_array() || !pa->is_object() || !pb->is_object()) return false;
  for (const Json& name : *ra) {
    if (!name.is_string() || std::find(rb->begin(), rb->end(), name) == rb->end()) continue;
    const std::string key = name.get<std::string>();
    auto sa = pa->find(key);
    auto sb = pb->find(key);
    if (sa == pa->end() || sb == pb->end() || !sa->is_object() || !sb->is_object()) continue;
    if ((PossibleTypes(*sa) & PossibleTypes(*sb)) == 0 || LiteralsDisjoint(*sa, *sb)) return true;
  }
  return false;
}

absl::StatusOr<Json> MergeSchemas(const Json& a, const Json& b) {
  if (a.is_boolean()) return a.get<bool>() ? b : a;
  if (b.is_boolean()) return b.get<bool>() ? a : b;
  if (!a.is_object() || !b.is_object()) {
    return absl::InvalidArgumentError("allOf: a schema is neither an object nor a boolean");
  }
  Json out = a;
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string& k = it.key();
    const Json& vb = it.value();
    if (IsAnnotation(k)) continue;
    auto found = out.find(k);
    if (found == out.end()) {
      out[k] = vb;
      continue;
    }
    Json& va = *found;
    if (va == vb) continue;
    if (k == "type" || k == "nullable") {
      continue;  // merged below from both sides
    } else if (k == "properties") {
      if (!va.is_object() || !vb.is_object()) {
        return absl::InvalidArgumentError("allOf: properties is not an object");
      }
      for (auto p = vb.begin(); p != vb.end(); ++p) {
        auto q = va.find(p.key());
        if (q == va.end()) {
          va[p.key()] = p.value();
        } else {
          *q = AllOf(*q, p.value());
        }
      }
    } else if (k == "required") {
      if (!va.is_array() || !vb.is_array()) {
        return absl::InvalidArgumentError("allOf: required is not an array");
      }
      for (const Json& name : vb) {
        if (std::find(va.begin(), va.end(), name) == va.end()) va.push_back(name);
      }
    } else if (k == "additionalProperties" || k == "items" || k == "additionalItems" ||
               k == "unevaluatedProperties" || k == "propertyNames" || k == "not") {
      if (k == "items" && (va.is_array() || vb.is_array())) {
        return absl::InvalidArgumentError("allOf: items lists cannot be merged");
      }
      if (k == "not") return absl::InvalidArgumentError("allOf: not cannot be merged");
      va = AllOf(va, vb);
    } else if (k == "prefixItems") {
      if (!va.is_array() || !vb.is_array() || va.size() != vb.size()) {
        return absl::InvalidArgumentError("allOf: prefixItems of different lengths");
      }
      for (size_t i = 0; i < va.size(); ++i) va[i] = AllOf(va[i], vb[i]);
    } else if (IsMinKeyword(k) || k == "exclusiveMinimum") {
      if (!va.is_number() || !vb.is_number()) {
        return absl::InvalidArgumentError(absl::StrCat("allOf: ", k, " is not a number"));
      }
      if (vb > va) va = vb;
    } else if (IsMaxKeyword(k) || k == "exclusiveMaximum") {
      if (!va.is_number() || !vb.is_number()) {
        return absl::InvalidArgumentError(absl::StrCat("allOf: ", k, " is not a number"));
      }
      if (vb < va) va = vb;
    } else if (k == "enum" || k == "const") {
      Json sa, sb;
      const Json* la = Literals(out, &sa);
      const Json* lb = Literals(b, &sb);
      if (la == nullptr || lb == nullptr) {
        return absl::InvalidArgumentError("allOf: enum is not an array");
      }
      Json both = Json::array();
      for (const Json& v : *la) {
        if (std::find(lb->begin(), lb->end(), v) != lb->end()) both.push_back(v);
      }
      out.erase("const");
      out["enum"] = both;
    } else if (k == "anyOf" || k == "oneOf") {
      // anyOf(A) and anyOf(B): anyOf of the pairwise conjunctions.
      if (!va.is_array() || !vb.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat("allOf: ", k, " is not an array"));
      }
      Json pairs = Json::array();
      for (const Json& x : va) {
        for (const Json& y : vb) pairs.push_back(AllOf(x, y));
      }
      if (k == "oneOf") {
        return absl::InvalidArgumentError("allOf: two oneOf lists cannot be merged");
      }
      va = pairs;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("allOf: keyword ", k, " differs between the schemas and cannot be merged"));
    }
  }
  // enum and const from b alone are copied above; a const in a with an enum in b
  // is intersected on the enum key.
  if (out.contains("const") && out.contains("enum")) {
    Json both = Json::array();
    if (!out["enum"].is_array()) return absl::InvalidArgumentError("allOf: enum is not an array");
    for (const Json& v : out["enum"]) {
      if (v == out["const"]) both.push_back(v);
    }
    out.erase("const");
    out["enum"] = both;
  }
  // A property one side does not declare must satisfy that side's
  // additionalProperties.
  if (auto props = out.find("properties"); props != out.end() && props->is_object()) {
    for (const Json* side : {&a, &b}) {
      auto extra = side->find("additionalProperties");
      if (extra == side->end() || (extra->is_boolean() && extra->get<bool>())) continue;
      auto declared = side->find("properties");
      for (auto p = props->begin(); p != props->end(); ++p) {
        const bool known = declared != side->end() && declared->is_object() &&
                           declared->contains(p.key());
        if (!known) p.value() = AllOf(p.value(), *extra);
      }
    }
  }
  const int types = DeclaredTypes(a) & DeclaredTypes(b);
  out.erase("nullable");
  if (types != kAll) {
    out["type"] = TypeList(types);
    if (types == 0) out["enum"] = Json::array();  // nothing matches
  } else {
    out.erase("type");
  }
  return out;
}

}  // namespace colibri::grammar
