#include "coordinator/api/request_limits.h"

#include <malloc.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::coordinator {

absl::Status ValidateRequestLimits(const RequestLimits& limits) {
  if (limits.n_ctx < 1 || limits.n_vocab < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request limits: n_ctx ", limits.n_ctx, " and n_vocab ", limits.n_vocab, " must be > 0"));
  }
  if (limits.max_tokens < 1 || limits.max_text_bytes < 1 || limits.max_stop_strings < 0 ||
      limits.max_stop_bytes < 1 || limits.max_messages < 1) {
    return absl::InvalidArgumentError("request limits: every limit must be >= 1");
  }
  return absl::OkStatus();
}

absl::Status CheckGenerateRequest(const v1::GenerateRequest& request, const RequestLimits& limits) {
  switch (request.prompt_case()) {
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return absl::InvalidArgumentError("empty prompt: give the prompt text or token ids");
    case v1::GenerateRequest::kText:
      if (request.text().empty()) return absl::InvalidArgumentError("the prompt text is empty");
      COLIBRI_RETURN_IF_ERROR(CheckPromptText("the prompt text", request.text().size(), limits));
      break;
    case v1::GenerateRequest::kChat: {
      const auto& messages = request.chat().messages();
      COLIBRI_RETURN_IF_ERROR(CheckChat(messages.size(), 0, limits));
      int64_t bytes = 0;
      for (int i = 0; i < messages.size(); ++i) {
        if (messages[i].role().empty()) {
          return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has no role"));
        }
        const v1::ChatMessage& m = messages[i];
        bytes += m.role().size() + m.content().size() + m.tool_call_id().size() +
                 m.reasoning_content().size();
        for (const v1::ToolCall& call : m.tool_calls()) {
          bytes += call.id().size() + call.name().size() + call.arguments().size();
        }
      }
      for (const v1::Tool& tool : request.tools()) {
        bytes += tool.name().size() + tool.description().size() + tool.parameters().size();
      }
      COLIBRI_RETURN_IF_ERROR(CheckChat(messages.size(), bytes, limits));
      break;
    }
    case v1::GenerateRequest::kTokens: {
      const auto& ids = request.tokens().ids();
      if (ids.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
      if (ids.size() > limits.n_ctx) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the prompt has ", ids.size(), " tokens, more than the context of ", limits.n_ctx));
      }
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= limits.n_vocab) {
          return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", ids[i],
                                                         ", outside the vocabulary [0, ",
                                                         limits.n_vocab, ")"));
        }
      }
      break;
    }
  }
  if (request.prompt_case() != v1::GenerateRequest::kChat &&
      (request.tools_size() > 0 || request.has_tool_choice())) {
    return absl::InvalidArgumentError("tools and tool_choice need a chat prompt");
  }
  if (request.max_tokens() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 0, got ", request.max_tokens()));
  }
  if (request.max_tokens() > limits.max_tokens) {
    return absl::OutOfRangeError(absl::StrCat("max_tokens ", request.max_tokens(),
                                              " is above the limit of ", limits.max_tokens));
  }
  if (request.response_format().has_json_schema()) {
    COLIBRI_RETURN_IF_ERROR(CheckPromptText(
        "the response_format schema", request.response_format().json_schema().size(), limits));
  }
  if (request.stop_size() > limits.max_stop_strings) {
    return absl::OutOfRangeError(absl::StrCat(
        request.stop_size(), " stop strings, more than the limit of ", limits.max_stop_strings));
  }
  return CheckStopStrings(std::vector<std::string>(request.stop().begin(), request.stop().end()),
                          limits);
}

absl::Status CheckTokenizeRequest(const v1::TokenizeRequest& request, const RequestLimits& limits) {
  return CheckPromptText("the text", request.text().size(), limits);
}

absl::Status CheckPromptText(const char* what, size_t bytes, const RequestLimits& limits) {
  if (static_cast<int64_t>(bytes) > limits.max_text_bytes) {
    return absl::OutOfRangeError(
        absl::StrCat(what, " has ", bytes, " bytes, more than the limit of ", limits.max_text_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckChat(size_t n_messages, int64_t bytes, const RequestLimits& limits) {
  if (n_messages == 0) return absl::InvalidArgumentError("the chat has no messages");
  if (n_messages > static_cast<size_t>(limits.max_messages)) {
    return absl::OutOfRangeError(absl::StrCat("the chat has ", n_messages,
                                              " messages, more than the limit of ",
                                              limits.max_messages));
  }
  if (bytes > limits.max_text_bytes) {
    return absl::OutOfRangeError(absl::StrCat("the chat has ", bytes,
                                              " bytes, more than the limit of ",
                                              limits.max_text_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckStopStrings(const std::vector<std::string>& stop, const RequestLimits& limits) {
  if (stop.size() > static_cast<size_t>(limits.max_stop_strings)) {
    return absl::OutOfRangeError(absl::StrCat(stop.size(), " stop strings, more than the limit of ",
                                              limits.max_stop_strings));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (static_cast<int64_t>(stop[i].size()) > limits.max_stop_bytes) {
      return absl::OutOfRangeError(absl::StrCat("stop string ", i, " has ", stop[i].size(),
                                                " bytes, more than the limit of ",
                                                limits.max_stop_bytes));
    }
  }
  return absl::OkStatus();
}

void ReleaseMemoryAfterRequest(size_t request_bytes) {
  if (request_bytes >= kReleaseAfterBytes) ::malloc_trim(0);
}

}  // namespace colibri::coordinator
