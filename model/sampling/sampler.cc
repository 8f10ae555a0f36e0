#include "model/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

absl::Status OutOfRange(const char* field, double value, const char* range) {
  return absl::InvalidArgumentError(
      absl::StrCat("SamplingOptions.", field, " = ", value, " is outside ", range));
}

void CheckVocab(size_t size, int32_t n_vocab) {
  if (size != static_cast<size_t>(n_vocab)) {
    std::fprintf(stderr, "colibri::sampling::Sampler: %zu logits for a vocabulary of %d\n", size,
                 n_vocab);
    std::abort();
  }
}

}  // namespace

absl::Status SamplingOptions::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0) {
    return OutOfRange("temperature", temperature, "[0, inf)");
  }
  if (top_k < 0) return OutOfRange("top_k", top_k, "[0, inf)");
  if (!(top_p > 0 && top_p <= 1)) return OutOfRange("top_p", top_p, "(0, 1]");
  if (!(min_p >= 0 && min_p <= 1)) return OutOfRange("min_p", min_p, "[0, 1]");
  if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0) {
    return OutOfRange("repeat_penalty", repeat_penalty, "(0, inf)");
  }
  if (!std::isfinite(presence_penalty)) {
    return OutOfRange("presence_penalty", presence_penalty, "the finite numbers");
  }
  if (!std::isfinite(frequency_penalty)) {
    return OutOfRange("frequency_penalty", frequency_penalty, "the finite numbers");
  }
  if (penalty_last_n < -1 || penalty_last_n > kMaxPenaltyLastN) {
    return OutOfRange("penalty_last_n", penalty_last_n,
                      absl::StrCat("[-1, ", kMaxPenaltyLastN, "]").c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Sampler>> Sampler::Create(const SamplingOptions& options,
                                                         int32_t n_vocab) {
  COLIBRI_RETURN_IF_ERROR(options.Validate());
  if (n_vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Sampler: n_vocab = ", n_vocab, " must be > 0"));
  }
  return std::unique_ptr<Sampler>(new Sampler(options, n_vocab));
}

Sampler::Sampler(const SamplingOptions& options, int32_t n_vocab)
    : options_(options),
      n_vocab_(n_vocab),
      candidates_(static_cast<size_t>(n_vocab)),
      rng_(options.seed) {
  if (penalties_enabled()) {
    counts_.assign(static_cast<size_t>(n_vocab), 0);
    position_.assign(static_cast<size_t>(n_vocab), 0);
    distinct_.reserve(static_cast<size_t>(n_vocab));
    if (options.penalty_last_n > 0) window_.assign(static_cast<size_t>(options.penalty_last_n), 0);
  }
}

bool Sampler::penalties_enabled() const {
  return options_.penalty_last_n != 0 &&
         (options_.repeat_penalty != 1.0f || options_.presence_penalty != 0.0f ||
          options_.frequency_penalty != 0.0f);
}

void Sampler::Reset() {
  for (int32_t token : distinct_) counts_[static_cast<size_t>(token)] = 0;
  distinct_.clear();
  window_head_ = 0;
  window_size_ = 0;
  rng_.seed(options_.seed);
}

void Sampler::Accept(int32_t token) {
  if (!penalties_enabled() || token < 0 || token >= n_vocab_) return;
  if (!window_.empty()) {
    if (window_size_ == window_.size()) {
      const auto evicted = static_cast<size_t>(window_[window_head_]);
      if (--counts_[evicted] == 0) {
        // Swap-remove from distinct_.
        const int32_t last = distinct_.back();
        distinct_[static_cast<size_t>(position_[evicted])] = last;
        position_[static_cast<size_t>(last)] = position_[evicted];
        distinct_.pop_back();
      }
    } else {
      ++window_size_;
    }
    window_[window_head_] = token;
    window_head_ = (window_head_ + 1) % window_.size();
  }
  const auto t = static_cast<size_t>(token);
  if (counts_[t]++ == 0) {
    position_[t] = static_cast<int32_t>(distinct_.size());
    distinct_.push_back(token);
  }
}

float Sampler::Penalised(int32_t token, float logit) const {
  const int32_t count = counts_[static_cast<size_t>(token)];
  logit = logit > 0 ? logit / options_.repeat_penalty : logit * options_.repeat_penalty;
  return logit - static_cast<float>(count) * options_.frequency_penalty - options_.presence_penalty;
}

void Sampler::ApplyPenalties(absl::Span<float> logits) const {
  CheckVocab(logits.size(), n_vocab_);
  for (int32_t token : distinct_) {
    float& logit = logits[static_cast<size_t>(token)];
    logit = Penalised(token, logit);
  }
}

bool Sampler::ByLogit(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void Sampler::ApplyTopK(int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= n_candidates_) return;
  const auto end = candidates_.begin() + static_cast<ptrdiff_t>(n_candidates_);
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, end, ByLogit);
  n_candidates_ = static_cast<size_t>(k);
  sorted_ = true;
}

void Sampler::ApplyTopP(float p, float max_logit) {
  if (p >= 1.0f || n_candidates_ <= 1) return;
  const auto begin = candidates_.begin();
  double sum = 0;
  for (size_t i = 0; i < n_candidates_; ++i) {
    candidates_[i].p = std::exp(candidates_[i].logit - max_logit);
    sum += candidates_[i].p;
  }
  const double target = static_cast<double>(p) * sum;
  // The nucleus is usually a small prefix: sort a growing prefix instead of the
  // whole vocabulary. The order is total, so the prefix is the same either way.
  size_t sorted = sorted_ ? n_candidates_ : 0;
  size_t k = std::min(n_candidates_, size_t{256});
  for (;;) {
    if (k > sorted) {
      std::partial_sort(begin, begin + static_cast<ptrdiff_t>(k),
                        begin + static_cast<ptrdiff_t>(n_candidates_), ByLogit);
      sorted = k;
    }
    double cumulative = 0;
    for (size_t i = 0; i < k; ++i) {
      cumulative += candidates_[i].p;
      if (cumulative >= target) {
        n_candidates_ = i + 1;
        sorted_ = true;
        return;
      }
    }
    if (k == n_candidates_) break;  // rounding: the whole mass fell just short
    k = std::min(n_candidates_, 4 * k);
  }
  sorted_ = true;
}

void Sampler::ApplyMinP(float p, float max_logit) {
  if (p <= 0.0f || n_candidates_ <= 1) return;
  // p_i >= p * p_max  <=>  logit_i >= max_logit + log(p).
  const float threshold = max_logit + std::log(p);
  size_t kept = 0;
  for (size_t i = 0; i < n_candidates_; ++i) {
    if (candidates_[i].logit >= threshold) candidates_[kept++] = candidates_[i];
  }
  // Compaction keeps the order, so a sorted list stays sorted. The maximum always
  // passes, so kept >= 1.
  n_candidates_ = kept;
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(absl::Span<const float> logits) {
  CheckVocab(logits.size(), n_vocab_);
  if (options_.temperature == 0.0f && distinct_.empty()) {
    // Greedy with nothing to penalise: the first maximum, straight from the
    // logits (what the path below returns: NaN counts as -inf, which no
    // strict comparison prefers), without copying the vocabulary.
    size_t best = 0;
    float best_logit = std::isnan(logits[0]) ? kNegInf : logits[0];
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > best_logit) {
        best = i;
        best_logit = logits[i];
      }
    }
    return static_cast<int32_t>(best);
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const float logit = logits[i];
    candidates_[i] = {std::isnan(logit) ? kNegInf : logit, static_cast<int32_t>(i), 0.0f};
  }
  n_candidates_ = logits.size();
  sorted_ = false;

  for (int32_t token : distinct_) {
    Candidate& c = candidates_[static_cast<size_t>(token)];
    c.logit = Penalised(token, c.logit);
  }

  // Greedy, and the degenerate case the softmax cannot handle (an infinite maximum).
  size_t best = 0;
  for (size_t i = 1; i < n_candidates_; ++i) {
    if (candidates_[i].logit > candidates_[best].logit) best = i;
  }
  if (options_.temperature == 0.0f || !std::isfinite(candidates_[best].logit)) {
    return candidates_[best].id;
  }
  // The maximum survives every filter.
  const float max_logit = candidates_[best].logit;
  ApplyTopK(options_.top_k);
  ApplyTopP(options_.top_p, max_logit);
  ApplyMinP(options_.min_p, max_logit);

  double sum = 0;
  for (size_t i = 0; i < n_candidates_; ++i) {
    candidates_[i].p = std::exp((candidates_[i].logit - max_logit) / options_.temperature);
    sum += candidates_[i].p;
  }
  const double target = NextUniform() * sum;
  double cumulative = 0;
  size_t last_positive = 0;
  for (size_t i = 0; i < n_candidates_; ++i) {
    if (candidates_[i].p <= 0.0f) continue;
    cumulative += candidates_[i].p;
    last_positive = i;
    if (target < cumulative) return candidates_[i].id;
  }
  return candidates_[last_positive].id;
}

}  // namespace colibri::sampling
