#include "coordinator/generation/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

namespace colibri::coordinator {
namespace {

float Logit(float x) { return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x; }

}  // namespace

StopStringFilter::StopStringFilter(std::vector<std::string> stop) {
  for (std::string& s : stop) {
    if (!s.empty()) stop_.push_back(std::move(s));
  }
}

size_t StopStringFilter::FindStop() const {
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, text_.find(s, released_));
  return first;
}

size_t StopStringFilter::HeldBack() const {
  size_t held = 0;
  for (const std::string& s : stop_) {
    const size_t longest = std::min(s.size() - 1, text_.size() - released_);
    for (size_t len = longest; len > held; --len) {
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        held = len;
        break;
      }
    }
  }
  return held;
}

std::string StopStringFilter::Push(absl::string_view piece) {
  if (stopped_) return "";
  text_.append(piece.data(), piece.size());
  // No stop string can start before released_: the text there was released
  // only once no suffix of it was a prefix of one.
  const size_t at = FindStop();
  if (at != std::string::npos) {
    text_.resize(at);
    stopped_ = true;
  }
  const size_t held = stopped_ ? 0 : HeldBack();
  std::string out = text_.substr(released_, text_.size() - held - released_);
  released_ = text_.size() - held;
  return out;
}

std::string StopStringFilter::Flush() {
  std::string out = text_.substr(released_);
  released_ = text_.size();
  return out;
}

float LogSoftmaxAt(absl::Span<const float> logits, int32_t id, int top,
                   std::vector<TokenLogprob>* top_out) {
  float max = -std::numeric_limits<float>::infinity();
  for (float x : logits) max = std::max(max, Logit(x));
  const double sum = std::isfinite(max) ? sampling::SumExpBelow(logits, max) : 0.0;
  // log p(i) = logit(i) - (max + log(sum exp(logit - max)))
  const double log_norm = std::isfinite(max) ? max + std::log(sum) : 0.0;
  const auto logprob = [&](int32_t i) {
    return static_cast<float>(static_cast<double>(Logit(logits[i])) - log_norm);
  };
  if (top_out != nullptr) {
    top_out->clear();
    // A min-heap (by rank) of the best `top` seen so far: its front is the
    // worst kept, replaced by anything better.
    const auto better = [&](int32_t a, int32_t b) {
      const float la = Logit(logits[a]), lb = Logit(logits[b]);
      return la > lb || (la == lb && a < b);
    };
    std::vector<int32_t> heap;
    const size_t keep = std::min<size_t>(std::max(top, 0), logits.size());
    heap.reserve(keep + 1);
    for (int32_t i = 0; keep > 0 && i < static_cast<int32_t>(logits.size()); ++i) {
      if (heap.size() < keep) {
        heap.push_back(i);
        std::push_heap(heap.begin(), heap.end(), better);
      } else if (better(i, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), better);
        heap.back() = i;
        std::push_heap(heap.begin(), heap.end(), better);
      }
    }
    std::sort(heap.begin(), heap.end(), better);
    for (int32_t i : heap) top_out->push_back({i, logprob(i)});
  }
  return logprob(id);
}

TokenEmitter::TokenEmitter(sampling::Sampler& sampler, const tokenizer::Tokenizer* tokenizer,
                           const GenerationOptions& options)
    : sampler_(sampler), tokenizer_(tokenizer), options_(options), filter_(options.stop) {
  if (tokenizer != nullptr && options.decode_text) {
    decoder_ = std::make_unique<tokenizer::StreamDecoder>(*tokenizer);
  }
}

std::optional<FinishReason> TokenEmitter::Emit(
    absl::Span<const float> logits, const std::function<bool(const GeneratedToken&)>& on_token,
    GenerationResult* result, GeneratedToken* token) {
  *token = GeneratedToken();
  token->id = sampler_.Sample(logits);
  if (options_.logprobs) {
    token->logprob = LogSoftmaxAt(logits, token->id, options_.top_logprobs, &token->top_logprobs);
  }
  sampler_.Accept(token->id);
  result->tokens.push_back(token->id);
  token->end_of_generation =
      tokenizer_ != nullptr && tokenizer_->IsEndOfGeneration(token->id) && !options_.ignore_eos;
  if (decoder_ != nullptr && !token->end_of_generation) {
    token->text = filter_.Push(decoder_->Push(token->id));
  }
  const bool stop = filter_.stopped();
  const bool keep_going = on_token ? on_token(*token) : true;
  if (token->end_of_generation) return FinishReason::kEndOfGeneration;
  if (stop) return FinishReason::kStop;
  if (!keep_going) return FinishReason::kCancelled;
  return std::nullopt;
}

void TokenEmitter::Finish(GenerationResult* result) {
  if (decoder_ == nullptr) return;
  // After a stop string the decoder's remaining bytes come after it too.
  result->trailing_text = filter_.Push(decoder_->Flush());
  if (filter_.stopped()) result->finish_reason = FinishReason::kStop;
  result->trailing_text += filter_.Flush();
  result->text = filter_.text();
}

}  // namespace colibri::coordinator
