// The recursive-descent parser behind ParseTemplate (parser.h), shared by
// its two files: statements in parser.cc, expressions in parser_expr.cc.
// Internal to model/chat_template/.
//
// Thread-safety: none; one Parser per template.
#ifndef COLIBRI_MODEL_CHAT_TEMPLATE_PARSER_INTERNAL_H_
#define COLIBRI_MODEL_CHAT_TEMPLATE_PARSER_INTERNAL_H_

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "model/chat_template/ast.h"
#include "model/chat_template/lexer.h"

namespace colibri::chat_template::internal {

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
  using T = Token::Type;

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
                         std::string* end_tag);

  absl::StatusOr<StmtPtr> ParseTag();

  absl::Status ParseUntil(absl::string_view end, Body* body);

  absl::Status ParseIf(Stmt* stmt);

  absl::Status ParseTargets(std::vector<std::string>* targets);

  absl::Status ParseFor(Stmt* stmt);

  absl::Status ParseSet(Stmt* stmt);

  // `| name(args) | name ...` (the leading '|' optional for filter blocks).
  absl::Status ParseFilterChain(std::vector<ExprPtr>* filters, bool required);

  absl::Status ParseParams(Stmt* stmt);

  absl::Status ParseMacro(Stmt* stmt);

  absl::Status ParseCallBlock(Stmt* stmt);

  // ---- expressions ----

  absl::StatusOr<ExprPtr> MakeExpr(Expr::Kind kind, int line);

  ExprPtr Binary(std::string op, ExprPtr left, ExprPtr right, int line);

  // `a, b` without brackets (set a = 1, 2).
  absl::StatusOr<ExprPtr> ParseTupleOrExpression();

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);

  absl::StatusOr<ExprPtr> ParseOr();

  absl::StatusOr<ExprPtr> ParseAnd();

  absl::StatusOr<ExprPtr> ParseNot();

  absl::StatusOr<ExprPtr> ParseCompare();

  absl::StatusOr<ExprPtr> ParseMath1();

  absl::StatusOr<ExprPtr> ParseConcat();

  absl::StatusOr<ExprPtr> ParseMath2();

  absl::StatusOr<ExprPtr> ParsePow();

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);

  absl::StatusOr<ExprPtr> ParsePrimary();

  absl::StatusOr<ExprPtr> ParseParenthesized();

  absl::StatusOr<ExprPtr> ParseList();

  absl::StatusOr<ExprPtr> ParseDict();

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);

  // "(" args ")" into call->items (after the callee/operand) and kwargs.
  absl::Status ParseCallArgs(Expr* call);

  absl::StatusOr<ExprPtr> ParseFilterCall(ExprPtr operand);

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  const int max_depth_;
};

}  // namespace colibri::chat_template::internal

#endif  // COLIBRI_MODEL_CHAT_TEMPLATE_PARSER_INTERNAL_H_
