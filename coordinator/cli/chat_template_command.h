// `colibri-coordinator chat-template`: renders a chat template for one
// conversation, as the HTTP API will before tokenizing.
#ifndef COLIBRI_COORDINATOR_CLI_CHAT_TEMPLATE_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_CHAT_TEMPLATE_COMMAND_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace colibri::coordinator {

struct ChatTemplateOptions {
  // The Jinja template file (as a GGUF's tokenizer.chat_template holds it).
  std::string template_file;
  // One conversation: {"messages": [...], "tools": [...] (optional)}.
  std::string conversation_file;
  // Default: false.
  bool add_generation_prompt = false;
  // Passed to the template as bos_token / eos_token. Default: empty strings.
  std::string bos_token;
  std::string eos_token;
};

// Writes the rendering to `out` exactly (no newline added). NotFound for an
// unreadable file, InvalidArgument for bad JSON, a template syntax error or
// an error the template raised; ResourceExhausted past the template limits.
absl::Status RunChatTemplate(const ChatTemplateOptions& options, std::ostream& out);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_CHAT_TEMPLATE_COMMAND_H_
