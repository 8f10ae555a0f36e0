// The OpenAI-compatible HTTP API's wire format, as pure functions: request
// bodies of /v1/completions and /v1/chat/completions parsed and checked into
// a GenerationSpec-ready form, and the JSON responses, streamed chunks and
// error envelopes built. No sockets here: http_server.* moves the bytes, and
// a unit test drives these directly.
//
// Field rules (as OpenAI documents them, where Colibri supports them):
// `max_completion_tokens` wins over `max_tokens`; `n` must be 1; `null` means
// "not given"; unknown fields are ignored, except those that would change
// what the output means (the constrained-decoding extensions of other
// servers: grammar, json_schema, guided_*; the legacy functions /
// function_call): those are a 400 naming the field, never silently dropped;
// `response_format` json_schema (its `schema`; `strict` is accepted either way
// and always enforced) and json_object (any JSON object), and `tool_choice`
// "required" or {"type": "function", "function": {"name": N}} (with
// `parallel_tool_calls`) are checked for shape here and kept in
// ApiRequest::output, which MakeGenerationSpec compiles
// (output_constraint.h: what cannot be enforced is a 400 naming the field);
// every type or range error is a 400 naming the field (Status
// InvalidArgument with the field as its "param" payload, see ParamOf).
//
// Thread-safety: every function is thread-safe (no shared state).
#ifndef COLIBRI_COORDINATOR_API_OPENAI_API_H_
#define COLIBRI_COORDINATOR_API_OPENAI_API_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/api/assistant_output.h"
#include "coordinator/api/output_constraint.h"
#include "coordinator/generation/generation.h"
#include "model/sampling/sampler.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator::openai {

enum class Endpoint { kCompletions, kChatCompletions };

// What parsing needs to know about the served model.
struct ApiLimits {
  // Context size: max_tokens above it and prompts longer are refused.
  int n_ctx = 4096;
  // Vocabulary size: prompt token ids must be below it.
  int n_vocab = 0;
};

// A parsed completion or chat request.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  // Completions: the prompt text, or token ids when prompt_is_ids.
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // Chat: the messages with every `content` made a string (text parts
  // joined), and `tools` when given (else null). Ordered as the client sent
  // them: templates print them with tojson.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  // Chat: whether the model's tool calls are parsed out of its text (tools
  // given and tool_choice not "none"; "none" leaves them as text).
  bool parse_tool_calls = false;
  // The tokens asked for; nullopt when the request gave none.
  std::optional<int> max_tokens;
  // temperature defaults to 1 and top_p to 1 as in OpenAI's API; an absent
  // seed leaves has_seed false (the server then picks one); penalty_last_n
  // is 0 (OpenAI has no such field: the server's default).
  sampling::SamplingOptions sampling;
  bool has_seed = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Chat: `logprobs` (bool) and `top_logprobs`; completions: `logprobs` (the
  // number of top tokens, 0 for the chosen token's only).
  bool logprobs = false;
  int top_logprobs = 0;
  // Generate past end-of-generation tokens (a Colibri extension, like
  // llama.cpp's). Default: false.
  bool ignore_eos = false;
  // response_format, tool_choice and parallel_tool_calls as given (not yet
  // compiled). Default: free text, tool_choice auto.
  OutputConstraintRequest output;
};

// The "param" payload of a parse error: the offending field ("" if none).
std::string ParamOf(const absl::Status& status);

// Parses a JSON body. InvalidArgument (param set) for bad JSON, a body that
// nests arrays and objects more than 128 deep, has an object with more than
// 256 keys or more than 262,144 values in all (every parser here: checked in
// one linear pass before parsing), a missing required field, a wrong type or
// a value out of range.
absl::StatusOr<ApiRequest> ParseRequest(Endpoint endpoint, absl::string_view body,
                                        const ApiLimits& limits);

// Parses any JSON value within the shape bounds of a request body (the gRPC
// front end's schemas). InvalidArgument (param "") for bad JSON or a shape
// beyond the bounds.
absl::StatusOr<nlohmann::ordered_json> ParseJsonValue(absl::string_view text);

// Parses /tokenize ({"content": string, "add_special": bool,
// "parse_special": bool}; the two flags default to false and true) and
// /detokenize ({"tokens": [ids]}).
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool parse_special = true;
};
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body);
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body, int n_vocab);
// Parses /apply-template: {"messages": [...], "tools": [...]?,
// "add_generation_prompt": bool (default true)}; messages normalised as in
// ApiRequest.
struct TemplateRequest {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  bool add_generation_prompt = true;
};
absl::StatusOr<TemplateRequest> ParseTemplateRequest(absl::string_view body);

// --- Responses ---------------------------------------------------------------

// An error as OpenAI clients expect it: the HTTP status and the envelope
// {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 500;
  nlohmann::json body;
};
// InvalidArgument/OutOfRange 400, Unauthenticated 401, NotFound 404,
// ResourceExhausted 429, FailedPrecondition 400, Unimplemented 501,
// Unavailable and Cancelled 503, others 500. `param` names the request field
// the error is about ("": the status's own param payload, if any).
ApiError ErrorFromStatus(const absl::Status& status, absl::string_view param = "");
ApiError MakeError(int http_status, absl::string_view message, absl::string_view param = "");

// A generated token as reported with logprobs.
struct TokenReport {
  std::string piece;  // the token's text (may be part of a character)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

// "stop" or "length".
const char* FinishReasonName(FinishReason reason);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // Prompt tokens served from the prefix cache (always reported, as
  // prompt_tokens_details.cached_tokens).
  int cached_prompt_tokens = 0;
};
nlohmann::json UsageJson(const Usage& usage);

// Identity of one response: every chunk of a stream repeats it.
struct ResponseId {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// The chat "logprobs" object ({"content": [...]}) and the completions one
// ({"tokens", "token_logprobs", "top_logprobs", "text_offset"}); text_offset
// starts at `offset`.
nlohmann::json ChatLogprobs(const std::vector<TokenReport>& tokens);
nlohmann::json CompletionLogprobs(const std::vector<TokenReport>& tokens, size_t offset);

// A whole non-streamed response. logprobs null when not asked for.
nlohmann::json CompletionResponse(Endpoint endpoint, const ResponseId& id, const std::string& text,
                                  FinishReason reason, const Usage& usage,
                                  const nlohmann::json& logprobs);

// A whole chat response whose message is split (assistant_output.h): content
// (null when empty and there are tool calls), reasoning_content when any,
// tool_calls when any; finish_reason as given ("tool_calls" when the model
// called tools).
nlohmann::json ChatResponse(const ResponseId& id, const OutputDelta& message,
                            const std::string& finish_reason, const Usage& usage,
                            const nlohmann::json& logprobs);

// Streamed chunks. A chat stream starts with RoleChunk, then TextChunk per
// piece of text, then FinishChunk; a completions stream has TextChunks then
// FinishChunk. UsageChunk (choices []) follows when include_usage.
nlohmann::json RoleChunk(const ResponseId& id);
nlohmann::json TextChunk(Endpoint endpoint, const ResponseId& id, const std::string& text,
                         const nlohmann::json& logprobs);
nlohmann::json FinishChunk(Endpoint endpoint, const ResponseId& id, FinishReason reason);
nlohmann::json FinishChunk(Endpoint endpoint, const ResponseId& id, const std::string& reason);
// A chat chunk of a split message's piece: delta.content, delta.
// reasoning_content and delta.tool_calls (each call whole, its "index"
// counting from first_tool_index) as the delta has them.
nlohmann::json ChatDeltaChunk(const ResponseId& id, const OutputDelta& delta, int first_tool_index,
                              const nlohmann::json& logprobs);
nlohmann::json UsageChunk(Endpoint endpoint, const ResponseId& id, const Usage& usage);

// "data: <json>\n\n" (the JSON on one line, invalid UTF-8 replaced).
std::string SseEvent(const nlohmann::json& value);
// "data: [DONE]\n\n".
std::string SseDone();
// The JSON text of a response body (invalid UTF-8 replaced, never throws).
std::string Dump(const nlohmann::json& value);

// GET /v1/models.
nlohmann::json ModelsResponse(const std::string& model_id, int64_t created);

}  // namespace colibri::coordinator::openai

#endif  // COLIBRI_COORDINATOR_API_OPENAI_API_H_
