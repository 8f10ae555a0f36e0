// Python str/dict/list methods, Jinja tests and the global functions chat
// templates call.
#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "model/chat_template/interpreter.h"
#include "model/chat_template/utf8.h"

namespace colibri::chat_template {
namespace {

// Python's str.strip family: `chars` None strips whitespace.
std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<uint32_t> cps = ToCodePoints(s);
  std::vector<uint32_t> set;
  const bool whitespace = !chars.is_string();
  if (!whitespace) set = ToCodePoints(chars.str());
  auto strip_it = [&](uint32_t cp) {
    return whitespace ? IsSpace(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip_it(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(cps[end - 1])) --end;
  }
  return FromCodePoints(cps, begin, end);
}

Value Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  Value::List parts;
  if (!sep.is_string()) {
    const std::vector<uint32_t> cps = ToCodePoints(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsSpace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = cps.size();
        while (end > i && IsSpace(cps[end - 1])) --end;
        parts.push_back(Value::String(FromCodePoints(cps, i, end)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !IsSpace(cps[j])) ++j;
      parts.push_back(Value::String(FromCodePoints(cps, i, j)));
      i = j;
    }
    return Value::MakeList(std::move(parts));
  }
  const std::string& d = sep.str();
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t found = s.find(d, start);
    if (found == std::string::npos) break;
    parts.push_back(Value::String(s.substr(start, found - start)));
    start = found + d.size();
  }
  parts.push_back(Value::String(s.substr(start)));
  return Value::MakeList(std::move(parts));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const std::vector<uint32_t> cps = ToCodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = s.find(from, start);
    if (found == std::string::npos) break;
    out.append(s, start, found - start);
    out += to;
    start = found + from.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

bool AffixMatch(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string() || a.str().size() > s.size()) return false;
    return prefix ? s.compare(0, a.str().size(), a.str()) == 0
                  : s.compare(s.size() - a.str().size(), a.str().size(), a.str()) == 0;
  };
  if (affix.is_list()) {
    for (const Value& a : affix.list()) {
      if (one(a)) return true;
    }
    return false;
  }
  return one(affix);
}

absl::StatusOr<Value> StringMethod(Interpreter& in, const std::string& s, const std::string& name,
                                   CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value::String(Strip(s, Arg(args, 0, "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const Value maxsplit = Arg(args, 1, "maxsplit", Value::Int(-1));
    const Value sep = Arg(args, 0, "sep");
    if (sep.is_string() && sep.str().empty()) return in.Fail("empty separator");
    if (name == "rsplit" && maxsplit.int_value() >= 0) {
      // Only the unbounded rsplit equals split; bounded rsplit splits from the right.
      Value all = Split(s, sep, -1);
      Value::List& parts = all.list();
      const int64_t keep = maxsplit.int_value();
      if (sep.is_string() && static_cast<int64_t>(parts.size()) > keep + 1) {
        const size_t head = parts.size() - keep;
        std::string joined;
        for (size_t i = 0; i < head; ++i) joined += (i ? sep.str() : "") + parts[i].str();
        Value::List out = {Value::String(joined)};
        out.insert(out.end(), parts.begin() + head, parts.end());
        return Value::MakeList(std::move(out));
      }
      return all;
    }
    COLIBRI_RETURN_IF_ERROR(in.Charge(s.size()));
    return Split(s, sep, maxsplit.int_value());
  }
  if (name == "startswith" || name == "endswith") {
    return Value::Bool(AffixMatch(s, Arg(args, 0, "prefix"), name == "startswith"));
  }
  if (name == "replace") {
    const Value from = Arg(args, 0, "old"), to = Arg(args, 1, "new");
    if (!from.is_string() || !to.is_string()) return in.Fail("replace() arguments must be str");
    std::string out =
        Replace(s, from.str(), to.str(), Arg(args, 2, "count", Value::Int(-1)).int_value());
    COLIBRI_RETURN_IF_ERROR(in.Charge(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "upper") return Value::String(UpperString(s));
  if (name == "lower") return Value::String(LowerString(s));
  if (name == "title") return Value::String(TitleString(s));
  if (name == "capitalize") return Value::String(CapitalizeString(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    const Value sub = Arg(args, 0, "sub");
    if (!sub.is_string()) return in.Fail(absl::StrCat(name, "() argument must be str"));
    if (name == "count") {
      if (sub.str().empty()) return Value::Int(ToCodePoints(s).size() + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub.str()); p != std::string::npos;
           p = s.find(sub.str(), p + sub.str().size())) {
        ++n;
      }
      return Value::Int(n);
    }
    const size_t p = name == "rfind" ? s.rfind(sub.str()) : s.find(sub.str());
    if (p == std::string::npos) {
      if (name == "index") return in.Fail("substring not found");
      return Value::Int(-1);
    }
    return Value::Int(ToCodePoints(s.substr(0, p)).size());
  }
  if (name == "join") {
    CallArgs join_args;
    join_args.positional.push_back(Value::String(s));
    return CallFilter(in, "join", Arg(args, 0, "iterable"), join_args);
  }
  if (name == "format") return CallFilter(in, "format", Value::String(s), args);
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower") {
    if (s.empty()) return Value::Bool(false);
    bool ok = true, cased = false;
    for (unsigned char c : s) {
      if (name == "isdigit") ok &= absl::ascii_isdigit(c) != 0;
      if (name == "isalpha") ok &= absl::ascii_isalpha(c) != 0;
      if (name == "isalnum") ok &= absl::ascii_isalnum(c) != 0;
      if (name == "isspace") ok &= absl::ascii_isspace(c) != 0;
      if (name == "isupper") ok &= !absl::ascii_islower(c), cased |= absl::ascii_isupper(c) != 0;
      if (name == "islower") ok &= !absl::ascii_isupper(c), cased |= absl::ascii_islower(c) != 0;
    }
    if (name == "isupper" || name == "islower") ok &= cased;
    return Value::Bool(ok);
  }
  if (name == "splitlines") {
    Value::List lines;
    size_t start = 0;
    while (start < s.size()) {
      size_t nl = s.find('\n', start);
      if (nl == std::string::npos) nl = s.size();
      lines.push_back(Value::String(s.substr(start, nl - start)));
      start = nl + 1;
    }
    return Value::MakeList(std::move(lines));
  }
  return absl::NotFoundError(name);
}

absl::StatusOr<Value> DictMethod(Interpreter& in, const Value& d, const std::string& name,
                                 CallArgs& args) {
  if (name == "items" || name == "keys" || name == "values") {
    Value::List out;
    COLIBRI_RETURN_IF_ERROR(in.CountIterations(d.dict().size() / 16));
    for (const auto& [k, v] : d.dict()) {
      if (name == "items") {
        out.push_back(Value::MakeList({k, v}, true));
      } else {
        out.push_back(name == "keys" ? k : v);
      }
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "get") {
    const Value* v = d.Find(Arg(args, 0, "key"));
    return v != nullptr ? *v : Arg(args, 1, "default", Value::None());
  }
  if (name == "copy") return Value::MakeDict(d.dict());
  return absl::NotFoundError(name);
}

bool IsStringMethod(const std::string& name) {
  static const char* const kNames[] = {
      "strip",   "lstrip",  "rstrip",  "split",     "rsplit",     "startswith", "endswith",
      "replace", "upper",   "lower",   "title",     "capitalize", "find",       "rfind",
      "index",   "count",   "join",    "format",    "isdigit",    "isalpha",    "isalnum",
      "isspace", "isupper", "islower", "splitlines"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

bool IsMutatingMethod(const std::string& name) {
  static const char* const kNames[] = {"append", "extend",     "insert",  "pop",  "remove", "clear",
                                       "update", "setdefault", "popitem", "sort", "reverse"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

bool HasMethod(const Value& obj, const std::string& name) {
  if (obj.is_string()) return IsStringMethod(name);
  if (obj.is_namespace()) return false;
  if (obj.is_dict()) {
    return name == "items" || name == "keys" || name == "values" || name == "get" ||
           name == "copy" || IsMutatingMethod(name);
  }
  if (obj.is_list()) return name == "index" || name == "count" || IsMutatingMethod(name);
  return false;
}

absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& obj, const std::string& name,
                                 CallArgs& args) {
  if ((obj.is_list() || obj.is_dict()) && IsMutatingMethod(name)) {
    // transformers renders in Jinja's ImmutableSandboxedEnvironment.
    return in.Fail(absl::StrCat("access to attribute '", name, "' of '", obj.TypeName(),
                                "' object is unsafe"));
  }
  if (obj.is_string()) {
    absl::StatusOr<Value> r = StringMethod(in, obj.str(), name, args);
    if (r.ok() || !absl::IsNotFound(r.status())) return r;
  } else if (obj.is_dict()) {
    absl::StatusOr<Value> r = DictMethod(in, obj, name, args);
    if (r.ok() || !absl::IsNotFound(r.status())) return r;
  } else if (obj.is_list()) {
    const Value x = Arg(args, 0, "value");
    int64_t count = 0;
    for (size_t i = 0; i < obj.list().size(); ++i) {
      if (!ValuesEqual(obj.list()[i], x)) continue;
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++count;
    }
    if (name == "count") return Value::Int(count);
    return in.Fail(absl::StrCat(x.Repr(), " is not in list"));
  }
  return in.Fail(absl::StrCat("'", obj.TypeName(), "' object has no attribute '", name, "'"));
}

absl::StatusOr<bool> CallTest(Interpreter& in, const std::string& name, const Value& v,
                              CallArgs& args) {
  const Value arg = Arg(args, 0, "value");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable")
    return v.is_list() || v.is_string() || v.is_undefined() || (v.is_dict() && !v.is_namespace());
  if (name == "sequence")
    return v.is_list() || v.is_string() || v.is_undefined() || (v.is_dict() && !v.is_namespace());
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "callable") return v.is_callable();
  if (name == "sameas") {
    if (v.kind() != arg.kind()) return false;
    if (v.is_list()) return &v.list() == &arg.list();
    if (v.is_dict()) return &v.dict() == &arg.dict();
    return ValuesEqual(v, arg);
  }
  if (name == "eq" || name == "equalto" || name == "==") return ValuesEqual(v, arg);
  if (name == "ne" || name == "!=") return !ValuesEqual(v, arg);
  if (name == "lt" || name == "lessthan" || name == "<" || name == "gt" || name == "greaterthan" ||
      name == ">" || name == "le" || name == "<=" || name == "ge" || name == ">=") {
    const bool greater =
        name == "gt" || name == "greaterthan" || name == ">" || name == "le" || name == "<=";
    absl::StatusOr<bool> less = greater ? ValueLess(arg, v) : ValueLess(v, arg);
    if (!less.ok()) return in.Fail(less.status().message());
    const bool strict = name == "lt" || name == "lessthan" || name == "<" || name == "gt" ||
                        name == "greaterthan" || name == ">";
    return strict ? *less : !*less;
  }
  if (name == "in") {
    if (arg.is_string()) return v.is_string() && arg.str().find(v.str()) != std::string::npos;
    if (arg.is_list()) {
      for (const Value& item : arg.list()) {
        if (ValuesEqual(item, v)) return true;
      }
      return false;
    }
    if (arg.is_dict()) return arg.Find(v) != nullptr;
    return in.Fail(absl::StrCat("argument of type '", arg.TypeName(), "' is not iterable"));
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) {
      return in.Fail(absl::StrCat("test '", name, "' needs an integer, not ", v.TypeName()));
    }
    if (name == "divisibleby") {
      if (!arg.is_int() || arg.int_value() == 0) return in.Fail("divisibleby needs a non-zero int");
      return v.int_value() % arg.int_value() == 0;
    }
    return (v.int_value() % 2 != 0) == (name == "odd");
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return v.str() == (name == "lower" ? LowerString(v.str()) : UpperString(v.str()));
  }
  if (name == "escaped") return false;
  return in.Fail(absl::StrCat("no test named '", name, "'"));
}

void AddGlobalFunctions(Value::Dict* globals) {
  auto add = [globals](const char* name, NativeFunction fn) {
    globals->emplace_back(Value::String(name), Value::Function(name, std::move(fn)));
  };
  add("raise_exception", [](Interpreter&, CallArgs& args) -> absl::StatusOr<Value> {
    return absl::InvalidArgumentError(Arg(args, 0, "message").ToString());
  });
  add("strftime_now", [](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
    const Value format = Arg(args, 0, "format");
    if (!format.is_string()) return in.Fail("strftime_now() needs a format string");
    return Value::String(absl::FormatTime(format.str(), in.now(), in.time_zone()));
  });
  add("range", [](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& a : args.positional) {
      if (!a.is_int() && !a.is_bool()) return in.Fail("range() arguments must be integers");
    }
    if (args.positional.size() == 1) {
      stop = args.positional[0].int_value();
    } else if (args.positional.size() >= 2) {
      start = args.positional[0].int_value();
      stop = args.positional[1].int_value();
      if (args.positional.size() >= 3) step = args.positional[2].int_value();
    } else {
      return in.Fail("range() expects at least 1 argument");
    }
    if (step == 0) return in.Fail("range() arg 3 must not be zero");
    // The list is built eagerly, so its length is capped by the loop budget.
    const double span = (static_cast<double>(stop) - static_cast<double>(start)) / step;
    const uint64_t n = span <= 0 ? 0 : static_cast<uint64_t>(std::ceil(span));
    if (n > in.limits().max_loop_iterations) {
      return absl::ResourceExhaustedError(absl::StrCat("range() of ", n, " items exceeds the ",
                                                       in.limits().max_loop_iterations,
                                                       " loop iterations limit"));
    }
    Value::List items;
    items.reserve(n);
    for (uint64_t k = 0; k < n; ++k)
      items.push_back(Value::Int(start + static_cast<int64_t>(k) * step));
    return Value::MakeList(std::move(items));
  });
  add("namespace", [](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
    Value ns = Value::MakeNamespace();
    for (const Value& a : args.positional) {
      if (!a.is_dict()) return in.Fail("namespace() positional argument must be a dict");
      for (const auto& [k, v] : a.dict()) ns.Set(k, v);
    }
    for (const auto& [k, v] : args.keyword) ns.Set(Value::String(k), v);
    return ns;
  });
  add("dict", [](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
    Value d = Value::MakeDict();
    for (const Value& a : args.positional) {
      if (!a.is_dict()) return in.Fail("dict() positional argument must be a dict");
      for (const auto& [k, v] : a.dict()) d.Set(k, v);
    }
    for (const auto& [k, v] : args.keyword) d.Set(Value::String(k), v);
    return d;
  });
}

}  // namespace colibri::chat_template
