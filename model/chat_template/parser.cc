#include "model/chat_template/parser.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/chat_template/lexer.h"

namespace colibri::chat_template {
namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : tokens_(std::move(tokens)), max_depth_(max_depth) {}

  absl::StatusOr<Body> ParseAll() {
    Body body;
    std::string end_tag;
    if (absl::Status s = ParseBody({}, &body, &end_tag); !s.ok()) return s;
    if (Peek().type != T::kEnd) return Error(Peek(), "unexpected end tag");
    return body;
  }

 private:
  // Depth guard for recursive descent.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) { ++p_->depth_; }
    ~DepthGuard() { --p_->depth_; }

   private:
    Parser* p_;
  };

  const Token& Peek(size_t ahead = 0) const {
    const size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == T::kOperator && Peek(ahead).text == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == T::kName && Peek(ahead).text == name;
  }

  absl::Status Error(const Token& at, absl::string_view what) const {
    std::string got;
    switch (at.type) {
      case T::kEnd:
        got = "end of template";
        break;
      case T::kBlockEnd:
        got = "'%}'";
        break;
      case T::kVarEnd:
        got = "'}}'";
        break;
      case T::kText:
        got = "text";
        break;
      default:
        got = "'" + at.text + "'";
    }
    return absl::InvalidArgumentError(absl::StrCat("template syntax error at line ", at.line,
                                                   ", column ", at.column, ": ", what, " (found ",
                                                   got, ")"));
  }
  absl::Status CheckDepth() const {
    if (depth_ > max_depth_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("template nests deeper than ", max_depth_, " levels at line ", Peek().line));
    }
    return absl::OkStatus();
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!IsOp(op)) return Error(Peek(), absl::StrCat("expected '", op, "'"));
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().type != T::kBlockEnd) return Error(Peek(), "expected '%}'");
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != T::kName) return Error(Peek(), "expected a name");
    return Next().text;
  }

  // Parses statements until "{% <one of end_tags>" (left unconsumed except the
  // "{%" and the name, which is stored in *end_tag) or the end of the tokens.
  absl::Status ParseBody(std::initializer_list<absl::string_view> end_tags, Body* body,
                         std::string* end_tag) {
    DepthGuard guard(this);
    if (absl::Status s = CheckDepth(); !s.ok()) return s;
    while (true) {
      const Token& t = Peek();
      switch (t.type) {
        case T::kEnd:
          if (end_tags.size() > 0) {
            return Error(t, absl::StrCat("missing {% ", *(end_tags.end() - 1), " %}"));
          }
          return absl::OkStatus();
        case T::kText: {
          auto stmt = std::make_unique<Stmt>();
          stmt->kind = Stmt::Kind::kText;
          stmt->line = t.line;
          stmt->text = Next().text;
          body->push_back(std::move(stmt));
          break;
        }
        case T::kVarBegin: {
          Next();
          auto stmt = std::make_unique<Stmt>();
          stmt->kind = Stmt::Kind::kOutput;
          stmt->line = t.line;
          absl::StatusOr<ExprPtr> e = ParseExpression();
          if (!e.ok()) return e.status();
          stmt->expr = *std::move(e);
          if (Peek().type != T::kVarEnd) return Error(Peek(), "expected '}}'");
          Next();
          body->push_back(std::move(stmt));
          break;
        }
        case T::kBlockBegin: {
          const Token& name = Peek(1);
          if (name.type != T::kName) return Error(name, "expected a tag name");
          for (absl::string_view end : end_tags) {
            if (name.text == end) {
              Next();
              *end_tag = Next().text;
              return absl::OkStatus();
            }
          }
          Next();
          absl::StatusOr<StmtPtr> stmt = ParseTag();
          if (!stmt.ok()) return stmt.status();
          body->push_back(*std::move(stmt));
          break;
        }
        default:
          return Error(t, "unexpected token");
      }
    }
  }

  absl::StatusOr<StmtPtr> ParseTag() {
    const Token& name_token = Next();
    const std::string& tag = name_token.text;
    auto stmt = std::make_unique<Stmt>();
    stmt->line = name_token.line;
    absl::Status s;
    if (tag == "if") {
      s = ParseIf(stmt.get());
    } else if (tag == "for") {
      s = ParseFor(stmt.get());
    } else if (tag == "set") {
      s = ParseSet(stmt.get());
    } else if (tag == "macro") {
      s = ParseMacro(stmt.get());
    } else if (tag == "call") {
      s = ParseCallBlock(stmt.get());
    } else if (tag == "filter") {
      stmt->kind = Stmt::Kind::kFilterBlock;
      s = ParseFilterChain(&stmt->filters, /*required=*/true);
      if (s.ok()) s = ExpectBlockEnd();
      if (s.ok()) s = ParseUntil("endfilter", &stmt->body);
    } else if (tag == "generation") {
      stmt->kind = Stmt::Kind::kScope;
      s = ExpectBlockEnd();
      if (s.ok()) s = ParseUntil("endgeneration", &stmt->body);
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return Error(name_token, absl::StrCat("'", tag, "' outside a loop"));
      stmt->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      s = ExpectBlockEnd();
    } else {
      return Error(name_token, absl::StrCat("unknown tag '", tag, "'"));
    }
    if (!s.ok()) return s;
    return stmt;
  }

  absl::Status ParseUntil(absl::string_view end, Body* body) {
    std::string found;
    if (absl::Status s = ParseBody({end}, body, &found); !s.ok()) return s;
    return ExpectBlockEnd();
  }

  absl::Status ParseIf(Stmt* stmt) {
    stmt->kind = Stmt::Kind::kIf;
    while (true) {
      absl::StatusOr<ExprPtr> cond = ParseExpression();
      if (!cond.ok()) return cond.status();
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      Body body;
      std::string end;
      if (absl::Status s = ParseBody({"elif", "else", "endif"}, &body, &end); !s.ok()) return s;
      stmt->branches.emplace_back(*std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
        if (absl::Status s = ParseBody({"endif"}, &stmt->else_body, &end); !s.ok()) return s;
      }
      return ExpectBlockEnd();
    }
  }

  absl::Status ParseTargets(std::vector<std::string>* targets) {
    const bool paren = IsOp("(");
    if (paren) Next();
    while (true) {
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      targets->push_back(*name);
      if (!IsOp(",")) break;
      Next();
    }
    return paren ? ExpectOp(")") : absl::OkStatus();
  }

  absl::Status ParseFor(Stmt* stmt) {
    stmt->kind = Stmt::Kind::kFor;
    if (absl::Status s = ParseTargets(&stmt->targets); !s.ok()) return s;
    if (!IsName("in")) return Error(Peek(), "expected 'in'");
    Next();
    absl::StatusOr<ExprPtr> iter = ParseOr();  // no conditional expression: `if` filters
    if (!iter.ok()) return iter.status();
    stmt->expr = *std::move(iter);
    if (IsName("if")) {
      Next();
      absl::StatusOr<ExprPtr> cond = ParseExpression(/*with_condexpr=*/false);
      if (!cond.ok()) return cond.status();
      stmt->condition = *std::move(cond);
    }
    if (IsName("recursive")) return Error(Peek(), "recursive loops are not supported");
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    ++loop_depth_;
    std::string end;
    absl::Status s = ParseBody({"else", "endfor"}, &stmt->body, &end);
    --loop_depth_;
    if (!s.ok()) return s;
    if (end == "else") {
      if (s = ExpectBlockEnd(); !s.ok()) return s;
      if (s = ParseBody({"endfor"}, &stmt->else_body, &end); !s.ok()) return s;
    }
    return ExpectBlockEnd();
  }

  absl::Status ParseSet(Stmt* stmt) {
    absl::StatusOr<std::string> first = ExpectName();
    if (!first.ok()) return first.status();
    stmt->targets.push_back(*first);
    if (IsOp(".")) {
      Next();
      absl::StatusOr<std::string> attr = ExpectName();
      if (!attr.ok()) return attr.status();
      stmt->targets.push_back(*attr);
      stmt->attribute_target = true;
    } else {
      while (IsOp(",")) {
        Next();
        absl::StatusOr<std::string> name = ExpectName();
        if (!name.ok()) return name.status();
        stmt->targets.push_back(*name);
      }
    }
    if (IsOp("=")) {
      Next();
      stmt->kind = Stmt::Kind::kSet;
      absl::StatusOr<ExprPtr> value = ParseTupleOrExpression();
      if (!value.ok()) return value.status();
      stmt->expr = *std::move(value);
      return ExpectBlockEnd();
    }
    if (stmt->targets.size() != 1) return Error(Peek(), "expected '='");
    stmt->kind = Stmt::Kind::kSetBlock;
    if (absl::Status s = ParseFilterChain(&stmt->filters, /*required=*/false); !s.ok()) return s;
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return ParseUntil("endset", &stmt->body);
  }

  // `| name(args) | name ...` (the leading '|' optional for filter blocks).
  absl::Status ParseFilterChain(std::vector<ExprPtr>* filters, bool required) {
    bool first = true;
    while (IsOp("|") || (first && required)) {
      if (IsOp("|")) Next();
      first = false;
      absl::StatusOr<ExprPtr> f = ParseFilterCall(nullptr);
      if (!f.ok()) return f.status();
      filters->push_back(*std::move(f));
    }
    return absl::OkStatus();
  }

  absl::Status ParseParams(Stmt* stmt) {
    if (absl::Status s = ExpectOp("("); !s.ok()) return s;
    while (!IsOp(")")) {
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      stmt->params.push_back(*name);
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        absl::StatusOr<ExprPtr> e = ParseExpression();
        if (!e.ok()) return e.status();
        def = *std::move(e);
      }
      stmt->defaults.push_back(std::move(def));
      if (!IsOp(",")) break;
      Next();
    }
    return ExpectOp(")");
  }

  absl::Status ParseMacro(Stmt* stmt) {
    stmt->kind = Stmt::Kind::kMacro;
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    stmt->name = *name;
    if (absl::Status s = ParseParams(stmt); !s.ok()) return s;
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    absl::Status s = ParseUntil("endmacro", &stmt->body);
    loop_depth_ = saved_loops;
    return s;
  }

  absl::Status ParseCallBlock(Stmt* stmt) {
    stmt->kind = Stmt::Kind::kCallBlock;
    if (IsOp("(")) {
      if (absl::Status s = ParseParams(stmt); !s.ok()) return s;
    }
    absl::StatusOr<ExprPtr> call = ParseExpression();
    if (!call.ok()) return call.status();
    if ((*call)->kind != Expr::Kind::kCall) return Error(Peek(), "expected a macro call");
    stmt->expr = *std::move(call);
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return ParseUntil("endcall", &stmt->body);
  }

  // ---- expressions ----

  absl::StatusOr<ExprPtr> MakeExpr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  ExprPtr Binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kBinary;
    e->line = line;
    e->name = std::move(op);
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  // `a, b` without brackets (set a = 1, 2).
  absl::StatusOr<ExprPtr> ParseTupleOrExpression() {
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

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true) {
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

  absl::StatusOr<ExprPtr> ParseOr() {
    absl::StatusOr<ExprPtr> left = ParseAnd();
    while (left.ok() && IsName("or")) {
      const int line = Next().line;
      absl::StatusOr<ExprPtr> right = ParseAnd();
      if (!right.ok()) return right.status();
      left = Binary("or", *std::move(left), *std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    absl::StatusOr<ExprPtr> left = ParseNot();
    while (left.ok() && IsName("and")) {
      const int line = Next().line;
      absl::StatusOr<ExprPtr> right = ParseNot();
      if (!right.ok()) return right.status();
      left = Binary("and", *std::move(left), *std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
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

  absl::StatusOr<ExprPtr> ParseCompare() {
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
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
           Peek().text == "<=" || Peek().text == ">" || Peek().text == ">=")) {
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

  absl::StatusOr<ExprPtr> ParseMath1() {
    absl::StatusOr<ExprPtr> left = ParseConcat();
    while (left.ok() && (IsOp("+") || IsOp("-"))) {
      const Token& op = Next();
      absl::StatusOr<ExprPtr> right = ParseConcat();
      if (!right.ok()) return right.status();
      left = Binary(op.text, *std::move(left), *std::move(right), op.line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    absl::StatusOr<ExprPtr> left = ParseMath2();
    while (left.ok() && IsOp("~")) {
      const Token& op = Next();
      absl::StatusOr<ExprPtr> right = ParseMath2();
      if (!right.ok()) return right.status();
      left = Binary("~", *std::move(left), *std::move(right), op.line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    absl::StatusOr<ExprPtr> left = ParsePow();
    while (left.ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
      const Token& op = Next();
      absl::StatusOr<ExprPtr> right = ParsePow();
      if (!right.ok()) return right.status();
      left = Binary(op.text, *std::move(left), *std::move(right), op.line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    absl::StatusOr<ExprPtr> left = ParseUnary(true);
    while (left.ok() && IsOp("**")) {
      const Token& op = Next();
      absl::StatusOr<ExprPtr> right = ParseUnary(true);
      if (!right.ok()) return right.status();
      left = Binary("**", *std::move(left), *std::move(right), op.line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
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

  absl::StatusOr<ExprPtr> ParsePrimary() {
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

  absl::StatusOr<ExprPtr> ParseParenthesized() {
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

  absl::StatusOr<ExprPtr> ParseList() {
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

  absl::StatusOr<ExprPtr> ParseDict() {
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

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
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

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
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

  // "(" args ")" into call->items (after the callee/operand) and kwargs.
  absl::Status ParseCallArgs(Expr* call) {
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

  absl::StatusOr<ExprPtr> ParseFilterCall(ExprPtr operand) {
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

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
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

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
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

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  const int max_depth_;
};

}  // namespace

absl::StatusOr<Body> ParseTemplate(absl::string_view source, int max_depth) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(*std::move(tokens), max_depth).ParseAll();
}

}  // namespace colibri::chat_template
