// The chat template `serve` renders chat requests with: the file given by
// --chat-template-file, else the GGUF's `tokenizer.chat_template`, else
// ChatML (chat_template::kDefaultChatMlTemplate, with a warning), rendered
// with the model's BOS and EOS token texts. Assistant tool calls come as
// OpenAI sends them (`function.arguments` a JSON object's text); for a
// template that fails on that text or shows it other than as it is, and
// shows an object (GLM-4.5's, Qwen2.5's; found by rendering a probe
// conversation at load), arguments that parse as an object are given as the
// object.
//
// Thread-safety: the returned renderer is thread-safe.
#ifndef COLIBRI_COORDINATOR_API_CHAT_PROMPT_H_
#define COLIBRI_COORDINATOR_API_CHAT_PROMPT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <functional>

#include "absl/status/statusor.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {

// Turns chat messages into the prompt text (the chat template). Returns
// InvalidArgument for messages the template rejects.
using ChatRenderer = std::function<absl::StatusOr<std::string>(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    bool add_generation_prompt)>;

// Loads and parses the template. template_file "" means none given;
// tokenizer may be null (then bos_token and eos_token are ""). Writes which
// template it uses (and the ChatML warning) to `err`. NotFound for an
// unreadable file, InvalidArgument for a template that does not parse.
// `source` (may be null) receives the template's text.
absl::StatusOr<ChatRenderer> LoadChatRenderer(const gguf::GgufFile& file,
                                              const tokenizer::Tokenizer* tokenizer,
                                              const std::string& template_file, std::ostream& err,
                                              std::string* source = nullptr);

// The bytes of the string roles and contents of chat messages (what
// RequestLimits::max_text_bytes bounds).
int64_t ChatBytes(const nlohmann::ordered_json& messages);

// The prompt token ids of a chat request, as both the HTTP chat endpoint and
// gRPC Generate's `chat` prompt make them: `messages` rendered by `chat` with
// the generation prompt, tokenized with special-token text recognised, BOS
// added unless the template wrote it. The renderer's and tokenizer's errors
// (InvalidArgument for a conversation the template rejects).
absl::StatusOr<std::vector<int32_t>> EncodeChatPrompt(const ChatRenderer& chat,
                                                      const tokenizer::Tokenizer& tokenizer,
                                                      const nlohmann::ordered_json& messages,
                                                      const nlohmann::ordered_json& tools);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_CHAT_PROMPT_H_
