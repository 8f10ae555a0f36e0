// The generation loop shared by `run` and `serve`: evaluate the prompt, then
// sample, stream and feed back one token at a time until a limit, an
// end-of-generation token, a stop string, a full context or the caller says
// stop. Both commands call this, so they produce the same tokens by
// construction.
//
// Thread-safety: one Generate per session and sampler at a time.
#ifndef COLIBRI_COORDINATOR_GENERATION_H_
#define COLIBRI_COORDINATOR_GENERATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/arch/session.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {

enum class FinishReason {
  kLength,            // max_tokens generated
  kEndOfGeneration,   // an end-of-generation token (not with ignore_eos)
  kStop,              // the generated text contains a stop string
  kContextFull,       // no position left in the session's context
  kCancelled,         // on_token returned false
};

struct GenerationOptions {
  // Tokens to generate; 0 evaluates the prompt only. Default: 64.
  int max_tokens = 64;
  // Keep generating past end-of-generation tokens. Default: false.
  bool ignore_eos = false;
  // Stop once the generated text contains one of these (the text then ends
  // with the token that completed it, stop string included). Needs a
  // tokenizer and decode_text. Default: none.
  std::vector<std::string> stop;
  // Decode tokens into UTF-8-safe text pieces (needs a tokenizer).
  // Default: true.
  bool decode_text = true;
  // Also evaluate the last generated token and an end-of-generation one, only
  // to report their logits through on_logits. Default: false.
  bool evaluate_every_token = false;
  // Report prompt logits for every prompt position, not only the last.
  // Default: false.
  bool all_prompt_logits = false;
};

struct GeneratedToken {
  int32_t id = 0;
  // The text this token completed (empty inside a multi-byte character, for
  // an end-of-generation token and without decode_text).
  std::string text;
  bool end_of_generation = false;
};

struct GenerationCallbacks {
  // Each evaluated row of logits: first the prompt's ([n][n_vocab] with
  // all_prompt_logits, else [n_vocab]), then one [n_vocab] per fed-back token.
  // A failure stops the generation and is returned. Default: none.
  std::function<absl::Status(absl::Span<const float> logits)> on_logits;
  // Once the prompt is evaluated. Default: none.
  std::function<void()> on_prompt_done;
  // Every generated token, before it is fed back; false cancels the
  // generation (finish reason kCancelled). Default: none (keep going).
  std::function<bool(const GeneratedToken& token)> on_token;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // every generated id, end-of-generation included
  std::string text;             // the concatenated pieces, trailing_text included
  // Bytes the decoder still held at the end (an incomplete character); not
  // reported through on_token.
  std::string trailing_text;
  FinishReason finish_reason = FinishReason::kLength;
  double prompt_seconds = 0;
  double generate_seconds = 0;
};

// Runs `prompt` (non-empty; evaluated at the session's next positions) and
// generates. tokenizer may be null (then no text, no end-of-generation
// detection). Session and backend errors are returned as they are;
// InvalidArgument for an empty prompt or a negative max_tokens.
absl::StatusOr<GenerationResult> Generate(arch::Session& session, sampling::Sampler& sampler,
                                          const tokenizer::Tokenizer* tokenizer,
                                          absl::Span<const int32_t> prompt,
                                          const GenerationOptions& options,
                                          const GenerationCallbacks& callbacks);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_H_
