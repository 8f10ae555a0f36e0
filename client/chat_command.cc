#include "client/chat_command.h"

#include <string>

#include "absl/strings/ascii.h"

namespace colibri::client {
namespace {

const char* FinishName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_CONTEXT:
      return "context";
    default:
      return "unspecified";
  }
}

void AddMessage(v1::ChatMessages* chat, const std::string& role, const std::string& content) {
  v1::ChatMessage* m = chat->add_messages();
  m->set_role(role);
  m->set_content(content);
}

}  // namespace

int RunChat(Client& client, const ChatOptions& options, LineReader& in, std::ostream& out,
            std::ostream& err) {
  v1::ChatMessages history;
  const auto reset = [&] {
    history.Clear();
    if (!options.system.empty()) AddMessage(&history, "system", options.system);
  };
  reset();
  int exit_code = 0;
  std::string line;
  for (;;) {
    if (!in.ReadLine(&line)) break;
    const std::string command(absl::StripAsciiWhitespace(line));
    if (command.empty()) continue;
    in.Remember(line);
    if (command == "/exit") break;
    if (command == "/reset") {
      reset();
      out << "(history cleared)\n" << std::flush;
      continue;
    }
    AddMessage(&history, "user", line);
    if (options.interrupted) options.interrupted();  // a Ctrl-C from before this turn
    v1::GenerateRequest request = options.request;
    *request.mutable_chat() = history;
    absl::StatusOr<GenerateResult> result =
        client.Generate(
            request,
            [&out](const v1::GenerateReply& reply) {
              if (!reply.text().empty()) out << reply.text() << std::flush;
              return true;
            },
            options.interrupted);
    out << "\n" << std::flush;
    if (result.ok() && result->cancelled) {
      out << "(reply stopped)\n" << std::flush;
      if (result->text.empty()) {
        history.mutable_messages()->RemoveLast();  // unanswered: as if not asked
      } else {
        AddMessage(&history, "assistant", result->text);
      }
      continue;
    }
    if (!result.ok()) {
      err << "colibri-client: " << absl::StatusCodeToString(result.status().code()) << ": "
          << result.status().message() << "\n";
      history.mutable_messages()->RemoveLast();
      exit_code = 1;
      continue;
    }
    AddMessage(&history, "assistant", result->text);
    if (options.print_stats) {
      err << "[prompt " << result->stats.prompt_tokens() << " tokens, "
          << result->stats.generated_tokens() << " generated, finish "
          << FinishName(result->finish_reason) << "]\n";
    }
  }
  return exit_code;
}

}  // namespace colibri::client
