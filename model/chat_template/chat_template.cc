#include "model/chat_template/chat_template.h"

#include <utility>

#include "absl/time/clock.h"
#include "model/chat_template/ast.h"
#include "model/chat_template/interpreter.h"
#include "model/chat_template/parser.h"

namespace colibri::chat_template {

ChatTemplate::ChatTemplate(std::unique_ptr<Body> body, const TemplateLimits& limits)
    : body_(std::move(body)), limits_(limits) {}

ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(std::string_view source,
                                                                  const TemplateLimits& limits) {
  absl::StatusOr<Body> body =
      ParseTemplate(absl::string_view(source.data(), source.size()), limits.max_depth);
  if (!body.ok()) return body.status();
  return std::unique_ptr<ChatTemplate>(
      new ChatTemplate(std::make_unique<Body>(*std::move(body)), limits));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  return Render(context, RenderOptions());
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  return Render(nlohmann::ordered_json(context), RenderOptions());
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                                 const RenderOptions& options) const {
  if (!context.is_object()) {
    return absl::InvalidArgumentError("chat template context must be a JSON object");
  }
  Value globals = Value::FromJson(context);
  const absl::Time now = options.now == absl::InfinitePast() ? absl::Now() : options.now;
  Interpreter interpreter(limits_, now, options.time_zone);
  return interpreter.Render(*body_, std::move(globals.dict()));
}

}  // namespace colibri::chat_template
