// Splits a Jinja template into text and tag tokens, applying whitespace
// control as transformers configures Jinja for chat templates: trim_blocks and
// lstrip_blocks on, `{%-`/`-%}`/`{{-`/`-}}`/`{#-`/`-#}` strip, `{%+`/`+%}` keep,
// and the template's single trailing newline dropped (keep_trailing_newline off).
#ifndef COLIBRI_MODEL_CHAT_TEMPLATE_LEXER_H_
#define COLIBRI_MODEL_CHAT_TEMPLATE_LEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::chat_template {

struct Token {
  enum class Type {
    kText,        // template data between tags (already whitespace-trimmed)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // text holds the decoded value
    kInt,
    kFloat,
    kOperator,  // text holds the operator: "+", "//", "(", ...
    kEnd
  };
  Type type = Type::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// The tokens of `source`, ending with kEnd; InvalidArgument naming line and
// column on an unterminated tag or string or an unknown character.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source);

}  // namespace colibri::chat_template

#endif  // COLIBRI_MODEL_CHAT_TEMPLATE_LEXER_H_
