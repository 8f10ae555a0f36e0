#include "coordinator/cli/chat_template_command.h"

#include <fstream>
#include <memory>
#include <sstream>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/chat_template.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::Status RunChatTemplate(const ChatTemplateOptions& options, std::ostream& out) {
  COLIBRI_ASSIGN_OR_RETURN(const std::string source, ReadFile(options.template_file));
  COLIBRI_ASSIGN_OR_RETURN(const std::string text, ReadFile(options.conversation_file));
  // ordered_json: templates print objects (tools, arguments) in their order.
  nlohmann::ordered_json conversation =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (conversation.is_discarded() || !conversation.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.conversation_file, ": not a JSON object"));
  }
  if (!conversation.contains("messages") || !conversation["messages"].is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.conversation_file, ": \"messages\" must be an array"));
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = conversation["messages"];
  if (conversation.contains("tools")) context["tools"] = conversation["tools"];
  context["add_generation_prompt"] = options.add_generation_prompt;
  context["bos_token"] = options.bos_token;
  context["eos_token"] = options.eos_token;

  absl::StatusOr<std::unique_ptr<chat_template::ChatTemplate>> tmpl =
      chat_template::ChatTemplate::Parse(source);
  if (!tmpl.ok()) {
    return absl::Status(tmpl.status().code(),
                        absl::StrCat(options.template_file, ": ", tmpl.status().message()));
  }
  COLIBRI_ASSIGN_OR_RETURN(const std::string rendered, (*tmpl)->Render(context));
  out << rendered;
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
