#include "model/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/ops/exp_lanes.h"

namespace colibri::sampling {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

absl::Status OutOfRange(const char* field, double value, const char* range) {
  return absl::InvalidArgumentError(
      absl::StrCat("SamplingOptions.", field, " = ", value, " is outside ", range));
}

// Four floats as one value (model/ops/exp_lanes.h): every target gives the
// same bits. F2 and D2 carry the sums in double.
using ops::lanes::F4;
using ops::lanes::I4;
using ops::lanes::kLanes;
using ops::lanes::LoadF4;
using ops::lanes::Select;
using ops::lanes::SplatF4;
typedef float F2 __attribute__((vector_size(8)));
typedef double D2 __attribute__((vector_size(16)));

// internal::ExpNonPositive's exp, lane by lane.
using ops::lanes::ExpLanes;

// Logit buckets, by which top-p narrows down the candidates it sorts: kBucketsPerLogit per unit
// below the maximum, kLogitBuckets in all (128 units, exp(-128) of the maximum's probability), the
// last also taking everything lower, -inf and NaN. A bucket holds whole runs of equal logits and a
// higher logit never falls in a later bucket, so the buckets up to any one hold the most likely
// candidates.
constexpr float kBucketsPerLogit = 8.0f;
constexpr size_t kLogitBuckets = 1024;

size_t LogitBucket(float max, float logit) {
  constexpr size_t kLast = kLogitBuckets - 1;
  const float below = (max - logit) * kBucketsPerLogit;  // >= 0, inf or NaN
  return below < static_cast<float>(kLast) ? static_cast<size_t>(below) : kLast;
}

// Elements whose probabilities are summed together before the running sum
// takes them (Exps, DrawIndex).
constexpr size_t kBlock = 64;

// Index of the first largest of x[0, n), NaN counting as -inf; 0 when every
// element is -inf or NaN. block_max: scratch of n / kBlock + 1 floats.
size_t FirstMax(const float* x, size_t n, float* block_max) {
  float best = kNegInf;
  for (size_t start = 0, b = 0; start < n; start += kBlock, ++b) {
    const size_t len = std::min(kBlock, n - start);
    float m = kNegInf;
    if (len == kBlock) {
      F4 m4[4] = {SplatF4(kNegInf), SplatF4(kNegInf), SplatF4(kNegInf), SplatF4(kNegInf)};
      for (size_t j = 0; j < kBlock; j += 4 * kLanes) {
        for (size_t k = 0; k < 4; ++k) {
          const F4 v = LoadF4(x + start + j + k * kLanes);
          m4[k] = Select(v > m4[k], v, m4[k]);  // NaN compares false: skipped
        }
      }
      for (const F4& v : m4) {
        for (size_t k = 0; k < kLanes; ++k) m = v[k] > m ? v[k] : m;
      }
    } else {
      for (size_t j = 0; j < len; ++j) m = x[start + j] > m ? x[start + j] : m;
    }
    block_max[b] = m;
    best = m > best ? m : best;
  }
  if (best == kNegInf) return 0;
  size_t i = 0;
  while (!(block_max[i / kBlock] == best)) i += kBlock;
  while (!(x[i] == best)) ++i;
  return i;
}

// values[i] = ExpLanes((x[i] - max) * scale) for i in [0, len), len <=
// kBlock; 0 from len to kBlock.
void ExpBlock(const float* x, size_t len, F4 vmax, F4 vscale, float* values) {
  if (len == kBlock) {
    // Four vectors at a time: independent chains the core can overlap.
    for (size_t j = 0; j < kBlock; j += 4 * kLanes) {
      F4 e[4];
      for (size_t k = 0; k < 4; ++k) {
        e[k] = ExpLanes((LoadF4(x + j + k * kLanes) - vmax) * vscale);
      }
      std::memcpy(values + j, e, sizeof(e));
    }
    return;
  }
  std::fill(values, values + kBlock, 0.0f);
  for (size_t j = 0; j < len; j += kLanes) {
    float lanes[kLanes];  // -inf (probability 0) past the end
    for (size_t k = 0; k < kLanes; ++k) lanes[k] = j + k < len ? x[j + k] : kNegInf;
    const F4 e = ExpLanes((LoadF4(lanes) - vmax) * vscale);
    std::memcpy(values + j, &e, sizeof(e));
  }
}

// s[k] += values' pairs 2k and 2k + 1 of every 8, in double: element i goes
// to partial sum i % 8 (s[i % 8 / 2] lane i % 2).
void AddPairs(const float* values, D2 s[4]) {
  for (size_t j = 0; j < kBlock; j += 8) {
    for (size_t k = 0; k < 4; ++k) {
      F2 pair;
      std::memcpy(&pair, values + j + 2 * k, sizeof(pair));
      s[k] += __builtin_convertvector(pair, D2);
    }
  }
}

// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) of AddPairs' sums.
double CombinePairs(const D2 s[4]) {
  return ((s[0][0] + s[0][1]) + (s[1][0] + s[1][1])) + ((s[2][0] + s[2][1]) + (s[3][0] + s[3][1]));
}

// p[i] = ExpLanes((x[i] - max) * scale) for i in [0, n), and block[b]
// = Σ of p over block b (kBlock elements, the last one possibly shorter) in
// double, in a fixed order (AddPairs, CombinePairs). Returns the sequential
// sum of the blocks. Every element must be <= max (or NaN).
double Exps(const float* x, size_t n, float max, float scale, float* p, double* block) {
  const F4 vmax = SplatF4(max);
  const F4 vscale = SplatF4(scale);
  double total = 0;
  for (size_t start = 0, b = 0; start < n; start += kBlock, ++b) {
    const size_t len = std::min(kBlock, n - start);
    alignas(16) float values[kBlock];
    ExpBlock(x + start, len, vmax, vscale, values);
    std::memcpy(p + start, values, len * sizeof(float));
    D2 s[4] = {};
    AddPairs(values, s);
    block[b] = CombinePairs(s);
    total += block[b];
  }
  return total;
}

// Draws an index of p[0, n) from Exps' output (block sums `block`) at
// `target` in [0, Σ block): the first i with p[i] > 0 whose running
// sum passes target, the running sum being the blocks' before i's block plus
// the elements before i in it; when rounding leaves no such i in the block
// (or the whole), the last element with p > 0 there. Some p[i] must be > 0.
size_t DrawIndex(const float* p, size_t n, const double* block, double target) {
  double before = 0;
  size_t last_block = 0;
  for (size_t start = 0, b = 0; start < n; start += kBlock, ++b) {
    if (!(block[b] > 0)) continue;
    last_block = b;
    if (target < before + block[b]) break;
    before += block[b];
  }
  const size_t start = last_block * kBlock;
  const size_t end = std::min(n, start + kBlock);
  double cumulative = before;
  size_t last_positive = start;
  for (size_t i = start; i < end; ++i) {
    if (!(p[i] > 0)) continue;
    cumulative += p[i];
    last_positive = i;
    if (target < cumulative) return i;
  }
  return last_positive;
}

void CheckVocab(size_t size, int32_t n_vocab) {
  if (size != static_cast<size_t>(n_vocab)) {
    std::fprintf(stderr, "colibri::sampling::Sampler: %zu logits for a vocabulary of %d\n", size,
                 n_vocab);
    std::abort();
  }
}

}  // namespace

namespace internal {
float ExpNonPositive(float x) { return ExpLanes(SplatF4(x))[0]; }
}  // namespace internal

double SumExpBelow(absl::Span<const float> x, float max) {
  // Exps' arithmetic without storing: one set of partial sums for the whole
  // row (the zeros padding the last block change nothing).
  const F4 vmax = SplatF4(max);
  const F4 one = SplatF4(1.0f);
  D2 s[4] = {};
  for (size_t start = 0; start < x.size(); start += kBlock) {
    alignas(16) float values[kBlock];
    ExpBlock(x.data() + start, std::min(kBlock, x.size() - start), vmax, one, values);
    AddPairs(values, s);
  }
  return CombinePairs(s);
}

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
      work_(static_cast<size_t>(n_vocab)),
      probs_(static_cast<size_t>(n_vocab)),
      blocks_((static_cast<size_t>(n_vocab) + kBlock - 1) / kBlock),
      bucket_mass_(kLogitBuckets),
      sample_(static_cast<size_t>(n_vocab) / 64 + 1),
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

void Sampler::FillCandidates(const float* x, size_t n, size_t k) {
  sorted_ = false;
  const auto fill_all = [&] {
    for (size_t i = 0; i < n; ++i) {
      candidates_[i] = {std::isnan(x[i]) ? kNegInf : x[i], static_cast<int32_t>(i), 0.0f};
    }
    n_candidates_ = n;
  };
  if (k == 0 || k >= n) {
    fill_all();
    return;
  }
  // Only the tokens at or above a threshold that at least k reach: a logit
  // of every 64th token, chosen so that about 4k + 64 tokens should reach it
  // (lower, 4x as many, while fewer than k do), then the tokens that reach
  // it in id order. Every token above a kept one is kept, ties included, so
  // the k most likely are among them.
  constexpr size_t kStride = 64;
  float* sample = sample_.data();
  size_t samples = 0;
  for (size_t i = 0; i < n; i += kStride) sample[samples++] = std::isnan(x[i]) ? kNegInf : x[i];
  for (size_t want = (4 * k + 64) / kStride + 1; want < samples; want *= 4) {
    std::nth_element(sample, sample + want - 1, sample + samples, std::greater<float>());
    const float threshold = sample[want - 1];
    if (threshold == kNegInf) break;  // as low as it goes: every token
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {  // NaN compares false: left out
      if (x[i] >= threshold) candidates_[m++] = {x[i], static_cast<int32_t>(i), 0.0f};
    }
    if (m >= k) {
      n_candidates_ = m;
      return;
    }
  }
  fill_all();
}

void Sampler::ApplyTopK(int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= n_candidates_) return;
  const auto end = candidates_.begin() + static_cast<ptrdiff_t>(n_candidates_);
  const auto by_logit = [](const Candidate& a, const Candidate& b) { return ByLogit(a, b); };
  std::partial_sort(candidates_.begin(), candidates_.begin() + k, end, by_logit);
  n_candidates_ = static_cast<size_t>(k);
  sorted_ = true;
}

void Sampler::ApplyTopP(float p, float max_logit) {
  if (p >= 1.0f || n_candidates_ <= 1) return;
  for (size_t i = 0; i < n_candidates_; ++i) work_[i] = candidates_[i].logit;
  const double sum =
      Exps(work_.data(), n_candidates_, max_logit, 1.0f, probs_.data(), blocks_.data());
  for (size_t i = 0; i < n_candidates_; ++i) candidates_[i].p = probs_[i];
  CutNucleus(static_cast<double>(p) * sum, max_logit);
}

void Sampler::TopPFromLogits(const float* x, size_t n, float max_logit) {
  // Every token's probability at temperature 1 and their sum, in id order
  // (what ApplyTopP computes over all the tokens as candidates), then
  // candidates for the 256 or more likeliest only (FillCandidates). They
  // are the start of the sorted list: when their running sum reaches the
  // target, the nucleus ends among them; otherwise every token becomes a
  // candidate for CutNucleus.
  const double sum = Exps(x, n, max_logit, 1.0f, probs_.data(), blocks_.data());
  const double target = static_cast<double>(options_.top_p) * sum;
  FillCandidates(x, n, 256);
  for (size_t i = 0; i < n_candidates_; ++i) {
    candidates_[i].p = probs_[static_cast<size_t>(candidates_[i].id)];
  }
  // (Past 2048 of them, ties or flat logits let many through: sorting them
  // all would cost more than CutNucleus' partial sort.)
  if (n_candidates_ <= 2048 && n_candidates_ < n) {
    std::sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(n_candidates_),
              [](const Candidate& a, const Candidate& b) { return ByLogit(a, b); });
    double mass = 0;  // in CutNucleus' order, so it cuts where this reaches
    for (size_t i = 0; i < n_candidates_; ++i) mass += candidates_[i].p;
    if (mass >= target) {
      sorted_ = true;
      CutNucleus(target, max_logit);
      return;
    }
  }
  // Not among them: every token.
  if (n_candidates_ < n) {
    FillCandidates(x, n, 0);
    for (size_t i = 0; i < n; ++i) candidates_[i].p = probs_[i];
  }
  CutNucleus(target, max_logit);
}

void Sampler::CutNucleus(double target, float max_logit) {
  const auto begin = candidates_.begin();
  const auto at = [&](size_t i) { return begin + static_cast<ptrdiff_t>(i); };
  const auto by_logit = [](const Candidate& a, const Candidate& b) { return ByLogit(a, b); };
  // The nucleus is usually a small prefix, so only a prefix that holds it is
  // sorted: first the 256 most likely candidates (partial_sort, which with a
  // small k costs little more than one pass). When they fall short, the rest
  // are bucketed by logit (LogitBucket) with each bucket's mass; the buckets
  // that bring the mass past the target by a margin (1e-9 relative, which
  // summing in another order cannot undo: n terms move a sum by about
  // n * 2^-53 relative) are moved to the front (std::partition) and sorted.
  // The order is total, so the sorted prefix is exactly the start of the
  // whole sorted list, and the nucleus the one a full sort gives.
  size_t prefix = n_candidates_;
  if (!sorted_) {
    prefix = std::min(n_candidates_, size_t{256});
    std::partial_sort(begin, at(prefix), at(n_candidates_), by_logit);
    double mass = 0;
    for (size_t i = 0; i < prefix; ++i) mass += candidates_[i].p;
    if (prefix < n_candidates_ && mass < target * (1 + 1e-9)) {
      const size_t last = bucket_mass_.size() - 1;
      const auto bucket = [&](const Candidate& c) { return LogitBucket(max_logit, c.logit); };
      std::fill(bucket_mass_.begin(), bucket_mass_.end(), 0.0);
      for (size_t i = prefix; i < n_candidates_; ++i) {
        bucket_mass_[bucket(candidates_[i])] += candidates_[i].p;
      }
      size_t kept = last;  // every bucket, unless fewer reach the target
      for (size_t b = 0; b <= last; ++b) {
        mass += bucket_mass_[b];
        if (mass >= target * (1 + 1e-9)) {
          kept = b;
          break;
        }
      }
      const size_t sorted = prefix;
      prefix = static_cast<size_t>(
          std::partition(at(prefix), at(n_candidates_),
                         [&](const Candidate& c) { return bucket(c) <= kept; }) -
          begin);
      std::sort(at(sorted), at(prefix), by_logit);
    }
  }
  double cumulative = 0;
  for (size_t i = 0; i < n_candidates_; ++i) {
    if (i == prefix) std::sort(at(prefix), at(n_candidates_), by_logit);  // not reached in practice
    cumulative += candidates_[i].p;
    if (cumulative >= target) {
      n_candidates_ = i + 1;
      break;  // the smallest prefix reaching the target
    }
  }
  // (Rounding may leave the whole mass just short: then every candidate stays.)
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
  const size_t n = logits.size();
  const float* x = logits.data();
  if (!distinct_.empty()) {  // the penalties, on a copy
    for (size_t i = 0; i < n; ++i) work_[i] = std::isnan(x[i]) ? kNegInf : x[i];
    for (int32_t token : distinct_) {
      float& logit = work_[static_cast<size_t>(token)];
      logit = Penalised(token, logit);
    }
    x = work_.data();
  }
  // Greedy (also a temperature so small that 1 / T overflows: its limit),
  // and the degenerate case the softmax cannot handle (an infinite maximum,
  // or nothing but -inf and NaN).
  const size_t best = FirstMax(x, n, probs_.data());
  const float inverse_temperature = 1.0f / options_.temperature;  // inf when T == 0
  if (!std::isfinite(inverse_temperature) || !std::isfinite(x[best])) {
    return static_cast<int32_t>(best);
  }
  // The maximum survives every filter.
  const float max_logit = x[best];
  if (options_.top_k <= 0 && options_.top_p >= 1.0f && options_.min_p <= 0.0f) {
    // No filter: the draw over the whole vocabulary, in id order.
    const double sum = Exps(x, n, max_logit, inverse_temperature, probs_.data(), blocks_.data());
    return static_cast<int32_t>(DrawIndex(probs_.data(), n, blocks_.data(), NextUniform() * sum));
  }
  if (options_.top_k <= 0 && options_.top_p < 1.0f) {
    TopPFromLogits(x, n, max_logit);
  } else {
    FillCandidates(x, n, static_cast<size_t>(std::max(options_.top_k, 0)));
    ApplyTopK(options_.top_k);
    ApplyTopP(options_.top_p, max_logit);
  }
  ApplyMinP(options_.min_p, max_logit);
  // The draw over the survivors, in their order (by id, or by logit once a
  // filter sorted them).
  for (size_t i = 0; i < n_candidates_; ++i) work_[i] = candidates_[i].logit;
  const double sum = Exps(work_.data(), n_candidates_, max_logit, inverse_temperature,
                          probs_.data(), blocks_.data());
  const size_t i = DrawIndex(probs_.data(), n_candidates_, blocks_.data(), NextUniform() * sum);
  return candidates_[i].id;
}

}  // namespace colibri::sampling
