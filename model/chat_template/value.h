// The values a chat template computes with: Python's None, bool, int, float,
// str, list/tuple and dict (insertion-ordered), Jinja's Undefined and
// namespace, and callables (macros, bound methods, globals).
//
// Lists, dicts and namespaces are shared by reference, as in Python: copying a
// Value copies a pointer, so `ns.x = ...` through one copy is seen by all.
// Strings are UTF-8. A Value is not thread-safe; a render owns its values.
#ifndef COLIBRI_MODEL_CHAT_TEMPLATE_VALUE_H_
#define COLIBRI_MODEL_CHAT_TEMPLATE_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace colibri::chat_template {

class Value;
class Interpreter;

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A callable: `self` is the interpreter running the call (macros render through
// it); the result or a Status.
using NativeFunction = std::function<absl::StatusOr<Value>(Interpreter& self, CallArgs& args)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  using List = std::vector<Value>;
  // Insertion-ordered; lookups are linear (template dicts are small).
  using Dict = std::vector<std::pair<Value, Value>>;

  Value() = default;  // Undefined
  Value(const Value&) = default;
  Value(Value&&) = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) = default;
  // Tears nested containers down iteratively: a template can nest lists a
  // million deep, which recursive destruction would overflow the stack with.
  ~Value();
  static Value Undefined(std::string name = "");
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(List items = {}, bool tuple = false);
  // A list standing for a Python generator or iterator (what select, map,
  // unique... return): always truthy, no len(), no indexing, not JSON.
  static Value MakeGenerator(List items);
  static Value MakeDict(Dict items = {});
  static Value MakeNamespace(Dict items = {});
  static Value Function(std::string name, NativeFunction fn);
  // JSON -> Value, preserving object key order; InvalidArgument when the
  // JSON nests deeper than max_depth.
  static absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json, int max_depth);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_generator() const { return kind_ == Kind::kList && generator_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return is_bool() ? (b_ ? 1 : 0) : i_; }
  // int, bool or float as a double.
  double number() const { return is_float() ? f_ : static_cast<double>(int_value()); }
  const std::string& str() const { return s_ ? *s_ : EmptyString(); }
  // For Undefined: the name that was looked up (for messages).
  const std::string& undefined_name() const { return str(); }
  List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const std::string& function_name() const { return str(); }
  const NativeFunction& function() const { return *fn_; }

  // Python truthiness (Undefined is false).
  bool Truthy() const;
  // Python str(): what `{{ value }}` prints. None -> "None", lists in repr form.
  // Containers print at most ~max_bytes (shared sublists can make the full
  // text exponentially long) and at most kMaxReprDepth levels deep.
  std::string ToString(size_t max_bytes = kDefaultReprBytes) const;
  // Python repr(): strings quoted as Python does. Same bounds as ToString.
  std::string Repr(size_t max_bytes = kDefaultReprBytes) const;
  static constexpr size_t kDefaultReprBytes = 64u << 20;
  static constexpr int kMaxReprDepth = 256;
  // Type name for messages: "str", "int", "dict", "undefined"...
  std::string TypeName() const;

  // Dict lookup by key; nullptr when absent (or not a dict).
  const Value* Find(const Value& key) const;
  const Value* Find(absl::string_view key) const;
  // Sets or appends a dict entry.
  void Set(const Value& key, Value value) const;
  // Removes every dict entry (a no-op for other kinds). Breaks the reference
  // cycles a template can make through a namespace (`set ns.me = ns`).
  void Clear() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  bool generator_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  static const std::string& EmptyString();
  void AppendRepr(std::string* out, size_t max_bytes, int depth) const;

  // Shared: values are copied often (lookups, loops) and strings can be long.
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const NativeFunction> fn_;
};

// Python ==: numbers compare by value (1 == 1.0 == true), containers deeply
// (up to kMaxReprDepth levels; deeper containers compare unequal).
bool ValuesEqual(const Value& a, const Value& b, int depth = 0);
// Python <: numbers, strings (by code point), lists lexicographically;
// InvalidArgument for other mixes ("'<' not supported between str and int").
absl::StatusOr<bool> ValueLess(const Value& a, const Value& b, int depth = 0);
// Python's repr of a float ("1.0", "0.1", "1e+20", "inf").
std::string FormatFloat(double f);

struct JsonFormat {
  int indent = -1;  // < 0: single line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: Python's default (", " or "," with indent)
  std::string key_separator = ": ";
  size_t max_bytes = SIZE_MAX;  // ResourceExhausted past this many bytes
};
// json.dumps(value, ...) byte for byte; InvalidArgument for Undefined,
// callables and namespaces (not JSON serializable).
absl::StatusOr<std::string> ToJson(const Value& value, const JsonFormat& format, int max_depth);

}  // namespace colibri::chat_template

#endif  // COLIBRI_MODEL_CHAT_TEMPLATE_VALUE_H_
