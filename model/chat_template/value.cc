#include "model/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace colibri::chat_template {

const std::string& Value::EmptyString() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

Value Value::Undefined(std::string name) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::MakeList(List items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::MakeGenerator(List items) {
  Value v = MakeList(std::move(items));
  v.generator_ = true;
  return v;
}

Value Value::MakeDict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::MakeNamespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.namespace_ = true;
  return v;
}

Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  v.fn_ = std::make_shared<const NativeFunction>(std::move(fn));
  return v;
}

namespace {

absl::StatusOr<Value> FromJsonAt(const nlohmann::ordered_json& json, int depth, int max_depth) {
  using Type = nlohmann::ordered_json::value_t;
  if (depth > max_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template context nests deeper than ", max_depth, " levels"));
  }
  switch (json.type()) {
    case Type::null:
      return Value::None();
    case Type::boolean:
      return Value::Bool(json.get<bool>());
    case Type::number_integer:
      return Value::Int(json.get<int64_t>());
    case Type::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case Type::number_float:
      return Value::Float(json.get<double>());
    case Type::string:
      return Value::String(json.get<std::string>());
    case Type::array: {
      Value::List items;
      items.reserve(json.size());
      for (const auto& item : json) {
        absl::StatusOr<Value> v = FromJsonAt(item, depth + 1, max_depth);
        if (!v.ok()) return v.status();
        items.push_back(*std::move(v));
      }
      return Value::MakeList(std::move(items));
    }
    case Type::object: {
      Value::Dict items;
      items.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        absl::StatusOr<Value> v = FromJsonAt(it.value(), depth + 1, max_depth);
        if (!v.ok()) return v.status();
        items.emplace_back(Value::String(it.key()), *std::move(v));
      }
      return Value::MakeDict(std::move(items));
    }
    default:
      return Value::None();  // binary and discarded values have no template meaning
  }
}

// Values whose containers are being torn down, per thread (see ~Value).
thread_local std::vector<Value>* tl_graveyard = nullptr;

}  // namespace

absl::StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& json, int max_depth) {
  return FromJsonAt(json, 0, max_depth);
}

Value::~Value() {
  const bool sole_list = list_ != nullptr && list_.use_count() == 1 && !list_->empty();
  const bool sole_dict = dict_ != nullptr && dict_.use_count() == 1 && !dict_->empty();
  if (!sole_list && !sole_dict && fn_ == nullptr) return;
  // The outermost destructor drains; nested ones only hand their children
  // over, so the depth of recursion stays constant.
  std::vector<Value> local;
  const bool outermost = tl_graveyard == nullptr;
  if (outermost) tl_graveyard = &local;
  if (sole_list) {
    for (Value& v : *list_) tl_graveyard->push_back(std::move(v));
    list_->clear();
  }
  if (sole_dict) {
    for (auto& [k, v] : *dict_) {
      tl_graveyard->push_back(std::move(k));
      tl_graveyard->push_back(std::move(v));
    }
    dict_->clear();
  }
  if (!outermost) return;
  // fn_ (a bound method holding a Value) is released inside the loop's scope.
  std::shared_ptr<const NativeFunction> fn = std::move(fn_);
  fn.reset();
  while (!local.empty()) {
    Value v = std::move(local.back());
    local.pop_back();
  }
  tl_graveyard = nullptr;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return generator_ || !list_->empty();
    case Kind::kDict:
      return namespace_ || !dict_->empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string FormatFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's repr layout: positional for
  // exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exp_buf;
  } else if (exponent < 0) {
    out = "0." + std::string(-exponent - 1, '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exponent + 1) {
    out = digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
  }
  return negative ? "-" + out : out;
}

namespace {

std::string ReprString(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = use_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::ToString(size_t max_bytes) const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return str();
    default:
      return Repr(max_bytes);
  }
}

std::string Value::Repr(size_t max_bytes) const {
  std::string out;
  AppendRepr(&out, max_bytes, 0);
  return out;
}

void Value::AppendRepr(std::string* out, size_t max_bytes, int depth) const {
  if (out->size() > max_bytes) return;
  switch (kind_) {
    case Kind::kUndefined:
      *out += "Undefined";
      return;
    case Kind::kNone:
      *out += "None";
      return;
    case Kind::kBool:
      *out += b_ ? "True" : "False";
      return;
    case Kind::kInt:
      absl::StrAppend(out, i_);
      return;
    case Kind::kFloat:
      *out += FormatFloat(f_);
      return;
    case Kind::kString:
      *out += ReprString(str());
      return;
    case Kind::kCallable:
      *out += "<function " + str() + ">";
      return;
    case Kind::kList: {
      if (generator_) {
        *out += "<generator object>";
        return;
      }
      if (depth >= kMaxReprDepth) {
        *out += tuple_ ? "(...)" : "[...]";
        return;
      }
      *out += tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size() && out->size() <= max_bytes; ++i) {
        if (i > 0) *out += ", ";
        (*list_)[i].AppendRepr(out, max_bytes, depth + 1);
      }
      if (tuple_ && list_->size() == 1) *out += ",";
      *out += tuple_ ? ")" : "]";
      return;
    }
    case Kind::kDict: {
      // Namespaces are the only mutable containers, so only they can form
      // cycles: their contents are shown at the top level only.
      if (namespace_ && depth > 0) {
        *out += "<Namespace>";
        return;
      }
      if (depth >= kMaxReprDepth) {
        *out += "{...}";
        return;
      }
      *out += namespace_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size() && out->size() <= max_bytes; ++i) {
        if (i > 0) *out += ", ";
        (*dict_)[i].first.AppendRepr(out, max_bytes, depth + 1);
        *out += ": ";
        (*dict_)[i].second.AppendRepr(out, max_bytes, depth + 1);
      }
      *out += namespace_ ? "}>" : "}";
      return;
    }
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return generator_ ? "generator" : tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return namespace_ ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

const Value* Value::Find(const Value& key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (ValuesEqual(k, key)) return &v;
  }
  return nullptr;
}

void Value::Clear() const {
  if (kind_ == Kind::kDict) dict_->clear();
}

const Value* Value::Find(absl::string_view key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void Value::Set(const Value& key, Value value) const {
  for (auto& [k, v] : *dict_) {
    if (ValuesEqual(k, key)) {
      v = std::move(value);
      return;
    }
  }
  dict_->emplace_back(key, std::move(value));
}

bool ValuesEqual(const Value& a, const Value& b, int depth) {
  if (depth > Value::kMaxReprDepth) return false;
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (&a.list() == &b.list()) return a.is_tuple() == b.is_tuple();
      if (a.is_generator() || b.is_generator()) return false;
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!ValuesEqual(a.list()[i], b.list()[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.is_namespace() || b.is_namespace()) return &a.dict() == &b.dict();
      if (&a.dict() == &b.dict()) return true;
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict()) {
        const Value* other = b.Find(k);
        if (other == nullptr || !ValuesEqual(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kCallable:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

absl::StatusOr<bool> ValueLess(const Value& a, const Value& b, int depth) {
  if (depth > Value::kMaxReprDepth) {
    return absl::InvalidArgumentError("comparison of values nested too deeply");
  }
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_float() || b.is_float()) return a.number() < b.number();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order = code points
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (ValuesEqual(a.list()[i], b.list()[i], depth + 1)) continue;
      return ValueLess(a.list()[i], b.list()[i], depth + 1);
    }
    return a.list().size() < b.list().size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

}  // namespace colibri::chat_template
