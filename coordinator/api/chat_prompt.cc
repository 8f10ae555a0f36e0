#include "coordinator/api/chat_prompt.h"

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/chat_template.h"
#include "rpc/server_support.h"

namespace colibri::coordinator {
namespace {

using ojson = nlohmann::ordered_json;

// `messages` with each assistant tool call's `function.arguments` that is a
// JSON object's text replaced by that object.
ojson WithObjectArguments(const ojson& messages) {
  ojson out = messages;
  if (!out.is_array()) return out;
  for (ojson& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (ojson& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
        continue;
      }
      ojson& function = call["function"];
      if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
      ojson parsed = ojson::parse(function["arguments"].get<std::string>(), nullptr, false);
      if (parsed.is_object()) function["arguments"] = std::move(parsed);
    }
  }
  return out;
}

// Whether `tpl` needs a tool call's arguments as an object: a probe
// conversation with a call, its arguments as text, fails (GLM-4.5 iterates
// over them) or shows them other than as that text (Qwen2.5 encodes them
// with tojson, quoting the text), while with the object the template renders
// and shows its key. Templates that print the text (Qwen3, DeepSeek-V3.1)
// or no call at all (ChatML) keep the text.
bool NeedsObjectArguments(const chat_template::ChatTemplate& tpl) {
  constexpr absl::string_view kArguments = R"({"colibri_probe":1})";
  const ojson messages = {
      {{"role", "user"}, {"content", "x"}},
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls",
        {{{"id", "call_0"},
          {"type", "function"},
          {"function", {{"name", "f"}, {"arguments", std::string(kArguments)}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "call_0"}, {"content", "y"}}};
  ojson context = {{"messages", messages},
                   {"add_generation_prompt", true},
                   {"bos_token", ""},
                   {"eos_token", ""},
                   {"tools",
                    {{{"type", "function"},
                      {"function",
                       {{"name", "f"}, {"description", "f"}, {"parameters", {{"type", "object"}}}}}}}}};
  absl::StatusOr<std::string> as_text = tpl.Render(context);
  if (as_text.ok() && absl::StrContains(*as_text, kArguments)) return false;
  context["messages"] = WithObjectArguments(messages);
  absl::StatusOr<std::string> as_object = tpl.Render(context);
  return as_object.ok() && absl::StrContains(*as_object, "colibri_probe");
}

}  // namespace

absl::StatusOr<ChatRenderer> LoadChatRenderer(const gguf::GgufFile& file,
                                              const tokenizer::Tokenizer* tokenizer,
                                              const std::string& template_file, std::ostream& err,
                                              std::string* source_out) {
  std::string source;
  std::string origin;
  if (!template_file.empty()) {
    absl::StatusOr<std::string> text = rpc::ReadWholeFile(template_file);
    if (!text.ok()) return text.status();
    source = std::move(*text);
    origin = template_file;
  } else {
    absl::StatusOr<std::string> text = file.GetString("tokenizer.chat_template");
    if (text.ok() && !text->empty()) {
      source = std::move(*text);
      origin = "the GGUF's tokenizer.chat_template";
    } else {
      source = std::string(chat_template::kDefaultChatMlTemplate);
      origin = "ChatML";
      err << "serve: warning: the model has no chat template; chat requests use ChatML "
             "(--chat-template-file overrides)\n";
    }
  }
  absl::StatusOr<std::unique_ptr<chat_template::ChatTemplate>> parsed =
      chat_template::ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template from ", origin, ": ", parsed.status().message()));
  }
  err << "serve: chat template: " << origin << "\n";
  if (source_out != nullptr) *source_out = source;

  std::shared_ptr<const chat_template::ChatTemplate> tpl = std::move(*parsed);
  const bool object_arguments = NeedsObjectArguments(*tpl);
  std::string bos, eos;
  if (tokenizer != nullptr) {
    if (tokenizer->bos_id() >= 0) bos = tokenizer->TokenText(tokenizer->bos_id());
    if (tokenizer->eos_id() >= 0) eos = tokenizer->TokenText(tokenizer->eos_id());
  }
  return ChatRenderer([tpl, bos, eos, object_arguments](
                          const nlohmann::ordered_json& messages,
                          const nlohmann::ordered_json& tools,
                          bool add_generation_prompt) -> absl::StatusOr<std::string> {
    nlohmann::ordered_json context = {
        {"messages", object_arguments ? WithObjectArguments(messages) : messages},
                                      {"add_generation_prompt", add_generation_prompt},
                                      {"bos_token", bos},
                                      {"eos_token", eos}};
    // Absent rather than null: templates test `tools is defined`.
    if (!tools.is_null()) context["tools"] = tools;
    absl::StatusOr<std::string> text = tpl->Render(context);
    // A template that raises, or a conversation that hits its limits, is a
    // bad request.
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("chat template: ", text.status().message()));
    }
    return text;
  });
}

int64_t ChatBytes(const nlohmann::ordered_json& messages) {
  int64_t bytes = 0;
  for (const auto& m : messages) {
    if (!m.is_object()) continue;
    for (const char* field : {"role", "content"}) {
      auto it = m.find(field);
      if (it != m.end() && it->is_string()) bytes += it->get_ref<const std::string&>().size();
    }
  }
  return bytes;
}

absl::StatusOr<std::vector<int32_t>> EncodeChatPrompt(const ChatRenderer& chat,
                                                      const tokenizer::Tokenizer& tokenizer,
                                                      const nlohmann::ordered_json& messages,
                                                      const nlohmann::ordered_json& tools) {
  COLIBRI_ASSIGN_OR_RETURN(const std::string text, chat(messages, tools, true));
  // The template writes its special tokens as text, so they are parsed; BOS
  // is added only when the template did not write it already.
  tokenizer::EncodeOptions enc;
  enc.parse_special = true;
  const int32_t bos = tokenizer.bos_id();
  const std::string bos_text = bos >= 0 ? tokenizer.TokenText(bos) : std::string();
  enc.add_special = bos_text.empty() || !absl::StartsWith(text, bos_text);
  return tokenizer.Encode(text, enc);
}

}  // namespace colibri::coordinator
