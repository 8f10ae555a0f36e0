// The responses side of openai_api.h: whole responses, streamed chunks,
// logprobs objects, the usage object and the SSE framing. (The request
// parsers and errors are in openai_api.cc.)
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/api/openai_api.h"

namespace colibri::coordinator::openai {

using json = nlohmann::json;

namespace {
// What a logprob of -inf is reported as (JSON has no infinities).
constexpr float kMinLogprob = -9999.0f;
}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
    case FinishReason::kContextFull:
      return "length";
    case FinishReason::kEndOfGeneration:
    case FinishReason::kStop:
    case FinishReason::kCancelled:
      break;
  }
  return "stop";
}

json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

namespace {

float Reported(float logprob) { return std::isfinite(logprob) ? logprob : kMinLogprob; }

json Bytes(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

const char* ObjectName(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json Envelope(Endpoint endpoint, const ResponseId& id, bool chunk, json choices) {
  return {{"id", id.id},
          {"object", ObjectName(endpoint, chunk)},
          {"created", id.created},
          {"model", id.model},
          {"choices", std::move(choices)}};
}

}  // namespace

json ChatLogprobs(const std::vector<TokenReport>& tokens) {
  json content = json::array();
  for (const TokenReport& t : tokens) {
    json top = json::array();
    for (const auto& [piece, logprob] : t.top) {
      top.push_back({{"token", piece}, {"logprob", Reported(logprob)}, {"bytes", Bytes(piece)}});
    }
    content.push_back({{"token", t.piece},
                       {"logprob", Reported(t.logprob)},
                       {"bytes", Bytes(t.piece)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json CompletionLogprobs(const std::vector<TokenReport>& tokens, size_t offset) {
  json pieces = json::array(), logprobs = json::array(), tops = json::array(),
       offsets = json::array();
  for (const TokenReport& t : tokens) {
    pieces.push_back(t.piece);
    logprobs.push_back(Reported(t.logprob));
    json top = json::object();
    for (const auto& [piece, logprob] : t.top) top[piece] = Reported(logprob);
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += t.piece.size();
  }
  return {{"tokens", std::move(pieces)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json CompletionResponse(Endpoint endpoint, const ResponseId& id, const std::string& text,
                        FinishReason reason, const Usage& usage, const json& logprobs) {
  json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", FinishReasonName(reason)}};
  if (endpoint == Endpoint::kChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  json response = Envelope(endpoint, id, false, json::array({std::move(choice)}));
  response["usage"] = UsageJson(usage);
  return response;
}

namespace {

json ToolCallsJson(const std::vector<ToolCall>& calls, int first_index, bool with_index) {
  json out = json::array();
  int index = first_index;
  for (const ToolCall& call : calls) {
    json c = {{"id", call.id},
              {"type", "function"},
              {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
    if (with_index) c["index"] = index++;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

json ChatResponse(const ResponseId& id, const OutputDelta& message,
                  const std::string& finish_reason, const Usage& usage, const json& logprobs) {
  json m = {{"role", "assistant"}};
  m["content"] = message.content.empty() && !message.tool_calls.empty() ? json(nullptr)
                                                                       : json(message.content);
  if (!message.reasoning.empty()) m["reasoning_content"] = message.reasoning;
  if (!message.tool_calls.empty()) m["tool_calls"] = ToolCallsJson(message.tool_calls, 0, false);
  json choice = {{"index", 0},
                 {"message", std::move(m)},
                 {"logprobs", logprobs},
                 {"finish_reason", finish_reason}};
  json response = Envelope(Endpoint::kChatCompletions, id, false, json::array({std::move(choice)}));
  response["usage"] = UsageJson(usage);
  return response;
}

json ChatDeltaChunk(const ResponseId& id, const OutputDelta& delta, int first_tool_index,
                    const json& logprobs) {
  json d = json::object();
  if (!delta.content.empty() || (delta.reasoning.empty() && delta.tool_calls.empty())) {
    d["content"] = delta.content;
  }
  if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
  if (!delta.tool_calls.empty()) {
    d["tool_calls"] = ToolCallsJson(delta.tool_calls, first_tool_index, true);
  }
  json choice = {{"index", 0}, {"delta", std::move(d)}, {"logprobs", logprobs},
                 {"finish_reason", nullptr}};
  return Envelope(Endpoint::kChatCompletions, id, true, json::array({std::move(choice)}));
}

json RoleChunk(const ResponseId& id) {
  json choice = {{"index", 0},
                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  return Envelope(Endpoint::kChatCompletions, id, true, json::array({std::move(choice)}));
}

json TextChunk(Endpoint endpoint, const ResponseId& id, const std::string& text,
               const json& logprobs) {
  json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
  if (endpoint == Endpoint::kChatCompletions) {
    choice["delta"] = {{"content", text}};
  } else {
    choice["text"] = text;
  }
  return Envelope(endpoint, id, true, json::array({std::move(choice)}));
}

json FinishChunk(Endpoint endpoint, const ResponseId& id, FinishReason reason) {
  return FinishChunk(endpoint, id, std::string(FinishReasonName(reason)));
}

json FinishChunk(Endpoint endpoint, const ResponseId& id, const std::string& reason) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", reason}};
  if (endpoint == Endpoint::kChatCompletions) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  return Envelope(endpoint, id, true, json::array({std::move(choice)}));
}

json UsageChunk(Endpoint endpoint, const ResponseId& id, const Usage& usage) {
  json chunk = Envelope(endpoint, id, true, json::array());
  chunk["usage"] = UsageJson(usage);
  return chunk;
}

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string SseEvent(const json& value) { return absl::StrCat("data: ", Dump(value), "\n\n"); }

std::string SseDone() { return "data: [DONE]\n\n"; }

json ModelsResponse(const std::string& model_id, int64_t created) {
  json model = {
      {"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "colibri"}};
  return {{"object", "list"}, {"data", json::array({std::move(model)})}};
}

}  // namespace colibri::coordinator::openai
