#include "coordinator/api/generation_request.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/generation/generation.h"

namespace colibri::coordinator {
namespace {

uint64_t RandomSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

// Fails with `status`, naming `param`.
absl::Status Fail(absl::Status status, const char* param, std::string* error_param) {
  if (error_param != nullptr) *error_param = param;
  return status;
}

// The request's sizes against the limits, before anything is rendered or
// tokenized.
absl::Status CheckSizes(const GenerationRequest& r, const RequestLimits& limits,
                        std::string* error_param) {
  const char* prompt_param = r.prompt == GenerationRequest::Prompt::kChat ? "messages" : "prompt";
  absl::Status s;
  switch (r.prompt) {
    case GenerationRequest::Prompt::kText:
      if (r.text.empty()) s = absl::InvalidArgumentError("the prompt text is empty");
      if (s.ok()) s = CheckPromptText("the prompt text", r.text.size(), limits);
      break;
    case GenerationRequest::Prompt::kChat:
      s = CheckChat(r.messages.is_array() ? r.messages.size() : 0, ChatBytes(r.messages), limits);
      break;
    case GenerationRequest::Prompt::kIds:
      for (size_t i = 0; i < r.ids.size() && s.ok(); ++i) {
        if (r.ids[i] < 0 || r.ids[i] >= limits.n_vocab) {
          s = absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", r.ids[i],
                                                      ", outside the vocabulary [0, ",
                                                      limits.n_vocab, ")"));
        }
      }
      break;
  }
  if (!s.ok()) return Fail(s, prompt_param, error_param);
  if (r.max_tokens.has_value() && *r.max_tokens < 0) {
    return Fail(absl::InvalidArgumentError(
                    absl::StrCat("max_tokens must be >= 0, got ", *r.max_tokens)),
                "max_tokens", error_param);
  }
  if (r.max_tokens.has_value() && *r.max_tokens > limits.max_tokens) {
    return Fail(absl::OutOfRangeError(absl::StrCat("max_tokens ", *r.max_tokens,
                                                   " is above the limit of ", limits.max_tokens)),
                "max_tokens", error_param);
  }
  if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs) {
    return Fail(absl::InvalidArgumentError(
                    absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs, "]")),
                "top_logprobs", error_param);
  }
  if (absl::Status stop = CheckStopStrings(r.stop, limits); !stop.ok()) {
    return Fail(stop, "stop", error_param);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationSpec> MakeGenerationSpec(const GenerationRequest& request,
                                                  const GenerationRequestContext& context,
                                                  std::string* error_param) {
  if (error_param != nullptr) error_param->clear();
  const RequestLimits& limits = context.limits;
  if (absl::Status s = CheckSizes(request, limits, error_param); !s.ok()) return s;

  GenerationSpec spec;
  spec.path = request.path;
  spec.sampling = request.sampling;
  if (spec.sampling.penalty_last_n == 0) {
    spec.sampling.penalty_last_n = context.defaults.penalty_last_n;
  }
  spec.sampling.seed = request.has_seed ? request.sampling.seed : RandomSeed();
  if (absl::Status s = spec.sampling.Validate(); !s.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("sampling: ", s.message())), "sampling",
                error_param);
  }

  // Before the prompt is rendered: a schema that cannot be enforced costs no
  // tokenization.
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> constraint =
      CompileOutputConstraint(request.output, request.tools, context.tool_dialect, error_param);
  if (!constraint.ok()) return constraint.status();
  spec.constraint = *std::move(constraint);

  const bool chat = request.prompt == GenerationRequest::Prompt::kChat;
  const char* prompt_param = chat ? "messages" : "prompt";
  if (request.prompt == GenerationRequest::Prompt::kIds) {
    spec.prompt_ids = request.ids;
  } else {
    if (context.tokenizer == nullptr) {
      return Fail(absl::FailedPreconditionError("the model has no tokenizer: send token ids"),
                  prompt_param, error_param);
    }
    absl::StatusOr<std::vector<int32_t>> ids;
    if (chat) {
      if (!context.chat) {
        return absl::UnimplementedError("this server has no chat template");
      }
      ids = EncodeChatPrompt(context.chat, *context.tokenizer, request.messages, request.tools);
    } else {
      tokenizer::EncodeOptions enc;
      enc.add_special = true;
      ids = context.tokenizer->Encode(request.text, enc);
    }
    if (!ids.ok()) return ids.status();  // the template's or tokenizer's, about no one field
    spec.prompt_ids = std::move(*ids);
  }
  const int n_prompt = static_cast<int>(spec.prompt_ids.size());
  if (n_prompt == 0) {
    return Fail(absl::InvalidArgumentError("the prompt has no tokens"), prompt_param, error_param);
  }
  if (n_prompt > limits.n_ctx) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("the prompt has ", n_prompt,
                                                        " tokens, more than the context of ",
                                                        limits.n_ctx)),
                prompt_param, error_param);
  }
  spec.generation.max_tokens =
      request.max_tokens.has_value()
          ? *request.max_tokens
          : std::max(1, std::min(context.defaults.max_tokens, limits.n_ctx - n_prompt));
  spec.generation.ignore_eos = request.ignore_eos;
  spec.generation.stop = request.stop;
  spec.generation.logprobs = request.logprobs;
  spec.generation.top_logprobs = request.top_logprobs;
  return spec;
}

absl::Status CheckQueue(const GenerationScheduler& scheduler, const GenerationDefaults& defaults) {
  if (scheduler.queued() >= defaults.max_queued) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "too many requests are waiting (", defaults.max_queued, "); retry later"));
  }
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
