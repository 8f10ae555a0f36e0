// What one generation is asked for and what it yields, and its per-token
// part: sampling, log-probabilities, text decoding and stop strings
// (TokenEmitter). The GenerationScheduler (generation_scheduler.h) drives
// every generation of `run`, the gRPC service and the HTTP API through it, so
// they produce the same tokens by construction.
//
// Stop strings never reach the output: text that could be the start of a stop
// string is held back until it is known not to be one, and a stop string ends
// the text just before it.
#ifndef COLIBRI_COORDINATOR_GENERATION_GENERATION_H_
#define COLIBRI_COORDINATOR_GENERATION_GENERATION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "coordinator/generation/speculation_options.h"
#include "model/sampling/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {

enum class FinishReason {
  kLength,           // max_tokens generated
  kEndOfGeneration,  // an end-of-generation token (not with ignore_eos)
  kStop,             // the generated text reached a stop string
  kContextFull,      // no position left in the session's context
  kCancelled,        // on_token returned false
};

// Most top_logprobs a request may ask for.
inline constexpr int kMaxTopLogprobs = 20;

struct GenerationOptions {
  // Tokens to generate; 0 evaluates the prompt only. Default: 64.
  int max_tokens = 64;
  // Keep generating past end-of-generation tokens. Default: false.
  bool ignore_eos = false;
  // Stop once the generated text contains one of these. The text then ends
  // just before the first stop string (which is never reported); the tokens
  // include the one that completed it. Needs a tokenizer and decode_text.
  // Default: none.
  std::vector<std::string> stop;
  // Report GeneratedToken::logprob (and top_logprobs) for every token.
  // Costs a pass over the vocabulary per token. Default: false.
  bool logprobs = false;
  // With logprobs: this many most likely tokens at each step, 0 to 20.
  // Default: 0.
  int top_logprobs = 0;
  // Decode tokens into UTF-8-safe text pieces (needs a tokenizer).
  // Default: true.
  bool decode_text = true;
  // Also evaluate the last generated token and an end-of-generation one, only
  // to report their logits (GenerationJob::OnLogits). Default: false.
  bool evaluate_every_token = false;
  // Report prompt logits for every prompt position, not only the last.
  // Default: false.
  bool all_prompt_logits = false;
};

// Cuts streamed text at the first stop string and holds back its possible
// beginnings: Push returns only text that can no longer be part of a stop
// string. Thread-safety: none (one generation's state).
class StopStringFilter {
 public:
  // Empty strings are ignored.
  explicit StopStringFilter(std::vector<std::string> stop);

  // Appends `piece` to the text and returns what is now safe to release
  // (nothing once stopped).
  std::string Push(absl::string_view piece);
  // Releases what is still held back (at the end of the generation).
  std::string Flush();
  // True once the text reached a stop string.
  bool stopped() const { return stopped_; }
  // All text so far, ending just before the stop string once stopped.
  const std::string& text() const { return text_; }

 private:
  size_t FindStop() const;
  size_t HeldBack() const;

  std::vector<std::string> stop_;
  std::string text_;
  size_t released_ = 0;  // text_[0, released_) was returned
  bool stopped_ = false;
};

// A token and its natural-log probability under the model (the log-softmax
// of the raw logits, before any sampling transformation).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

struct GeneratedToken {
  int32_t id = 0;
  // The text released with this token: what it completed, plus text held back
  // from earlier tokens that turned out not to start a stop string, minus what
  // may start one now. Empty inside a multi-byte character, for an
  // end-of-generation token and without decode_text.
  std::string text;
  bool end_of_generation = false;
  // With GenerationOptions::logprobs: this token's log-probability and the
  // top_logprobs most likely tokens, most likely first.
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // every generated id, end-of-generation included
  std::string text;             // the concatenated pieces, trailing_text included
  // Text not reported through on_token: what was still held back as a
  // possible stop string when the generation ended, and the bytes the decoder
  // still held (an incomplete character).
  std::string trailing_text;
  FinishReason finish_reason = FinishReason::kLength;
  double prompt_seconds = 0;
  double generate_seconds = 0;
  // For each generated token fed back, in order, the seconds from the
  // sampling of the token before it to the end of its own forward pass (with
  // speculation, a token accepted from a verified draft costs next to
  // nothing, the one whose pass verified the drafts all of it). A caller
  // tells a steady slowdown from a few stalled tokens with it.
  std::vector<float> token_seconds;
  SpeculationStats speculation;
};

// Log-softmax of `logits` ([n_vocab]; NaN counts as -inf) at `id`, and the
// `top` most likely tokens (most likely first, ties by lower id) into *top.
float LogSoftmaxAt(absl::Span<const float> logits, int32_t id, int top,
                   std::vector<TokenLogprob>* top_out);

// The per-token part of a generation: samples a token
// from the logits, adds its logprobs, decodes its text through the stop
// strings and reports it through on_token. Thread-safety: none (one
// generation's state). sampler, tokenizer (may be null) and options are
// borrowed.
class TokenEmitter {
 public:
  TokenEmitter(sampling::Sampler& sampler, const tokenizer::Tokenizer* tokenizer,
               const GenerationOptions& options);

  // Samples the next token from `logits` ([n_vocab]), appends it to
  // result->tokens, fills *token and calls on_token (may be empty). Returns
  // the reason the generation ends with this token (end of generation, then
  // stop string, then on_token returning false), or nullopt when the token is
  // to be fed back.
  std::optional<FinishReason> Emit(absl::Span<const float> logits,
                                   const std::function<bool(const GeneratedToken&)>& on_token,
                                   GenerationResult* result, GeneratedToken* token);
  // At the end of the generation: the text still held back goes to
  // result->trailing_text, the whole text to result->text (a stop string
  // completed by the held-back bytes sets kStop). Nothing without decoding.
  void Finish(GenerationResult* result);

 private:
  sampling::Sampler& sampler_;
  const tokenizer::Tokenizer* const tokenizer_;
  const GenerationOptions& options_;
  std::unique_ptr<tokenizer::StreamDecoder> decoder_;  // null without decode_text
  StopStringFilter filter_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_GENERATION_H_
