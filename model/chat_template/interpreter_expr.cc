// Expression evaluation of the Interpreter: Python operator semantics as
// Jinja2 inherits them.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/interpreter.h"
#include "model/chat_template/utf8.h"

namespace colibri::chat_template {

namespace {

absl::Status UndefinedError(Interpreter& in, const Value& v) {
  return in.Fail(absl::StrCat("'", v.undefined_name(), "' is undefined"));
}

// Python's floor division and modulo for ints.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t FloorMod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

absl::StatusOr<Value> Interpreter::GetAttribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(*this, obj);
  if (HasMethod(obj, name)) {
    Value self = obj;
    return Value::Function(name, [self, name](Interpreter& in, CallArgs& args) {
      return CallMethod(in, self, name, args);
    });
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.Find(name)) return *v;
  }
  return Value::Undefined(name);
}

absl::StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(*this, obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.Find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.int_value();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list()[i];
    } else {
      std::vector<uint32_t> cps = ToCodePoints(obj.str());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::String(FromCodePoints(cps, i, i + 1));
    }
    return Value::Undefined(absl::StrCat(obj.TypeName(), " object[", key.int_value(), "]"));
  }
  if (key.is_string()) return GetAttribute(obj, key.str());
  return Value::Undefined(key.ToString());
}

absl::StatusOr<Value> Interpreter::Slice(const Value& obj, const Expr& e) {
  int64_t parts[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.items[k + 1]) continue;
    COLIBRI_ASSIGN_OR_RETURN(Value v, Eval(*e.items[k + 1]));
    if (v.is_none()) continue;
    if (!v.is_int() && !v.is_bool()) return Fail("slice indices must be integers or None");
    parts[k] = v.int_value();
    given[k] = true;
  }
  const int64_t step = parts[2];
  if (step == 0) return Fail("slice step cannot be zero");
  std::vector<uint32_t> cps;
  int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else if (obj.is_string()) {
    cps = ToCodePoints(obj.str());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_undefined()) {
    return UndefinedError(*this, obj);
  } else {
    return Fail(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  // Python's slice.indices().
  auto clamp = [&](int64_t v, bool is_given, int64_t fallback) {
    if (!is_given) return fallback;
    if (v < 0) v += n;
    if (step > 0) return std::min(std::max<int64_t>(v, 0), n);
    return std::min(std::max<int64_t>(v, -1), n - 1);
  };
  const int64_t start = clamp(parts[0], given[0], step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(parts[1], given[1], step > 0 ? n : -1);
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  COLIBRI_RETURN_IF_ERROR(CountIterations(picks.size() / 16));
  if (obj.is_list()) {
    Value::List out;
    out.reserve(picks.size());
    for (int64_t i : picks) out.push_back(obj.list()[i]);
    COLIBRI_RETURN_IF_ERROR(Charge(out.size() * sizeof(Value)));
    return Value::MakeList(std::move(out), obj.is_tuple());
  }
  std::string out;
  for (int64_t i : picks) AppendUtf8(cps[i], &out);
  COLIBRI_RETURN_IF_ERROR(Charge(out.size()));
  return Value::String(std::move(out));
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.items.size(); ++i) {
    COLIBRI_ASSIGN_OR_RETURN(Value v, Eval(*e.items[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [name, expr] : e.kwargs) {
    COLIBRI_ASSIGN_OR_RETURN(Value v, Eval(*expr));
    args.keyword.emplace_back(name, std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.items[0];
  if (callee.kind == Expr::Kind::kGetAttr) {
    // obj.method(...) without materialising a bound method.
    COLIBRI_ASSIGN_OR_RETURN(Value obj, Eval(*callee.items[0]));
    if (obj.is_undefined()) return UndefinedError(*this, obj);
    if (HasMethod(obj, callee.name)) {
      COLIBRI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      line_ = e.line;
      return CallMethod(*this, obj, callee.name, args);
    }
    COLIBRI_ASSIGN_OR_RETURN(Value fn, GetAttribute(obj, callee.name));
    COLIBRI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
    line_ = e.line;
    if (fn.is_undefined()) {
      return Fail(
          absl::StrCat("'", obj.TypeName(), "' object has no attribute '", callee.name, "'"));
    }
    return Call(fn, args);
  }
  COLIBRI_ASSIGN_OR_RETURN(Value fn, Eval(callee));
  COLIBRI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  line_ = e.line;
  return Call(fn, args);
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  DepthGuard guard(this);
  COLIBRI_RETURN_IF_ERROR(guard.Check());
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      Value::List items;
      for (const ExprPtr& item : e.items) {
        COLIBRI_ASSIGN_OR_RETURN(Value v, Eval(*item));
        items.push_back(std::move(v));
      }
      return Value::MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Value dict = Value::MakeDict();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        COLIBRI_ASSIGN_OR_RETURN(Value k, Eval(*e.items[i]));
        COLIBRI_ASSIGN_OR_RETURN(Value v, Eval(*e.items[i + 1]));
        dict.Set(k, std::move(v));
      }
      return dict;
    }
    case Expr::Kind::kGetAttr: {
      COLIBRI_ASSIGN_OR_RETURN(Value obj, Eval(*e.items[0]));
      line_ = e.line;
      return GetAttribute(obj, e.name);
    }
    case Expr::Kind::kGetItem: {
      COLIBRI_ASSIGN_OR_RETURN(Value obj, Eval(*e.items[0]));
      COLIBRI_ASSIGN_OR_RETURN(Value key, Eval(*e.items[1]));
      line_ = e.line;
      return GetItem(obj, key);
    }
    case Expr::Kind::kSlice: {
      COLIBRI_ASSIGN_OR_RETURN(Value obj, Eval(*e.items[0]));
      line_ = e.line;
      return Slice(obj, e);
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter: {
      COLIBRI_ASSIGN_OR_RETURN(Value operand, Eval(*e.items[0]));
      COLIBRI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      line_ = e.line;
      return ApplyFilter(e.name, operand, args);
    }
    case Expr::Kind::kTest: {
      COLIBRI_ASSIGN_OR_RETURN(Value operand, Eval(*e.items[0]));
      COLIBRI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      line_ = e.line;
      COLIBRI_ASSIGN_OR_RETURN(bool result, ApplyTest(e.name, operand, args));
      return Value::Bool(result != e.negated);
    }
    case Expr::Kind::kUnary: {
      COLIBRI_ASSIGN_OR_RETURN(Value v, Eval(*e.items[0]));
      line_ = e.line;
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (v.is_undefined()) return UndefinedError(*this, v);
      if (!v.is_number() && !v.is_bool()) {
        return Fail(absl::StrCat("bad operand type for unary ", e.name, ": '", v.TypeName(), "'"));
      }
      if (e.name == "+") return v.is_bool() ? Value::Int(v.int_value()) : v;
      if (v.is_float()) return Value::Float(-v.number());
      if (v.int_value() == std::numeric_limits<int64_t>::min()) return Fail("integer overflow");
      return Value::Int(-v.int_value());
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e);
    case Expr::Kind::kCondition: {
      COLIBRI_ASSIGN_OR_RETURN(Value cond, Eval(*e.items[0]));
      if (cond.Truthy()) return Eval(*e.items[1]);
      if (e.items[2]) return Eval(*e.items[2]);
      return Value::Undefined("conditional expression");
    }
  }
  return Fail("unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& e) {
  const std::string& op = e.name;
  COLIBRI_ASSIGN_OR_RETURN(Value a, Eval(*e.items[0]));
  if (op == "and") return a.Truthy() ? Eval(*e.items[1]) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*e.items[1]);
  COLIBRI_ASSIGN_OR_RETURN(Value b, Eval(*e.items[1]));
  line_ = e.line;
  if (op == "==") return Value::Bool(ValuesEqual(a, b));
  if (op == "!=") return Value::Bool(!ValuesEqual(a, b));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    if (a.is_undefined()) return UndefinedError(*this, a);
    if (b.is_undefined()) return UndefinedError(*this, b);
    const bool swap = op == ">" || op == "<=";
    absl::StatusOr<bool> less = swap ? ValueLess(b, a) : ValueLess(a, b);
    if (!less.ok()) return Fail(less.status().message());
    return Value::Bool((op == "<" || op == ">") ? *less : !*less);
  }
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return Fail(
            absl::StrCat("'in <string>' requires string as left operand, not ", a.TypeName()));
      }
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& item : b.list()) {
        if (ValuesEqual(item, a)) {
          found = true;
          break;
        }
      }
    } else if (b.is_dict() && !b.is_namespace()) {
      found = b.Find(a) != nullptr;
    } else if (!b.is_undefined()) {
      return Fail(absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
    }
    return Value::Bool(found == (op == "in"));
  }
  if (op == "~") {
    const std::string left = a.is_string() ? std::string() : a.ToString();
    const std::string right = b.is_string() ? std::string() : b.ToString();
    const std::string& l = a.is_string() ? a.str() : left;
    const std::string& r = b.is_string() ? b.str() : right;
    COLIBRI_RETURN_IF_ERROR(Charge(l.size() + r.size()));
    std::string s;
    s.reserve(l.size() + r.size());
    s += l;
    s += r;
    return Value::String(std::move(s));
  }
  return Arithmetic(op, a, b);
}

absl::StatusOr<Value> Interpreter::Arithmetic(const std::string& op, const Value& a,
                                              const Value& b) {
  if (a.is_undefined()) return UndefinedError(*this, a);
  if (b.is_undefined()) return UndefinedError(*this, b);
  const bool numbers = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
  if (numbers) {
    const bool floats = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.number() == 0) return Fail("division by zero");
      return Value::Float(a.number() / b.number());
    }
    if (floats) {
      const double x = a.number(), y = b.number();
      if (op == "+") return Value::Float(x + y);
      if (op == "-") return Value::Float(x - y);
      if (op == "*") return Value::Float(x * y);
      if (op == "**") return Value::Float(std::pow(x, y));
      if (y == 0) return Fail("float division by zero");
      if (op == "//") return Value::Float(std::floor(x / y));
      if (op == "%") {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::Float(m);
      }
    } else {
      const int64_t x = a.int_value(), y = b.int_value();
      int64_t r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r)) return Fail("integer overflow");
        return Value::Int(r);
      }
      if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r)) return Fail("integer overflow");
        return Value::Int(r);
      }
      if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r)) return Fail("integer overflow");
        return Value::Int(r);
      }
      if (op == "**") {
        if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
        int64_t result = 1;
        for (int64_t i = 0; i < y; ++i) {
          if (__builtin_mul_overflow(result, x, &result)) return Fail("integer overflow");
          if (result == 0 || result == 1) break;
        }
        return Value::Int(result);
      }
      if (y == 0) return Fail("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return Fail("integer overflow");
      if (op == "//") return Value::Int(FloorDiv(x, y));
      if (op == "%") return Value::Int(FloorMod(x, y));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      COLIBRI_RETURN_IF_ERROR(Charge(a.str().size() + b.str().size()));
      return Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      Value::List items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      COLIBRI_RETURN_IF_ERROR(Charge(items.size() * sizeof(Value)));
      return Value::MakeList(std::move(items), a.is_tuple());
    }
    if (a.is_string()) {
      return Fail(absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
    if (a.is_list()) {
      return Fail(absl::StrCat("can only concatenate ", a.TypeName(), " (not \"", b.TypeName(),
                               "\") to ", a.TypeName()));
    }
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = (a.is_string() || a.is_list()) ? a : b;
    const Value& count = (a.is_string() || a.is_list()) ? b : a;
    if (count.is_int() || count.is_bool()) {
      const int64_t n = std::max<int64_t>(count.int_value(), 0);
      const size_t unit = seq.is_string() ? seq.str().size() : seq.list().size() * sizeof(Value);
      if (unit > 0 && static_cast<uint64_t>(n) > limits_.max_work_bytes / unit) {
        return absl::ResourceExhaustedError(
            absl::StrCat("line ", line_, ": repetition larger than the work limit"));
      }
      COLIBRI_RETURN_IF_ERROR(Charge(unit * n));
      if (seq.is_string()) {
        std::string out;
        out.reserve(unit * n);
        for (int64_t i = 0; i < n; ++i) out += seq.str();
        return Value::String(std::move(out));
      }
      Value::List items;
      for (int64_t i = 0; i < n; ++i)
        items.insert(items.end(), seq.list().begin(), seq.list().end());
      return Value::MakeList(std::move(items), seq.is_tuple());
    }
  }
  if (op == "%" && a.is_string()) {
    CallArgs args;
    if (b.is_tuple()) {
      args.positional = b.list();
    } else {
      args.positional.push_back(b);
    }
    return CallFilter(*this, "format", a, args);
  }
  return Fail(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '",
                           b.TypeName(), "'"));
}

}  // namespace colibri::chat_template
