#include "coordinator/generation.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "common/status_macros.h"

namespace colibri::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// True when a stop string ends within the last `added` bytes of `text` (or
// started before them): only those positions are new since the last check.
bool EndsInStop(const std::string& text, size_t added, const std::vector<std::string>& stop) {
  for (const std::string& s : stop) {
    if (s.empty() || text.size() < s.size()) continue;
    const size_t from = text.size() - std::min(text.size(), added + s.size() - 1);
    if (text.find(s, from) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<GenerationResult> Generate(arch::Session& session, sampling::Sampler& sampler,
                                          const tokenizer::Tokenizer* tokenizer,
                                          absl::Span<const int32_t> prompt,
                                          const GenerationOptions& options,
                                          const GenerationCallbacks& callbacks) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (options.max_tokens < 0) return absl::InvalidArgumentError("max_tokens must be >= 0");
  const auto report = [&](absl::Span<const float> logits) {
    return callbacks.on_logits ? callbacks.on_logits(logits) : absl::OkStatus();
  };

  GenerationResult result;
  std::vector<float> logits;
  const auto prompt_start = Clock::now();
  COLIBRI_RETURN_IF_ERROR(session.Evaluate(prompt, options.all_prompt_logits, &logits));
  result.prompt_seconds = Seconds(prompt_start);
  COLIBRI_RETURN_IF_ERROR(report(logits));
  for (int32_t id : prompt) sampler.Accept(id);
  if (callbacks.on_prompt_done) callbacks.on_prompt_done();

  const size_t n_vocab = static_cast<size_t>(sampler.n_vocab());
  const float* last = logits.data() + (logits.size() - n_vocab);
  std::vector<float> next(last, last + n_vocab);  // [n_vocab]
  // max_tokens is the caller's; what can be generated is bounded by the
  // positions left (plus the last token, sampled but never fed back).
  const int room = std::max(0, session.n_ctx() - session.n_past()) + 1;
  result.tokens.reserve(static_cast<size_t>(std::min(options.max_tokens, room)));
  std::unique_ptr<tokenizer::StreamDecoder> decoder;
  if (tokenizer != nullptr && options.decode_text) {
    decoder = std::make_unique<tokenizer::StreamDecoder>(*tokenizer);
  }

  const auto gen_start = Clock::now();
  result.finish_reason = FinishReason::kLength;
  for (int i = 0; i < options.max_tokens; ++i) {
    GeneratedToken token;
    token.id = sampler.Sample(next);
    sampler.Accept(token.id);
    result.tokens.push_back(token.id);
    token.end_of_generation =
        tokenizer != nullptr && tokenizer->IsEndOfGeneration(token.id) && !options.ignore_eos;
    if (decoder != nullptr && !token.end_of_generation) token.text = decoder->Push(token.id);
    result.text += token.text;
    const bool stop = EndsInStop(result.text, token.text.size(), options.stop);
    const bool keep_going = callbacks.on_token ? callbacks.on_token(token) : true;

    if (token.end_of_generation) {
      if (options.evaluate_every_token) {
        COLIBRI_RETURN_IF_ERROR(session.Evaluate({&token.id, 1}, false, &next));
        COLIBRI_RETURN_IF_ERROR(report(next));
      }
      result.finish_reason = FinishReason::kEndOfGeneration;
      break;
    }
    if (stop) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    if (!keep_going) {
      result.finish_reason = FinishReason::kCancelled;
      break;
    }
    // The last token needs evaluating only to report its logits.
    if (i + 1 == options.max_tokens && !options.evaluate_every_token) break;
    if (session.n_past() >= session.n_ctx()) {
      result.finish_reason = FinishReason::kContextFull;
      break;
    }
    COLIBRI_RETURN_IF_ERROR(session.Evaluate({&token.id, 1}, false, &next));
    COLIBRI_RETURN_IF_ERROR(report(next));
  }
  result.generate_seconds = Seconds(gen_start);
  if (decoder != nullptr) {
    result.trailing_text = decoder->Flush();
    result.text += result.trailing_text;
  }
  return result;
}

}  // namespace colibri::coordinator
