#include "client/chat_command.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

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
    case v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "unspecified";
  }
}

void AddMessage(v1::ChatMessages* chat, const std::string& role, const std::string& content) {
  v1::ChatMessage* m = chat->add_messages();
  m->set_role(role);
  m->set_content(content);
}

// Whether the server splits the replies (tools given, choice not "none").
bool SplitsReplies(const v1::GenerateRequest& request) {
  return request.tools_size() > 0 &&
         !(request.tool_choice().has_mode() && request.tool_choice().mode() == v1::TOOL_CHOICE_NONE);
}

}  // namespace

absl::Status SetTools(const std::string& tools_json, const std::string& tool_choice,
                      v1::GenerateRequest* request) {
  using json = nlohmann::json;
  const json tools = json::parse(tools_json, nullptr, false);
  if (!tools.is_array()) return absl::InvalidArgumentError("the tools must be a JSON array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const json* f = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (f == nullptr || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tools[", i, "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}"));
    }
    v1::Tool* tool = request->add_tools();
    tool->set_name((*f)["name"].get<std::string>());
    if (f->contains("description") && (*f)["description"].is_string()) {
      tool->set_description((*f)["description"].get<std::string>());
    }
    if (f->contains("parameters")) tool->set_parameters((*f)["parameters"].dump());
  }
  if (tool_choice == "auto") {
    request->mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_AUTO);
  } else if (tool_choice == "none") {
    request->mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_NONE);
  } else if (tool_choice == "required") {
    request->mutable_tool_choice()->set_mode(v1::TOOL_CHOICE_REQUIRED);
  } else if (!tool_choice.empty()) {
    request->mutable_tool_choice()->set_function(tool_choice);
  }
  return absl::OkStatus();
}

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
    absl::string_view tool_answer = command;
    if (absl::ConsumePrefix(&tool_answer, "/tool ")) {
      const size_t space = tool_answer.find(' ');
      v1::ChatMessage* m = history.add_messages();
      m->set_role("tool");
      m->set_tool_call_id(std::string(tool_answer.substr(0, space)));
      m->set_content(space == absl::string_view::npos ? ""
                                                      : std::string(tool_answer.substr(space + 1)));
    } else {
      AddMessage(&history, "user", line);
    }
    const bool split = SplitsReplies(options.request);
    if (options.interrupted) options.interrupted();  // a Ctrl-C from before this turn
    v1::GenerateRequest request = options.request;
    *request.mutable_chat() = history;
    absl::StatusOr<GenerateResult> result =
        client.Generate(
            request,
            [&out, split](const v1::GenerateReply& reply) {
              const std::string& text = split ? reply.chat().content() : reply.text();
              if (!text.empty()) out << text << std::flush;
              for (const v1::ToolCall& call : reply.chat().tool_calls()) {
                out << "\n[call " << call.id() << "] " << call.name() << " " << call.arguments()
                    << std::flush;
              }
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
    if (split) {
      v1::ChatMessage* m = history.add_messages();
      m->set_role("assistant");
      m->set_content(result->chat.content());
      *m->mutable_tool_calls() = result->chat.tool_calls();
    } else {
      AddMessage(&history, "assistant", result->text);
    }
    if (options.print_stats) {
      err << "[prompt " << result->stats.prompt_tokens() << " tokens, "
          << result->stats.generated_tokens() << " generated, finish "
          << FinishName(result->finish_reason) << "]\n";
    }
  }
  return exit_code;
}

}  // namespace colibri::client
