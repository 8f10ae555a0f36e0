// The expression half of the template parser (parser_internal.h).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/chat_template/parser_internal.h"

namespace colibri::chat_template::internal {

absl::StatusOr<ExprPtr> Parser::MakeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr Parser::Binary(std::string op, ExprPtr left, ExprPtr right, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = Expr::Kind::kBinary;
  e->line = line;
  e->name = std::move(op);
  e->items.push_back(std::move(left));
  e->items.push_back(std::move(right));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseTupleOrExpression() {
  const int line = Peek().line;
  absl::StatusOr<ExprPtr> first = ParseExpression();
  if (!first.ok() || !IsOp(",")) return first;
  auto tuple = std::make_unique<Expr>();
  tuple->kind = Expr::Kind::kTuple;
  tuple->line = line;
  tuple->items.push_back(*std::move(first));
  while (IsOp(",")) {
    Next();
    if (Peek().type == T::kBlockEnd) break;
    absl::StatusOr<ExprPtr> e = ParseExpression();
    if (!e.ok()) return e.status();
    tuple->items.push_back(*std::move(e));
  }
  return ExprPtr(std::move(tuple));
}

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  DepthGuard guard(this);
  if (absl::Status s = CheckDepth(); !s.ok()) return s;
  const int line = Peek().line;
  absl::StatusOr<ExprPtr> value = ParseOr();
  if (!value.ok() || !with_condexpr) return value;
  while (IsName("if")) {
    Next();
    absl::StatusOr<ExprPtr> cond = ParseOr();
    if (!cond.ok()) return cond.status();
    ExprPtr otherwise;
    if (IsName("else")) {
      Next();
      absl::StatusOr<ExprPtr> e = ParseExpression();
      if (!e.ok()) return e.status();
      otherwise = *std::move(e);
    }
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kCondition;
    e->line = line;
    e->items.push_back(*std::move(cond));
    e->items.push_back(*std::move(value));
    e->items.push_back(std::move(otherwise));
    value = ExprPtr(std::move(e));
  }
  return value;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  absl::StatusOr<ExprPtr> left = ParseAnd();
  while (left.ok() && IsName("or")) {
    const int line = Next().line;
    absl::StatusOr<ExprPtr> right = ParseAnd();
    if (!right.ok()) return right.status();
    left = Binary("or", *std::move(left), *std::move(right), line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  absl::StatusOr<ExprPtr> left = ParseNot();
  while (left.ok() && IsName("and")) {
    const int line = Next().line;
    absl::StatusOr<ExprPtr> right = ParseNot();
    if (!right.ok()) return right.status();
    left = Binary("and", *std::move(left), *std::move(right), line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(this);
    if (absl::Status s = CheckDepth(); !s.ok()) return s;
    const int line = Next().line;
    absl::StatusOr<ExprPtr> operand = ParseNot();
    if (!operand.ok()) return operand.status();
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kUnary;
    e->line = line;
    e->name = "not";
    e->items.push_back(*std::move(operand));
    return ExprPtr(std::move(e));
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  absl::StatusOr<ExprPtr> left = ParseMath1();
  if (!left.ok()) return left;
  // Chains (a < b < c) become (a < b) and (b < c) with b evaluated twice;
  // templates only chain plain names and literals.
  std::vector<ExprPtr> terms;
  std::vector<std::string> ops;
  terms.push_back(*std::move(left));
  while (true) {
    std::string op;
    if (Peek().type == T::kOperator &&
        (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == "<=" ||
         Peek().text == ">" || Peek().text == ">=")) {
      op = Next().text;
    } else if (IsName("in")) {
      Next();
      op = "in";
    } else if (IsName("not") && IsName("in", 1)) {
      Next();
      Next();
      op = "notin";
    } else {
      break;
    }
    absl::StatusOr<ExprPtr> right = ParseMath1();
    if (!right.ok()) return right.status();
    ops.push_back(op);
    terms.push_back(*std::move(right));
  }
  if (ops.empty()) return std::move(terms[0]);
  if (ops.size() == 1) {
    const int line = terms[0]->line;
    return Binary(ops[0], std::move(terms[0]), std::move(terms[1]), line);
  }
  return Error(Peek(), "chained comparisons are not supported");
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  absl::StatusOr<ExprPtr> left = ParseConcat();
  while (left.ok() && (IsOp("+") || IsOp("-"))) {
    const Token& op = Next();
    absl::StatusOr<ExprPtr> right = ParseConcat();
    if (!right.ok()) return right.status();
    left = Binary(op.text, *std::move(left), *std::move(right), op.line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  absl::StatusOr<ExprPtr> left = ParseMath2();
  while (left.ok() && IsOp("~")) {
    const Token& op = Next();
    absl::StatusOr<ExprPtr> right = ParseMath2();
    if (!right.ok()) return right.status();
    left = Binary("~", *std::move(left), *std::move(right), op.line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  absl::StatusOr<ExprPtr> left = ParsePow();
  while (left.ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
    const Token& op = Next();
    absl::StatusOr<ExprPtr> right = ParsePow();
    if (!right.ok()) return right.status();
    left = Binary(op.text, *std::move(left), *std::move(right), op.line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  absl::StatusOr<ExprPtr> left = ParseUnary(true);
  while (left.ok() && IsOp("**")) {
    const Token& op = Next();
    absl::StatusOr<ExprPtr> right = ParseUnary(true);
    if (!right.ok()) return right.status();
    left = Binary("**", *std::move(left), *std::move(right), op.line);
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(this);
  if (absl::Status s = CheckDepth(); !s.ok()) return s;
  absl::StatusOr<ExprPtr> node;
  if (IsOp("-") || IsOp("+")) {
    const Token& op = Next();
    absl::StatusOr<ExprPtr> operand = ParseUnary(false);
    if (!operand.ok()) return operand.status();
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kUnary;
    e->line = op.line;
    e->name = op.text;
    e->items.push_back(*std::move(operand));
    node = ExprPtr(std::move(e));
  } else {
    node = ParsePrimary();
    if (!node.ok()) return node;
    node = ParsePostfix(*std::move(node));
  }
  if (!node.ok() || !with_filter) return node;
  return ParseFilterExpr(*std::move(node));
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Peek();
  switch (t.type) {
    case T::kName: {
      Next();
      auto e = std::make_unique<Expr>();
      e->line = t.line;
      if (t.text == "true" || t.text == "True") {
        e->literal = Value::Bool(true);
      } else if (t.text == "false" || t.text == "False") {
        e->literal = Value::Bool(false);
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value::None();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      return ExprPtr(std::move(e));
    }
    case T::kString: {
      std::string s;
      const int line = t.line;
      while (Peek().type == T::kString) s += Next().text;  // adjacent literals join
      auto e = std::make_unique<Expr>();
      e->line = line;
      e->literal = Value::String(std::move(s));
      return ExprPtr(std::move(e));
    }
    case T::kInt:
    case T::kFloat: {
      Next();
      auto e = std::make_unique<Expr>();
      e->line = t.line;
      e->literal = t.type == T::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
      return ExprPtr(std::move(e));
    }
    case T::kOperator:
      if (t.text == "(") return ParseParenthesized();
      if (t.text == "[") return ParseList();
      if (t.text == "{") return ParseDict();
      break;
    default:
      break;
  }
  return Error(t, "expected an expression");
}

absl::StatusOr<ExprPtr> Parser::ParseParenthesized() {
  const int line = Next().line;
  if (IsOp(")")) {
    Next();
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kTuple;
    e->line = line;
    return ExprPtr(std::move(e));
  }
  absl::StatusOr<ExprPtr> first = ParseExpression();
  if (!first.ok()) return first;
  if (IsOp(")")) {
    Next();
    return first;
  }
  auto tuple = std::make_unique<Expr>();
  tuple->kind = Expr::Kind::kTuple;
  tuple->line = line;
  tuple->items.push_back(*std::move(first));
  while (IsOp(",")) {
    Next();
    if (IsOp(")")) break;
    absl::StatusOr<ExprPtr> e = ParseExpression();
    if (!e.ok()) return e;
    tuple->items.push_back(*std::move(e));
  }
  if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
  return ExprPtr(std::move(tuple));
}

absl::StatusOr<ExprPtr> Parser::ParseList() {
  auto list = std::make_unique<Expr>();
  list->kind = Expr::Kind::kList;
  list->line = Next().line;
  while (!IsOp("]")) {
    absl::StatusOr<ExprPtr> e = ParseExpression();
    if (!e.ok()) return e;
    list->items.push_back(*std::move(e));
    if (!IsOp(",")) break;
    Next();
  }
  if (absl::Status s = ExpectOp("]"); !s.ok()) return s;
  return ExprPtr(std::move(list));
}

absl::StatusOr<ExprPtr> Parser::ParseDict() {
  auto dict = std::make_unique<Expr>();
  dict->kind = Expr::Kind::kDict;
  dict->line = Next().line;
  while (!IsOp("}")) {
    absl::StatusOr<ExprPtr> key = ParseExpression();
    if (!key.ok()) return key;
    if (absl::Status s = ExpectOp(":"); !s.ok()) return s;
    absl::StatusOr<ExprPtr> value = ParseExpression();
    if (!value.ok()) return value;
    dict->items.push_back(*std::move(key));
    dict->items.push_back(*std::move(value));
    if (!IsOp(",")) break;
    Next();
  }
  if (absl::Status s = ExpectOp("}"); !s.ok()) return s;
  return ExprPtr(std::move(dict));
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".")) {
      const int line = Next().line;
      auto e = std::make_unique<Expr>();
      e->kind = Expr::Kind::kGetAttr;
      e->line = line;
      if (Peek().type == T::kName) {
        e->name = Next().text;
      } else if (Peek().type == T::kInt) {
        e->kind = Expr::Kind::kGetItem;
        auto index = std::make_unique<Expr>();
        index->line = line;
        index->literal = Value::Int(Next().int_value);
        e->items.push_back(std::move(node));
        e->items.push_back(std::move(index));
        node = std::move(e);
        continue;
      } else {
        return Error(Peek(), "expected an attribute name");
      }
      e->items.push_back(std::move(node));
      node = std::move(e);
    } else if (IsOp("[")) {
      absl::StatusOr<ExprPtr> e = ParseSubscript(std::move(node));
      if (!e.ok()) return e;
      node = *std::move(e);
    } else if (IsOp("(")) {
      auto call = std::make_unique<Expr>();
      call->kind = Expr::Kind::kCall;
      call->line = Peek().line;
      call->items.push_back(std::move(node));
      if (absl::Status s = ParseCallArgs(call.get()); !s.ok()) return s;
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const int line = Next().line;
  ExprPtr parts[3];
  int colons = 0;
  while (true) {
    if (IsOp(":")) {
      Next();
      if (++colons > 2) return Error(Peek(), "too many ':' in a slice");
      continue;
    }
    if (IsOp("]")) break;
    if (parts[colons]) return Error(Peek(), "expected ']'");
    absl::StatusOr<ExprPtr> e = ParseExpression();
    if (!e.ok()) return e;
    parts[colons] = *std::move(e);
  }
  Next();
  auto e = std::make_unique<Expr>();
  e->line = line;
  e->items.push_back(std::move(node));
  if (colons == 0) {
    if (!parts[0]) return Error(Peek(), "empty subscript");
    e->kind = Expr::Kind::kGetItem;
    e->items.push_back(std::move(parts[0]));
  } else {
    e->kind = Expr::Kind::kSlice;
    for (ExprPtr& p : parts) e->items.push_back(std::move(p));
  }
  return ExprPtr(std::move(e));
}

absl::Status Parser::ParseCallArgs(Expr* call) {
  Next();
  while (!IsOp(")")) {
    if (Peek().type == T::kName && IsOp("=", 1)) {
      std::string name = Next().text;
      Next();
      absl::StatusOr<ExprPtr> e = ParseExpression();
      if (!e.ok()) return e.status();
      call->kwargs.emplace_back(std::move(name), *std::move(e));
    } else {
      if (!call->kwargs.empty()) return Error(Peek(), "positional argument after keyword");
      absl::StatusOr<ExprPtr> e = ParseExpression();
      if (!e.ok()) return e.status();
      call->items.push_back(*std::move(e));
    }
    if (!IsOp(",")) break;
    Next();
  }
  return ExpectOp(")");
}

absl::StatusOr<ExprPtr> Parser::ParseFilterCall(ExprPtr operand) {
  auto f = std::make_unique<Expr>();
  f->kind = Expr::Kind::kFilter;
  f->line = Peek().line;
  absl::StatusOr<std::string> name = ExpectName();
  if (!name.ok()) return name.status();
  f->name = *name;
  while (IsOp(".") && Peek(1).type == T::kName) {  // dotted filter names
    Next();
    f->name += "." + Next().text;
  }
  f->items.push_back(std::move(operand));
  if (IsOp("(")) {
    if (absl::Status s = ParseCallArgs(f.get()); !s.ok()) return s;
  }
  return ExprPtr(std::move(f));
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      Next();
      absl::StatusOr<ExprPtr> f = ParseFilterCall(std::move(node));
      if (!f.ok()) return f;
      node = *std::move(f);
    } else if (IsName("is")) {
      absl::StatusOr<ExprPtr> t = ParseTest(std::move(node));
      if (!t.ok()) return t;
      node = *std::move(t);
    } else if (IsOp("(")) {
      auto call = std::make_unique<Expr>();
      call->kind = Expr::Kind::kCall;
      call->line = Peek().line;
      call->items.push_back(std::move(node));
      if (absl::Status s = ParseCallArgs(call.get()); !s.ok()) return s;
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  auto t = std::make_unique<Expr>();
  t->kind = Expr::Kind::kTest;
  t->line = Next().line;
  if (IsName("not")) {
    Next();
    t->negated = true;
  }
  absl::StatusOr<std::string> name = ExpectName();
  if (!name.ok()) return name.status();
  t->name = *name;
  t->items.push_back(std::move(node));
  if (IsOp("(")) {
    if (absl::Status s = ParseCallArgs(t.get()); !s.ok()) return s;
  } else {
    // One argument without parentheses: `is divisibleby 3`, `is sameas none`.
    const Token& p = Peek();
    const bool starts_primary =
        p.type == T::kString || p.type == T::kInt || p.type == T::kFloat ||
        (p.type == T::kOperator && (p.text == "[" || p.text == "{")) ||
        (p.type == T::kName && p.text != "else" && p.text != "or" && p.text != "and" &&
         p.text != "if" && p.text != "is" && p.text != "in" && p.text != "not");
    if (starts_primary) {
      absl::StatusOr<ExprPtr> arg = ParsePrimary();
      if (!arg.ok()) return arg;
      absl::StatusOr<ExprPtr> post = ParsePostfix(*std::move(arg));
      if (!post.ok()) return post;
      t->items.push_back(*std::move(post));
    }
  }
  return ExprPtr(std::move(t));
}

}  // namespace colibri::chat_template::internal
