// libFuzzer harness for the OpenAI-compatible API's request parsers
// (coordinator/api/openai_api.h): the input's first byte picks the endpoint
// (completions, chat completions, tokenize, detokenize, apply-template), the
// rest is the request body. Whatever the bytes, a parser answers with a
// status, and an accepted request is within the limits it was given; its
// output constraint compiles or is a client error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "coordinator/api/openai_api.h"
#include "coordinator/api/output_constraint.h"

namespace {

namespace openai = colibri::coordinator::openai;

openai::ApiLimits Limits() {
  openai::ApiLimits limits;
  limits.n_ctx = 64;
  limits.n_vocab = 1000;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const openai::ApiLimits limits = Limits();
  switch (data[0] % 5) {
    case 0:
    case 1: {
      const openai::Endpoint endpoint =
          data[0] % 5 == 0 ? openai::Endpoint::kCompletions : openai::Endpoint::kChatCompletions;
      const absl::StatusOr<openai::ApiRequest> r = openai::ParseRequest(endpoint, body, limits);
      if (!r.ok()) {
        // Every refusal maps to a client error.
        if (openai::ErrorFromStatus(r.status()).http_status != 400) __builtin_trap();
        return 0;
      }
      if (static_cast<int64_t>(r->prompt_ids.size()) > limits.n_ctx) __builtin_trap();
      for (int32_t id : r->prompt_ids) {
        if (id < 0 || id >= limits.n_vocab) __builtin_trap();
      }
      if (r->max_tokens.has_value() && (*r->max_tokens < 1 || *r->max_tokens > limits.n_ctx)) {
        __builtin_trap();
      }
      if (endpoint == openai::Endpoint::kChatCompletions && !r->messages.is_array()) {
        __builtin_trap();
      }
      // What the server does with an accepted chat request: prints its
      // messages (the template's tojson).
      (void)r->messages.dump();
      (void)r->tools.dump();
      // And compiles its output constraint (response_format, tool_choice),
      // as MakeGenerationSpec does: a status, a client error when refused.
      std::string param;
      const auto compiled = colibri::coordinator::CompileOutputConstraint(
          r->output, r->tools, colibri::coordinator::ToolDialect::kHermes, &param);
      if (!compiled.ok() && openai::ErrorFromStatus(compiled.status(), param).http_status != 400) {
        __builtin_trap();
      }
      break;
    }
    case 2:
      (void)openai::ParseTokenizeRequest(body);
      break;
    case 3: {
      const auto ids = openai::ParseDetokenizeRequest(body, limits.n_vocab);
      if (ids.ok()) {
        for (int32_t id : *ids) {
          if (id < 0 || id >= limits.n_vocab) __builtin_trap();
        }
      }
      break;
    }
    default: {
      const auto t = openai::ParseTemplateRequest(body);
      if (t.ok()) (void)t->messages.dump();
      break;
    }
  }
  return 0;
}
