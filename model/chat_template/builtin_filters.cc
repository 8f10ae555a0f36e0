// Jinja's filters as chat templates use them (plus transformers' tojson).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "model/chat_template/interpreter.h"
#include "model/chat_template/utf8.h"

namespace colibri::chat_template {
namespace {

absl::Status NeedDefined(Interpreter& in, const std::string& filter, const Value& v) {
  if (v.is_undefined()) {
    return in.Fail(absl::StrCat("'", v.undefined_name(), "' is undefined (filter ", filter, ")"));
  }
  return absl::OkStatus();
}

// Jinja's attribute paths for filters: "a.b.0".
absl::StatusOr<Value> GetPath(Interpreter& in, const Value& obj, const Value& path) {
  if (path.is_int()) return in.GetItem(obj, path);
  Value cur = obj;
  for (absl::string_view part : absl::StrSplit(path.ToString(), '.')) {
    int64_t index = 0;
    Value key =
        absl::SimpleAtoi(part, &index) ? Value::Int(index) : Value::String(std::string(part));
    COLIBRI_ASSIGN_OR_RETURN(cur, in.GetItem(cur, key));
  }
  return cur;
}

// select/reject/selectattr/rejectattr. As in Jinja2, a falsy value (none,
// undefined, false, 0, "", [], {}) yields nothing and its arguments are not
// looked at: templates write `tools | selectattr(...)` when no tools are given.
absl::StatusOr<Value> Select(Interpreter& in, const Value& seq, CallArgs& args, bool attr,
                             bool keep) {
  if (!seq.Truthy()) return Value::MakeGenerator({});
  COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(seq));
  size_t next = 0;
  Value attribute;
  if (attr) {
    if (args.positional.empty()) return in.Fail("selectattr/rejectattr need an attribute");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) test = args.positional[next++].ToString();
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + next, args.positional.end());
  Value::List out;
  for (const Value& item : items) {
    COLIBRI_RETURN_IF_ERROR(in.CountIterations(1));
    Value subject = item;
    if (attr) {
      COLIBRI_ASSIGN_OR_RETURN(subject, GetPath(in, item, attribute));
    }
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      CallArgs a = test_args;
      COLIBRI_ASSIGN_OR_RETURN(pass, in.ApplyTest(test, subject, a));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeGenerator(std::move(out));
}

// map(filter, ...) or map(attribute=..., default=...); a falsy value yields
// nothing, as in Select.
absl::StatusOr<Value> Map(Interpreter& in, const Value& seq, CallArgs& args) {
  if (!seq.Truthy()) return Value::MakeGenerator({});
  COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(seq));
  const Value attribute = Arg(args, 99, "attribute");
  Value::List out;
  if (!attribute.is_undefined()) {
    const Value fallback = Arg(args, 99, "default");
    for (const Value& item : items) {
      COLIBRI_RETURN_IF_ERROR(in.CountIterations(1));
      COLIBRI_ASSIGN_OR_RETURN(Value v, GetPath(in, item, attribute));
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::MakeGenerator(std::move(out));
  }
  if (args.positional.empty()) return in.Fail("map() needs a filter name or attribute=");
  const std::string filter = args.positional[0].ToString();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    COLIBRI_RETURN_IF_ERROR(in.CountIterations(1));
    CallArgs a = rest;
    COLIBRI_ASSIGN_OR_RETURN(Value v, in.ApplyFilter(filter, item, a));
    out.push_back(std::move(v));
  }
  return Value::MakeGenerator(std::move(out));
}

// Sort key comparison honouring case_sensitive=false for strings.
absl::StatusOr<bool> SortLess(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) {
    return LowerString(a.str()) < LowerString(b.str());
  }
  return ValueLess(a, b);
}

absl::StatusOr<Value> Sort(Interpreter& in, const Value& seq, CallArgs& args) {
  COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(seq));
  const bool reverse = Arg(args, 0, "reverse", Value::Bool(false)).Truthy();
  const bool case_sensitive = Arg(args, 1, "case_sensitive", Value::Bool(false)).Truthy();
  const Value attribute = Arg(args, 2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value key = item;
    if (!attribute.is_undefined() && !attribute.is_none()) {
      COLIBRI_ASSIGN_OR_RETURN(key, GetPath(in, item, attribute));
    }
    keyed.emplace_back(std::move(key), item);
  }
  COLIBRI_RETURN_IF_ERROR(in.CountIterations(keyed.size()));
  absl::Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    if (!error.ok()) return false;
    absl::StatusOr<bool> less = reverse ? SortLess(y.first, x.first, case_sensitive)
                                        : SortLess(x.first, y.first, case_sensitive);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  if (!error.ok()) return in.Fail(error.message());
  Value::List out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> ToJsonFilter(Interpreter& in, const Value& v, CallArgs& args) {
  JsonFormat format;
  const Value indent = Arg(args, 0, "indent", Value::None());
  if (indent.is_int()) {
    if (indent.int_value() > 64) return in.Fail("tojson: indent larger than 64");
    format.indent = static_cast<int>(std::max<int64_t>(indent.int_value(), 0));
  } else if (!indent.is_none()) {
    return in.Fail("tojson: indent must be an integer");
  }
  format.ensure_ascii = Arg(args, 1, "ensure_ascii", Value::Bool(false)).Truthy();
  const Value separators = Arg(args, 2, "separators", Value::None());
  if (separators.is_list() && separators.list().size() == 2) {
    format.item_separator = separators.list()[0].ToString();
    format.key_separator = separators.list()[1].ToString();
  }
  format.sort_keys = Arg(args, 3, "sort_keys", Value::Bool(false)).Truthy();
  format.max_bytes = in.limits().max_output_bytes;
  absl::StatusOr<std::string> json = ToJson(v, format, in.limits().max_depth);
  if (!json.ok()) return in.Fail(json.status().message());
  COLIBRI_RETURN_IF_ERROR(in.Charge(json->size()));
  return Value::String(*std::move(json));
}

// One str.format field with a spec "[[fill]align][width][.precision][type]".
absl::StatusOr<std::string> FormatSpec(Interpreter& in, const Value& v, const std::string& spec) {
  if (spec.empty()) return v.ToString();
  size_t i = 0;
  std::string fill = " ";
  char align = '\0';
  if (spec.size() >= 2 && std::strchr("<>^", spec[1]) != nullptr) {
    fill = spec.substr(0, 1);
    align = spec[1];
    i = 2;
  } else if (std::strchr("<>^", spec[0]) != nullptr) {
    align = spec[0];
    i = 1;
  }
  size_t width = 0;
  while (i < spec.size() && absl::ascii_isdigit(static_cast<unsigned char>(spec[i]))) {
    width = width * 10 + (spec[i++] - '0');
    if (width > 4096) return in.Fail("format: width too large");
  }
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    precision = 0;
    while (++i < spec.size() && absl::ascii_isdigit(static_cast<unsigned char>(spec[i]))) {
      precision = std::min(precision * 10 + (spec[i] - '0'), 100);
    }
  }
  const char type = i < spec.size() ? spec[i++] : '\0';
  if (i != spec.size()) return in.Fail(absl::StrCat("format: unsupported spec '", spec, "'"));
  std::string text;
  if (type == 'f' || type == 'e' || type == 'g' || type == '%') {
    if (!v.is_number() && !v.is_bool()) return in.Fail("format: a number is required");
    char buf[512];
    const double x = type == '%' ? v.number() * 100 : v.number();
    std::snprintf(buf, sizeof(buf),
                  type == 'e'   ? "%.*e"
                  : type == 'g' ? "%.*g"
                                : "%.*f",
                  precision < 0 ? 6 : precision, x);
    text = buf;
    if (type == '%') text += '%';
  } else if (type == 'd') {
    if (!v.is_int() && !v.is_bool()) return in.Fail("format: an integer is required");
    text = absl::StrCat(v.int_value());
  } else {
    text = v.ToString();
    if (precision >= 0)
      text = FromCodePoints(ToCodePoints(text), 0,
                            std::min<size_t>(precision, ToCodePoints(text).size()));
  }
  const size_t len = ToCodePoints(text).size();
  if (len >= width) return text;
  if (align == '\0') align = v.is_number() ? '>' : '<';
  const size_t pad = width - len;
  const size_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
  std::string out;
  for (size_t k = 0; k < left; ++k) out += fill;
  out += text;
  for (size_t k = 0; k < pad - left; ++k) out += fill;
  return out;
}

// Python's "%" string formatting and str.format, for the common cases.
absl::StatusOr<Value> Format(Interpreter& in, const std::string& fmt, CallArgs& args,
                             bool percent_style) {
  std::string out;
  size_t next = 0;
  if (percent_style) {
    for (size_t i = 0; i < fmt.size(); ++i) {
      if (fmt[i] != '%' || i + 1 >= fmt.size()) {
        out += fmt[i];
        continue;
      }
      // %[flags][width][.precision]conversion
      size_t j = i + 1;
      while (j < fmt.size() && std::strchr("-+ 0#", fmt[j]) != nullptr) ++j;
      while (j < fmt.size() && absl::ascii_isdigit(static_cast<unsigned char>(fmt[j]))) ++j;
      if (j < fmt.size() && fmt[j] == '.') {
        ++j;
        while (j < fmt.size() && absl::ascii_isdigit(static_cast<unsigned char>(fmt[j]))) ++j;
      }
      if (j >= fmt.size()) return in.Fail("incomplete format");
      const std::string flags = fmt.substr(i + 1, j - i - 1);
      const char spec = fmt[j];
      i = j;
      if (spec == '%') {
        out += '%';
        continue;
      }
      if (flags.size() > 8) return in.Fail("format width too long");
      if (next >= args.positional.size()) return in.Fail("not enough arguments for format string");
      const Value& a = args.positional[next++];
      char buf[512];
      if (spec == 's' || spec == 'r') {
        const std::string text = spec == 's' ? a.ToString() : a.Repr();
        if (flags.empty()) {
          out += text;
          continue;
        }
        std::snprintf(buf, sizeof(buf), ("%" + flags + "s").c_str(), text.c_str());
      } else if (spec == 'd' || spec == 'i' || spec == 'x' || spec == 'X' || spec == 'o') {
        if (!a.is_number() && !a.is_bool()) {
          return in.Fail(absl::StrCat("%", std::string(1, spec), " format: a number is required"));
        }
        const long long n = a.is_float() ? static_cast<long long>(a.number()) : a.int_value();
        std::snprintf(buf, sizeof(buf), ("%" + flags + "ll" + (spec == 'i' ? 'd' : spec)).c_str(),
                      n);
      } else if (std::strchr("feEgGF", spec) != nullptr) {
        if (!a.is_number() && !a.is_bool()) {
          return in.Fail(absl::StrCat("%", std::string(1, spec), " format: a number is required"));
        }
        std::snprintf(buf, sizeof(buf), ("%" + flags + spec).c_str(), a.number());
      } else {
        return in.Fail(absl::StrCat("unsupported format character '", std::string(1, spec), "'"));
      }
      out += buf;
    }
    if (next < args.positional.size()) {
      return in.Fail("not all arguments converted during string formatting");
    }
    return Value::String(std::move(out));
  }
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) return in.Fail("single '{' in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    const size_t colon = field.find(':');
    const std::string key = field.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    int64_t index = 0;
    Value arg;
    if (key.empty()) {
      if (next >= args.positional.size()) return in.Fail("format: not enough arguments");
      arg = args.positional[next++];
    } else if (absl::SimpleAtoi(key, &index)) {
      if (index < 0 || static_cast<size_t>(index) >= args.positional.size()) {
        return in.Fail("format: index out of range");
      }
      arg = args.positional[index];
    } else {
      arg = Arg(args, SIZE_MAX, key);
      if (arg.is_undefined()) return in.Fail(absl::StrCat("format: no argument '", key, "'"));
    }
    COLIBRI_ASSIGN_OR_RETURN(std::string piece, FormatSpec(in, arg, spec));
    out += piece;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Indent(Interpreter& in, const std::string& s, CallArgs& args) {
  const Value width = Arg(args, 0, "width", Value::Int(4));
  std::string pad;
  if (width.is_string()) {
    pad = width.str();
  } else {
    if (width.int_value() < 0 || width.int_value() > 1024) return in.Fail("indent: bad width");
    pad.assign(static_cast<size_t>(width.int_value()), ' ');
  }
  const bool first = Arg(args, 1, "first", Value::Bool(false)).Truthy();
  const bool blank = Arg(args, 2, "blank", Value::Bool(false)).Truthy();
  std::vector<std::string> lines = absl::StrSplit(s, '\n');
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    const bool pad_it = (i > 0 || first) && (blank || !lines[i].empty());
    if (pad_it) out += pad;
    out += lines[i];
  }
  COLIBRI_RETURN_IF_ERROR(in.Charge(out.size()));
  return Value::String(std::move(out));
}

absl::StatusOr<Value> ToInt(const Value& v, const Value& fallback) {
  if (v.is_int() || v.is_bool()) return Value::Int(v.int_value());
  if (v.is_float()) {
    if (!std::isfinite(v.number()) || std::fabs(v.number()) > 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(v.number()));
  }
  if (v.is_string()) {
    std::string s(absl::StripAsciiWhitespace(v.str()));
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    int64_t i = 0;
    if (absl::SimpleAtoi(s, &i)) return Value::Int(i);
    double d = 0;
    if (absl::SimpleAtod(s, &d) && std::isfinite(d) && std::fabs(d) < 9.2e18) {
      return Value::Int(static_cast<int64_t>(d));
    }
  }
  return fallback;
}

}  // namespace

absl::StatusOr<Value> CallFilter(Interpreter& in, const std::string& name, const Value& v,
                                 CallArgs& args) {
  if (name == "tojson") return ToJsonFilter(in, v, args);
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(ToCodePoints(v.str()).size());
    if (v.is_generator()) return in.Fail("object of type 'generator' has no len()");
    if (v.is_list()) return Value::Int(v.list().size());
    if (v.is_dict() && !v.is_namespace()) return Value::Int(v.dict().size());
    if (v.is_undefined()) return Value::Int(0);
    return in.Fail(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
  if (name == "default" || name == "d") {
    const bool boolean = Arg(args, 1, "boolean", Value::Bool(false)).Truthy();
    if (v.is_undefined() || (boolean && !v.Truthy())) {
      return Arg(args, 0, "default_value", Value::String(""));
    }
    return v;
  }
  if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
    // Autoescaping is off for chat templates: escape filters leave text alone... except
    // that escape really escapes in Jinja.
    if (name == "safe") return v.is_string() ? v : Value::String(v.ToString());  // Markup(str)
    std::string out;
    for (char c : v.ToString()) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "string") return v.is_string() ? v : Value::String(v.ToString());
  if (name == "list") {
    COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(v));
    return Value::MakeList(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::MakeGenerator({});
    if (!v.is_dict()) return in.Fail(absl::StrCat("items: expected a mapping, not ", v.TypeName()));
    CallArgs none;
    COLIBRI_ASSIGN_OR_RETURN(Value pairs, CallMethod(in, v, "items", none));
    return Value::MakeGenerator(pairs.list());
  }
  if (name == "dictsort") {
    if (!v.is_dict()) return in.Fail("dictsort: expected a mapping");
    CallArgs none;
    COLIBRI_ASSIGN_OR_RETURN(Value pairs, CallMethod(in, v, "items", none));
    const bool case_sensitive = Arg(args, 0, "case_sensitive", Value::Bool(false)).Truthy();
    const bool by_value = Arg(args, 1, "by", Value::String("key")).ToString() == "value";
    const bool reverse = Arg(args, 2, "reverse", Value::Bool(false)).Truthy();
    CallArgs sort_args;
    sort_args.keyword = {{"reverse", Value::Bool(reverse)},
                         {"case_sensitive", Value::Bool(case_sensitive)},
                         {"attribute", Value::Int(by_value ? 1 : 0)}};
    return Sort(in, pairs, sort_args);
  }
  if (name == "sort") return Sort(in, v, args);
  if (name == "selectattr" || name == "rejectattr") {
    return Select(in, v, args, true, name == "selectattr");
  }
  if (name == "select" || name == "reject") return Select(in, v, args, false, name == "select");
  if (name == "map") return Map(in, v, args);
  if (name == "join") {
    COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(v));
    const std::string sep = Arg(args, 0, "d", Value::String("")).ToString();
    const Value attribute = Arg(args, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += sep;
      Value item = items[i];
      if (!attribute.is_undefined() && !attribute.is_none()) {
        COLIBRI_ASSIGN_OR_RETURN(item, GetPath(in, item, attribute));
      }
      out += item.ToString();
      COLIBRI_RETURN_IF_ERROR(in.Charge(sep.size() + item.ToString().size()));
    }
    return Value::String(std::move(out));
  }
  if (name == "last" && v.is_generator()) {
    return in.Fail("'generator' object is not reversible");
  }
  if (name == "first" || name == "last") {
    if (v.is_list()) {
      if (v.list().empty()) return Value::Undefined(name);
      return name == "first" ? v.list().front() : v.list().back();
    }
    COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(v));
    if (items.empty()) return Value::Undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<uint32_t> cps = ToCodePoints(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value::String(FromCodePoints(cps, 0, cps.size()));
    }
    if (v.is_generator()) return in.Fail("'generator' object is not reversible");
    COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::MakeGenerator(std::move(items));
  }
  if (name == "unique") {
    COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(v));
    COLIBRI_RETURN_IF_ERROR(in.CountIterations(items.size()));
    const bool case_sensitive = Arg(args, 0, "case_sensitive", Value::Bool(false)).Truthy();
    Value::List out;
    for (const Value& item : items) {
      auto same = [&](const Value& o) {
        if (!case_sensitive && item.is_string() && o.is_string()) {
          return LowerString(item.str()) == LowerString(o.str());
        }
        return ValuesEqual(item, o);
      };
      if (std::none_of(out.begin(), out.end(), same)) out.push_back(item);
    }
    return Value::MakeGenerator(std::move(out));
  }
  if (name == "sum") {
    COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(v));
    Value total = Arg(args, 1, "start", Value::Int(0));
    const Value attribute = Arg(args, 0, "attribute");
    for (Value item : items) {
      if (!attribute.is_undefined() && !attribute.is_none()) {
        COLIBRI_ASSIGN_OR_RETURN(item, GetPath(in, item, attribute));
      }
      if (!item.is_number() && !item.is_bool()) return in.Fail("sum: items must be numbers");
      total = total.is_float() || item.is_float()
                  ? Value::Float(total.number() + item.number())
                  : Value::Int(total.int_value() + item.int_value());
    }
    return total;
  }
  if (name == "min" || name == "max") {
    COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(v));
    if (items.empty()) return Value::Undefined(name);
    const bool case_sensitive = Arg(args, 0, "case_sensitive", Value::Bool(false)).Truthy();
    Value best = items[0];
    for (const Value& item : items) {
      COLIBRI_ASSIGN_OR_RETURN(bool less, name == "min" ? SortLess(item, best, case_sensitive)
                                                        : SortLess(best, item, case_sensitive));
      if (less) best = item;
    }
    return best;
  }
  if (name == "abs") {
    if (v.is_float()) return Value::Float(std::fabs(v.number()));
    if (v.is_int() || v.is_bool()) return Value::Int(std::llabs(v.int_value()));
    return in.Fail(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
  }
  if (name == "round") {
    if (!v.is_number() && !v.is_bool()) return in.Fail("round: expected a number");
    const int64_t precision = Arg(args, 0, "precision", Value::Int(0)).int_value();
    const std::string method = Arg(args, 1, "method", Value::String("common")).ToString();
    const double scale = std::pow(10.0, static_cast<double>(precision));
    if (!v.is_float() && method == "common") return Value::Int(v.int_value());
    const double x = v.number() * scale;
    double r = method == "ceil"    ? std::ceil(x)
               : method == "floor" ? std::floor(x)
                                   : std::nearbyint(x);
    return Value::Float(r / scale);
  }
  if (name == "int" || name == "float") COLIBRI_RETURN_IF_ERROR(NeedDefined(in, name, v));
  if (name == "int") return ToInt(v, Arg(args, 0, "default", Value::Int(0)));
  if (name == "float") {
    if (v.is_number() || v.is_bool()) return Value::Float(v.number());
    double d = 0;
    if (v.is_string() && absl::SimpleAtod(absl::StripAsciiWhitespace(v.str()), &d)) {
      return Value::Float(d);
    }
    return Arg(args, 0, "default", Value::Float(0));
  }
  if (name == "bool") return Value::Bool(v.Truthy());
  if (name == "truncate") {
    const std::vector<uint32_t> cps = ToCodePoints(v.ToString());
    const int64_t length = Arg(args, 0, "length", Value::Int(255)).int_value();
    const bool killwords = Arg(args, 1, "killwords", Value::Bool(false)).Truthy();
    const std::string end = Arg(args, 2, "end", Value::String("...")).ToString();
    const int64_t leeway = Arg(args, 3, "leeway", Value::Int(5)).int_value();
    const int64_t n = static_cast<int64_t>(cps.size());
    const int64_t end_len = static_cast<int64_t>(ToCodePoints(end).size());
    if (length < end_len) return in.Fail("truncate: expected length >= the end marker");
    if (n <= length + leeway) return Value::String(v.ToString());
    std::string kept = FromCodePoints(cps, 0, static_cast<size_t>(length - end_len));
    if (!killwords) {
      const size_t space = kept.rfind(' ');
      if (space != std::string::npos) kept.erase(space);
    }
    return Value::String(kept + end);
  }
  if (name == "batch") {
    COLIBRI_ASSIGN_OR_RETURN(Value::List items, in.Iterate(v));
    const int64_t size = Arg(args, 0, "linecount", Value::Int(1)).int_value();
    if (size <= 0) return in.Fail("batch: size must be positive");
    const Value fill = Arg(args, 1, "fill_with", Value::None());
    Value::List out;
    for (size_t i = 0; i < items.size(); i += size) {
      Value::List chunk(items.begin() + i,
                        items.begin() + std::min(items.size(), i + static_cast<size_t>(size)));
      if (!Arg(args, 1, "fill_with").is_undefined()) {
        while (static_cast<int64_t>(chunk.size()) < size) chunk.push_back(fill);
      }
      out.push_back(Value::MakeList(std::move(chunk)));
    }
    return Value::MakeGenerator(std::move(out));
  }
  if (name == "wordcount") {
    CallArgs none;
    COLIBRI_ASSIGN_OR_RETURN(Value words,
                             CallMethod(in, Value::String(v.ToString()), "split", none));
    return Value::Int(words.list().size());
  }
  // The format filter is Python's "%" operator; str.format is "{}" style.
  if (name == "format") return Format(in, v.ToString(), args, /*percent_style=*/true);
  if (name == "str.format") return Format(in, v.ToString(), args, /*percent_style=*/false);
  if (name == "indent") {
    COLIBRI_RETURN_IF_ERROR(NeedDefined(in, name, v));
    if (!v.is_string()) {
      return in.Fail(absl::StrCat("indent: expected a string, not ", v.TypeName()));
    }
    return Indent(in, v.str(), args);
  }
  if (name == "title") {
    // Jinja's own rule (not str.title): words start after "-", "(", "{",
    // "[", "<" or whitespace; their first character is upper-cased, the rest
    // lower-cased.
    const std::vector<uint32_t> cps = ToCodePoints(v.ToString());
    std::string out;
    bool word_start = true;
    for (uint32_t cp : cps) {
      const bool separator =
          cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || IsSpace(cp);
      if (separator) {
        AppendUtf8(cp, &out);
        word_start = true;
        continue;
      }
      std::string one;
      AppendUtf8(cp, &one);
      out += word_start ? UpperString(one) : LowerString(one);
      word_start = false;
    }
    return Value::String(std::move(out));
  }
  // String filters: Jinja applies them to str(value).
  if (name == "trim" || name == "upper" || name == "lower" || name == "capitalize" ||
      name == "title" || name == "replace" || name == "center") {
    Value s = Value::String(v.ToString());  // Undefined is "" here, as in Jinja
    if (name == "trim") {
      CallArgs strip_args;
      strip_args.positional.push_back(Arg(args, 0, "chars", Value::None()));
      return CallMethod(in, s, "strip", strip_args);
    }
    if (name == "center") {
      const int64_t width =
          std::min<int64_t>(Arg(args, 0, "width", Value::Int(80)).int_value(), 4096);
      const int64_t len = static_cast<int64_t>(ToCodePoints(s.str()).size());
      if (len >= width) return s;
      const int64_t left = (width - len) / 2 + ((width - len) % 2 & width % 2);
      return Value::String(std::string(left, ' ') + s.str() + std::string(width - len - left, ' '));
    }
    return CallMethod(in, s, name, args);
  }
  return in.Fail(absl::StrCat("no filter named '", name, "'"));
}

}  // namespace colibri::chat_template
