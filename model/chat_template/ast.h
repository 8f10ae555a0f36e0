// The syntax tree of a parsed chat template. Built once by the parser,
// read-only afterwards (so one tree serves concurrent renders).
#ifndef COLIBRI_MODEL_CHAT_TEMPLATE_AST_H_
#define COLIBRI_MODEL_CHAT_TEMPLATE_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/chat_template/value.h"

namespace colibri::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // items
    kTuple,     // items
    kDict,      // items: key0, value0, key1, value1, ...
    kGetAttr,   // items[0] . name
    kGetItem,   // items[0] [ items[1] ]
    kSlice,     // items[0] [ items[1] : items[2] : items[3] ] (null parts allowed)
    kCall,      // items[0] ( items[1..] , kwargs )
    kFilter,    // items[0] | name ( items[1..], kwargs ); items[0] null in filter blocks
    kTest,      // items[0] is [not] name ( items[1..] )
    kUnary,     // op items[0]: "-", "+", "not"
    kBinary,    // items[0] op items[1]: + - * / // % ** ~ == != < <= > >= in notin and or
    kCondition  // items[1] if items[0] else items[2] (items[2] may be null)
  };

  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;  // name, attribute, filter, test, or operator
  bool negated = false;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (condition, body); else_body
    kFor,          // for targets in expr [if condition]: body; else_body
    kSet,          // set targets = expr; targets {ns, attr} when attribute_target
    kSetBlock,     // set targets[0] [| filters] %} body {% endset
    kMacro,        // macro name(params = defaults) body
    kCallBlock,    // call[(params)] expr %} body {% endcall
    kFilterBlock,  // filter filters %} body {% endfilter
    kBreak,
    kContinue,
    kScope  // a body rendered as is ({% generation %})
  };

  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  std::string name;
  ExprPtr expr;
  ExprPtr condition;
  bool attribute_target = false;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when none
  std::vector<ExprPtr> filters;   // kFilter with a null operand, applied in order
};

}  // namespace colibri::chat_template

#endif  // COLIBRI_MODEL_CHAT_TEMPLATE_AST_H_
