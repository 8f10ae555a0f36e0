// Renders a parsed template: statements, expressions, scopes and the limits
// that stop hostile templates. One Interpreter per render (not thread-safe);
// the syntax tree it reads is shared and never modified.
#ifndef COLIBRI_MODEL_CHAT_TEMPLATE_INTERPRETER_H_
#define COLIBRI_MODEL_CHAT_TEMPLATE_INTERPRETER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "model/chat_template/ast.h"
#include "model/chat_template/chat_template.h"
#include "model/chat_template/value.h"

namespace colibri::chat_template {

class Interpreter {
 public:
  Interpreter(const TemplateLimits& limits, absl::Time now, absl::TimeZone time_zone);
  // Clears every namespace an attribute was assigned to, so that reference
  // cycles through them (`set ns.me = ns`) do not outlive the render.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `body` with `globals` as the outermost variables.
  absl::StatusOr<std::string> Render(const Body& body, Value::Dict globals);

  // ---- services for builtins (filters, tests, methods, globals) ----

  // InvalidArgument "line N: <message>" at the expression being evaluated.
  absl::Status Fail(absl::string_view message) const;
  // Counts bytes built by string and list operations against the work budget.
  absl::Status Charge(size_t bytes);
  // Counts loop-like iterations (loops, filters walking lists, range).
  absl::Status CountIterations(size_t n);
  const TemplateLimits& limits() const { return limits_; }
  absl::Time now() const { return now_; }
  absl::TimeZone time_zone() const { return time_zone_; }
  // Calls a callable value (macro, bound method, global).
  absl::StatusOr<Value> Call(const Value& callee, CallArgs& args);
  // Applies a filter / test by name (filters such as map and select call these).
  absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& operand, CallArgs& args);
  absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& operand, CallArgs& args);
  // obj.name as Jinja's getattr does (methods first for str/dict/list, then items).
  absl::StatusOr<Value> GetAttribute(const Value& obj, const std::string& name);
  // obj[key] as Jinja's getitem does (items first, then attributes).
  absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
  // The items a `for` iterates: list items, dict keys, string characters.
  absl::StatusOr<Value::List> Iterate(const Value& v);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
  };
  // Counts evaluation depth; Check() fails past limits.max_depth.
  class DepthGuard {
   public:
    explicit DepthGuard(Interpreter* in) : in_(in) { ++in_->depth_; }
    ~DepthGuard() { --in_->depth_; }
    absl::Status Check() const;

   private:
    Interpreter* in_;
  };

  absl::StatusOr<Flow> ExecBody(const Body& body);
  absl::StatusOr<Flow> Exec(const Stmt& stmt);
  absl::StatusOr<Flow> ExecFor(const Stmt& stmt);
  absl::Status ExecSet(const Stmt& stmt);
  absl::StatusOr<std::string> Capture(const Body& body);
  absl::StatusOr<Value> ApplyFilterChain(const std::vector<ExprPtr>& filters, Value value);
  absl::StatusOr<Value> CallMacro(const Stmt& macro, CallArgs& args, const Value& caller);
  absl::Status Append(absl::string_view text);

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first);
  absl::StatusOr<Value> Slice(const Value& obj, const Expr& e);
  absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b);

  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value value);

  const TemplateLimits& limits_;
  const absl::Time now_;
  const absl::TimeZone time_zone_;
  std::vector<std::shared_ptr<Frame>> scopes_;  // [0]: globals and top-level sets
  std::string* out_ = nullptr;
  // Namespaces assigned to during the render (see ~Interpreter).
  std::vector<Value> assigned_namespaces_;
  int depth_ = 0;
  int macro_depth_ = 0;
  int line_ = 0;
  uint64_t iterations_ = 0;
  uint64_t work_bytes_ = 0;
};

// Builtins (builtin_filters.cc, builtin_methods.cc).
absl::StatusOr<Value> CallFilter(Interpreter& in, const std::string& name, const Value& operand,
                                 CallArgs& args);
absl::StatusOr<bool> CallTest(Interpreter& in, const std::string& name, const Value& operand,
                              CallArgs& args);
// `obj.name(args)` for str, dict and list methods; NotFound when `name` is not
// a method of obj's type.
absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& obj, const std::string& name,
                                 CallArgs& args);
bool HasMethod(const Value& obj, const std::string& name);
// range, namespace, dict, raise_exception, strftime_now.
void AddGlobalFunctions(Value::Dict* globals);

// Argument helpers for builtins: the i-th positional or the named keyword
// argument, or `fallback`.
Value Arg(const CallArgs& args, size_t index, absl::string_view name, Value fallback = Value());

}  // namespace colibri::chat_template

#endif  // COLIBRI_MODEL_CHAT_TEMPLATE_INTERPRETER_H_
