#include "model/chat_template/parser.h"

#include <initializer_list>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/chat_template/lexer.h"
#include "model/chat_template/parser_internal.h"

namespace colibri::chat_template::internal {

absl::Status Parser::ParseBody(std::initializer_list<absl::string_view> end_tags, Body* body,
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

absl::StatusOr<StmtPtr> Parser::ParseTag() {
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

absl::Status Parser::ParseUntil(absl::string_view end, Body* body) {
  std::string found;
  if (absl::Status s = ParseBody({end}, body, &found); !s.ok()) return s;
  return ExpectBlockEnd();
}

absl::Status Parser::ParseIf(Stmt* stmt) {
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

absl::Status Parser::ParseTargets(std::vector<std::string>* targets) {
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

absl::Status Parser::ParseFor(Stmt* stmt) {
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

absl::Status Parser::ParseSet(Stmt* stmt) {
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

absl::Status Parser::ParseFilterChain(std::vector<ExprPtr>* filters, bool required) {
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

absl::Status Parser::ParseParams(Stmt* stmt) {
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

absl::Status Parser::ParseMacro(Stmt* stmt) {
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

absl::Status Parser::ParseCallBlock(Stmt* stmt) {
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

}  // namespace colibri::chat_template::internal

namespace colibri::chat_template {

absl::StatusOr<Body> ParseTemplate(absl::string_view source, int max_depth) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  return internal::Parser(*std::move(tokens), max_depth).ParseAll();
}

}  // namespace colibri::chat_template
