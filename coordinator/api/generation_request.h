// What a client asks of a generation, whichever front end it came through
// (gRPC Generate, the HTTP completions and chat endpoints), and the one
// function that turns it into the GenerationSpec the scheduler runs. Both
// front ends go through it, so they apply the same limits
// (request_limits.h), before a prompt is rendered or tokenized, and the same
// defaults.
//
// Thread-safety: MakeGenerationSpec is thread-safe (its context's tokenizer
// and chat renderer are).
#ifndef COLIBRI_COORDINATOR_API_GENERATION_REQUEST_H_
#define COLIBRI_COORDINATOR_API_GENERATION_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/api/assistant_output.h"
#include "coordinator/api/chat_prompt.h"
#include "coordinator/api/output_constraint.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/api/request_limits.h"
#include "model/ops/matmul.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {

struct GenerationRequest {
  enum class Prompt {
    kText,  // `text`, tokenized with BOS/EOS as the vocabulary asks
    kIds,   // `ids`, fed exactly as given
    kChat,  // `messages` (and `tools`) rendered by the chat template
  };
  Prompt prompt = Prompt::kText;
  std::string text;
  std::vector<int32_t> ids;
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;  // null when the request gave none
  // Numeric path of the generation. Default: fast.
  ops::NumericPath path = ops::NumericPath::kFast;
  // Sampling as the client gave it. penalty_last_n 0 takes the default's;
  // the seed is used only with has_seed (else the server picks one).
  sampling::SamplingOptions sampling;
  bool has_seed = false;
  // Tokens to generate; nullopt takes the default's.
  std::optional<int> max_tokens;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  // Log-probabilities of every generated token, and of the top_logprobs
  // most likely ones (0 to kMaxTopLogprobs).
  bool logprobs = false;
  int top_logprobs = 0;
  // What the output must be (a JSON format, a tool call), compiled into
  // GenerationSpec::constraint. Default: free text, tool_choice auto.
  OutputConstraintRequest output;
};

// Whether a chat reply to `request` parses tool calls out of the text: it
// gave tools and tool_choice is not "none".
inline bool ParsesToolCalls(const GenerationRequest& request) {
  return request.tools.is_array() && !request.tools.empty() &&
         request.output.tool_choice != OutputConstraintRequest::ToolChoice::kNone;
}

// The defaults of a request that leaves a field out: the same for every
// front end.
struct GenerationDefaults {
  // max_tokens of a request that gives none: this, capped by what the
  // context holds after the prompt (at least 1). Default: 256.
  int max_tokens = 256;
  // penalty_last_n of a request that gives 0. Default: 64.
  int penalty_last_n = 64;
  // Requests waiting for a generation slot beyond which new ones are refused
  // (CheckQueue). Default: 64.
  int max_queued = 64;
};

// What MakeGenerationSpec needs of the server; everything is borrowed.
struct GenerationRequestContext {
  // Null: id prompts only (text and chat prompts are FailedPrecondition).
  const tokenizer::Tokenizer* tokenizer = nullptr;
  // Empty: chat prompts are Unimplemented.
  ChatRenderer chat;
  // Their n_ctx (the scheduler's) and n_vocab must be set.
  RequestLimits limits;
  GenerationDefaults defaults;
  // The served model's tool-call syntax (DialectFor(arch, chat_template,
  // "")), which a tool_choice "required" or named constrains to. Default:
  // none (such a request is FailedPrecondition).
  ToolDialect tool_dialect = ToolDialect::kNone;
  // The model's architecture and its chat template's text, from which a
  // chat reply's dialect is read (chat_reply.h). Default: "".
  std::string arch;
  std::string chat_template;
};

// Checks `request` against the limits (sizes first, before rendering or
// tokenizing), renders and tokenizes its prompt, checks the prompt against
// the context and fills in the defaults. OutOfRange for a size beyond a
// limit, InvalidArgument for a bad value or an empty or too long prompt,
// FailedPrecondition / Unimplemented for a prompt the server cannot take,
// and the template's and tokenizer's errors; request.output compiles as
// CompileOutputConstraint (output_constraint.h) says. *error_param (may be
// null), on an error, names the request field it is about ("prompt",
// "messages", "stop", "max_tokens", "top_logprobs", "sampling",
// "response_format", "tool_choice", "tools"; "" for the template's and
// tokenizer's errors and a missing chat template).
absl::StatusOr<GenerationSpec> MakeGenerationSpec(const GenerationRequest& request,
                                                  const GenerationRequestContext& context,
                                                  std::string* error_param = nullptr);

// ResourceExhausted when `scheduler` already has defaults.max_queued
// requests waiting for a slot: a front end refuses a new one (HTTP 429, gRPC
// RESOURCE_EXHAUSTED) instead of queueing without bound.
absl::Status CheckQueue(const GenerationScheduler& scheduler, const GenerationDefaults& defaults);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_GENERATION_REQUEST_H_
