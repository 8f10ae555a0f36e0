#include "model/chat_template/interpreter.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/utf8.h"

namespace colibri::chat_template {

absl::Status Interpreter::DepthGuard::Check() const {
  if (in_->depth_ > in_->limits_.max_depth) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "line ", in_->line_, ": evaluation nests deeper than ", in_->limits_.max_depth));
  }
  return absl::OkStatus();
}

Value Arg(const CallArgs& args, size_t index, absl::string_view name, Value fallback) {
  if (index < args.positional.size()) return args.positional[index];
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return v;
  }
  return fallback;
}

Interpreter::Interpreter(const TemplateLimits& limits, absl::Time now, absl::TimeZone time_zone)
    : limits_(limits), now_(now), time_zone_(time_zone) {}

Interpreter::~Interpreter() {
  for (const Value& ns : assigned_namespaces_) ns.Clear();
}

absl::StatusOr<std::string> Interpreter::Render(const Body& body, Value::Dict globals) {
  auto root = std::make_shared<Frame>();
  AddGlobalFunctions(&globals);
  for (auto& [k, v] : globals) {
    if (k.is_string()) root->vars.emplace_back(k.str(), std::move(v));
  }
  scopes_ = {root};
  std::string out;
  out_ = &out;
  COLIBRI_ASSIGN_OR_RETURN(Flow flow, ExecBody(body));
  (void)flow;
  return out;
}

absl::Status Interpreter::Fail(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", message));
}

absl::Status Interpreter::Charge(size_t bytes) {
  work_bytes_ += bytes;
  if (work_bytes_ > limits_.max_work_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("line ", line_, ": template built more than ",
                                                     limits_.max_work_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::CountIterations(size_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "line ", line_, ": more than ", limits_.max_loop_iterations, " loop iterations"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Append(absl::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("line ", line_, ": output longer than ", limits_.max_output_bytes, " bytes"));
  }
  COLIBRI_RETURN_IF_ERROR(Charge(text.size()));
  out_->append(text.data(), text.size());
  return absl::OkStatus();
}

Value Interpreter::Lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    for (const auto& [k, v] : (*it)->vars) {
      if (k == name) return v;
    }
  }
  return Value::Undefined(name);
}

void Interpreter::Assign(const std::string& name, Value value) {
  for (auto& [k, v] : scopes_.back()->vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  scopes_.back()->vars.emplace_back(name, std::move(value));
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecBody(const Body& body) {
  for (const StmtPtr& stmt : body) {
    COLIBRI_ASSIGN_OR_RETURN(Flow flow, Exec(*stmt));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<std::string> Interpreter::Capture(const Body& body) {
  std::string captured;
  std::string* saved = out_;
  out_ = &captured;
  absl::StatusOr<Flow> flow = ExecBody(body);
  out_ = saved;
  if (!flow.ok()) return flow.status();
  return captured;
}

absl::StatusOr<Interpreter::Flow> Interpreter::Exec(const Stmt& stmt) {
  DepthGuard guard(this);
  line_ = stmt.line;
  COLIBRI_RETURN_IF_ERROR(guard.Check());
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      COLIBRI_RETURN_IF_ERROR(Append(stmt.text));
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      COLIBRI_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr));
      if (v.is_string()) {
        COLIBRI_RETURN_IF_ERROR(Append(v.str()));
      } else {
        COLIBRI_RETURN_IF_ERROR(Append(v.ToString(limits_.max_output_bytes)));
      }
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : stmt.branches) {
        COLIBRI_ASSIGN_OR_RETURN(Value c, Eval(*cond));
        if (c.Truthy()) return ExecBody(body);
      }
      return ExecBody(stmt.else_body);
    case Stmt::Kind::kFor:
      return ExecFor(stmt);
    case Stmt::Kind::kSet:
      COLIBRI_RETURN_IF_ERROR(ExecSet(stmt));
      return Flow::kNormal;
    case Stmt::Kind::kSetBlock: {
      COLIBRI_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body));
      COLIBRI_ASSIGN_OR_RETURN(Value v,
                               ApplyFilterChain(stmt.filters, Value::String(std::move(text))));
      Assign(stmt.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case Stmt::Kind::kFilterBlock: {
      COLIBRI_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body));
      COLIBRI_ASSIGN_OR_RETURN(Value v,
                               ApplyFilterChain(stmt.filters, Value::String(std::move(text))));
      COLIBRI_RETURN_IF_ERROR(Append(v.ToString()));
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro: {
      const Stmt* macro = &stmt;
      Assign(stmt.name, Value::Function(stmt.name, [macro](Interpreter& in, CallArgs& args) {
               return in.CallMacro(*macro, args, Value());
             }));
      return Flow::kNormal;
    }
    case Stmt::Kind::kCallBlock: {
      const Stmt* block = &stmt;
      Value caller = Value::Function("caller", [block](Interpreter& in, CallArgs& args) {
        return in.CallMacro(*block, args, Value());
      });
      const Expr& call = *stmt.expr;
      COLIBRI_ASSIGN_OR_RETURN(Value callee, Eval(*call.items[0]));
      COLIBRI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1));
      args.keyword.emplace_back("caller", caller);
      COLIBRI_ASSIGN_OR_RETURN(Value result, Call(callee, args));
      COLIBRI_RETURN_IF_ERROR(Append(result.ToString()));
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kScope:
      return ExecBody(stmt.body);
  }
  return Flow::kNormal;
}

absl::StatusOr<Value> Interpreter::ApplyFilterChain(const std::vector<ExprPtr>& filters,
                                                    Value value) {
  for (const ExprPtr& f : filters) {
    COLIBRI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(*f, 1));
    COLIBRI_ASSIGN_OR_RETURN(value, ApplyFilter(f->name, value, args));
  }
  return value;
}

absl::Status Interpreter::ExecSet(const Stmt& stmt) {
  COLIBRI_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr));
  if (stmt.attribute_target) {
    Value ns = Lookup(stmt.targets[0]);
    if (!ns.is_namespace()) {
      return Fail(
          absl::StrCat("cannot assign attribute on non-namespace object '", stmt.targets[0], "'"));
    }
    bool known = false;
    for (const Value& seen : assigned_namespaces_) known = known || &seen.dict() == &ns.dict();
    if (!known) assigned_namespaces_.push_back(ns);
    ns.Set(Value::String(stmt.targets[1]), std::move(v));
    return absl::OkStatus();
  }
  if (stmt.targets.size() == 1) {
    Assign(stmt.targets[0], std::move(v));
    return absl::OkStatus();
  }
  COLIBRI_ASSIGN_OR_RETURN(Value::List items, Iterate(v));
  if (items.size() != stmt.targets.size()) {
    return Fail(absl::StrCat("cannot unpack ", items.size(), " values into ", stmt.targets.size(),
                             " names"));
  }
  for (size_t i = 0; i < items.size(); ++i) Assign(stmt.targets[i], items[i]);
  return absl::OkStatus();
}

absl::StatusOr<Value::List> Interpreter::Iterate(const Value& v) {
  Value::List items;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return items;
    case Value::Kind::kList:
      items = v.list();
      break;
    case Value::Kind::kDict:
      if (v.is_namespace()) return Fail("'Namespace' object is not iterable");
      for (const auto& [k, val] : v.dict()) items.push_back(k);
      break;
    case Value::Kind::kString: {
      size_t pos = 0;
      while (pos < v.str().size()) {
        const size_t start = pos;
        DecodeUtf8(v.str(), &pos);
        items.push_back(Value::String(v.str().substr(start, pos - start)));
      }
      break;
    }
    default:
      return Fail(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
  COLIBRI_RETURN_IF_ERROR(CountIterations(items.size() / 16));
  return items;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Stmt& stmt) {
  COLIBRI_ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.expr));
  COLIBRI_ASSIGN_OR_RETURN(Value::List all, Iterate(iterable));
  scopes_.push_back(std::make_shared<Frame>());
  struct PopScope {
    Interpreter* in;
    ~PopScope() { in->scopes_.pop_back(); }
  } pop{this};

  auto bind = [&](const Value& item) -> absl::Status {
    if (stmt.targets.size() == 1) {
      Assign(stmt.targets[0], item);
      return absl::OkStatus();
    }
    COLIBRI_ASSIGN_OR_RETURN(Value::List parts, Iterate(item));
    if (parts.size() != stmt.targets.size()) {
      return Fail(absl::StrCat("cannot unpack ", parts.size(), " values into ", stmt.targets.size(),
                               " loop variables"));
    }
    for (size_t i = 0; i < parts.size(); ++i) Assign(stmt.targets[i], parts[i]);
    return absl::OkStatus();
  };

  Value::List items;
  if (stmt.condition) {
    for (const Value& item : all) {
      COLIBRI_RETURN_IF_ERROR(CountIterations(1));
      COLIBRI_RETURN_IF_ERROR(bind(item));
      COLIBRI_ASSIGN_OR_RETURN(Value keep, Eval(*stmt.condition));
      if (keep.Truthy()) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    COLIBRI_RETURN_IF_ERROR(CountIterations(1));
    line_ = stmt.line;
    COLIBRI_RETURN_IF_ERROR(bind(items[i]));
    Value::Dict loop = {
        {Value::String("index"), Value::Int(i + 1)},
        {Value::String("index0"), Value::Int(i)},
        {Value::String("revindex"), Value::Int(n - i)},
        {Value::String("revindex0"), Value::Int(n - i - 1)},
        {Value::String("first"), Value::Bool(i == 0)},
        {Value::String("last"), Value::Bool(i == n - 1)},
        {Value::String("length"), Value::Int(n)},
        {Value::String("depth"), Value::Int(1)},
        {Value::String("depth0"), Value::Int(0)},
        {Value::String("previtem"), i > 0 ? items[i - 1] : Value::Undefined("previtem")},
        {Value::String("nextitem"), i + 1 < n ? items[i + 1] : Value::Undefined("nextitem")},
    };
    const int64_t index = i;
    loop.emplace_back(
        Value::String("cycle"),
        Value::Function("cycle", [index](Interpreter& in, CallArgs& args) -> absl::StatusOr<Value> {
          if (args.positional.empty()) return in.Fail("no items for cycling given");
          return args.positional[index % args.positional.size()];
        }));
    Assign("loop", Value::MakeDict(std::move(loop)));
    COLIBRI_ASSIGN_OR_RETURN(Flow flow, ExecBody(stmt.body));
    if (flow == Flow::kBreak) break;
  }
  if (n == 0) {
    COLIBRI_ASSIGN_OR_RETURN(Flow flow, ExecBody(stmt.else_body));
    (void)flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Value> Interpreter::CallMacro(const Stmt& macro, CallArgs& args,
                                             const Value& caller) {
  if (macro_depth_ >= limits_.max_macro_depth) {
    return absl::ResourceExhaustedError(
        absl::StrCat("line ", line_, ": macro calls nest deeper than ", limits_.max_macro_depth));
  }
  auto frame = std::make_shared<Frame>();
  // Parameters: positional, then keywords, then defaults (evaluated in the
  // macro's scope, as Jinja does).
  std::vector<bool> bound(macro.params.size(), false);
  Value::List varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < macro.params.size()) {
      frame->vars.emplace_back(macro.params[i], args.positional[i]);
      bound[i] = true;
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  Value::Dict kwargs;
  Value caller_value = caller;
  for (auto& [name, value] : args.keyword) {
    bool matched = false;
    for (size_t i = 0; i < macro.params.size(); ++i) {
      if (macro.params[i] == name) {
        if (bound[i]) return Fail(absl::StrCat("macro got multiple values for '", name, "'"));
        frame->vars.emplace_back(name, value);
        bound[i] = matched = true;
      }
    }
    if (matched) continue;
    if (name == "caller") {
      caller_value = value;
    } else {
      kwargs.emplace_back(Value::String(name), value);
    }
  }
  frame->vars.emplace_back("varargs", Value::MakeList(std::move(varargs), true));
  frame->vars.emplace_back("kwargs", Value::MakeDict(std::move(kwargs)));
  if (!caller_value.is_undefined()) frame->vars.emplace_back("caller", caller_value);

  std::vector<std::shared_ptr<Frame>> saved = {scopes_[0], frame};
  saved.swap(scopes_);
  ++macro_depth_;
  absl::Status status;
  for (size_t i = 0; i < macro.params.size() && status.ok(); ++i) {
    if (bound[i]) continue;
    if (macro.defaults[i]) {
      absl::StatusOr<Value> def = Eval(*macro.defaults[i]);
      if (!def.ok()) {
        status = def.status();
      } else {
        frame->vars.emplace_back(macro.params[i], *std::move(def));
      }
    } else {
      frame->vars.emplace_back(macro.params[i], Value::Undefined(macro.params[i]));
    }
  }
  absl::StatusOr<std::string> text = status.ok() ? Capture(macro.body) : status;
  --macro_depth_;
  scopes_.swap(saved);
  if (!text.ok()) return text.status();
  return Value::String(*std::move(text));
}

absl::StatusOr<Value> Interpreter::Call(const Value& callee, CallArgs& args) {
  if (!callee.is_callable()) {
    if (callee.is_undefined()) {
      return Fail(absl::StrCat("'", callee.undefined_name(), "' is undefined"));
    }
    return Fail(absl::StrCat("'", callee.TypeName(), "' object is not callable"));
  }
  DepthGuard guard(this);
  COLIBRI_RETURN_IF_ERROR(guard.Check());
  return callee.function()(*this, args);
}

absl::StatusOr<Value> Interpreter::ApplyFilter(const std::string& name, const Value& operand,
                                               CallArgs& args) {
  return CallFilter(*this, name, operand, args);
}

absl::StatusOr<bool> Interpreter::ApplyTest(const std::string& name, const Value& operand,
                                            CallArgs& args) {
  return CallTest(*this, name, operand, args);
}

}  // namespace colibri::chat_template
