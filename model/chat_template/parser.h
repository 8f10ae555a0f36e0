// Parses a Jinja template (the subset chat templates use) into a syntax tree.
#ifndef COLIBRI_MODEL_CHAT_TEMPLATE_PARSER_H_
#define COLIBRI_MODEL_CHAT_TEMPLATE_PARSER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/chat_template/ast.h"

namespace colibri::chat_template {

// The template's statements; InvalidArgument naming line and column on a
// syntax error or an unknown tag, ResourceExhausted when statements or
// expressions nest deeper than max_depth.
absl::StatusOr<Body> ParseTemplate(absl::string_view source, int max_depth);

}  // namespace colibri::chat_template

#endif  // COLIBRI_MODEL_CHAT_TEMPLATE_PARSER_H_
