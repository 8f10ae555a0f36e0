// Token sampling: turns one position's logits into a token id.
//
// The chain is the one llama.cpp's common sampler applies with its default order
// (samplers it has and this one lacks — DRY, typical-p, XTC, mirostat — are
// simply absent):
//
//   penalties -> top-k -> top-p -> min-p -> temperature -> softmax -> seeded draw
//
// - penalties, over the last `penalty_last_n` accepted tokens, once per distinct
//   token t seen c times: logit /= repeat_penalty if logit > 0, else
//   logit *= repeat_penalty; then logit -= c * frequency_penalty + presence_penalty.
// - top-k keeps the k largest logits; top-p the smallest prefix of the candidates
//   sorted by descending probability (softmax of the current logits, temperature 1)
//   whose mass reaches top_p; min-p the candidates with p >= min_p * p_max. Each
//   keeps at least one candidate. Ties in logit are broken by lower token id.
// - temperature divides the surviving logits; the draw picks from their softmax.
//
// temperature == 0 is greedy decoding: the argmax of the penalised logits, the
// lowest id on ties; the filters cannot change it and the RNG is not used.
//
// The draw: p_i = exp((logit_i - max) * (1 / T)) for the candidates in their order
// (token ids, or by logit once a filter sorted them), summed in double by
// blocks of 64 (each block in a fixed order of partial sums, the blocks one
// after another); with u uniform in [0, 1), the token is the first whose
// running sum (the blocks before it, then its block's elements one by one)
// passes u * Σ p. Top-p's probabilities are computed the same way.
//
// Determinism: the RNG is std::mt19937_64 (whose output the standard fixes) and the
// uniform draw is computed here from its raw bits; exp is the file's own
// (internal::ExpNonPositive, not libm's) and every operation is plain IEEE
// arithmetic, so a seed gives the same tokens with every standard library and
// CPU.
//
// build/model/sampling/colibri_sampler_bench prints the time of a Sample per
// configuration.
//
// Thread-safety: none. A Sampler holds one sequence's penalty history and RNG;
// use one per sequence.
#ifndef COLIBRI_MODEL_SAMPLING_SAMPLER_H_
#define COLIBRI_MODEL_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace colibri::sampling {

namespace internal {
// exp(x) for x <= 0 as Sample computes its probabilities: the file's own
// polynomial, so that a seed draws the same tokens on every machine and C
// library (no libm call, no fused multiply-add); 0 below -86, for -inf and
// for NaN. Exposed for tests.
float ExpNonPositive(float x);
}  // namespace internal

// Σ_i exp(x_i - max) in double, each term the sampler's exp
// (internal::ExpNonPositive), summed in a fixed order: the softmax's
// denominator at temperature 1, for log-probabilities. NaN and -inf
// elements count 0; max must be finite and no element above it.
double SumExpBelow(absl::Span<const float> x, float max);

struct SamplingOptions {
  // "COLIBRI" in hex-speak (0 = O, 1 = L or I, 2 = R).
  static constexpr uint64_t kDefaultSeed = 0xC011B121ULL;
  // Longest penalty window accepted (the history buffer is allocated up front).
  static constexpr int32_t kMaxPenaltyLastN = 1 << 20;

  // Softmax temperature; 0 selects greedy decoding. Must be finite and >= 0.
  // Default: 0.8 (llama.cpp's default).
  float temperature = 0.8f;
  // Keep only the k most likely tokens; 0 = off. Must be >= 0.
  // Default: 0.
  int32_t top_k = 0;
  // Nucleus sampling: keep the most likely tokens whose probabilities sum to at
  // least top_p; 1 = off. Must be in (0, 1].
  // Default: 1.
  float top_p = 1.0f;
  // Drop tokens less likely than min_p times the most likely one; 0 = off.
  // Must be in [0, 1].
  // Default: 0.
  float min_p = 0.0f;
  // Divides positive logits and multiplies negative ones of recently seen tokens;
  // 1 = off. Must be finite and > 0.
  // Default: 1.
  float repeat_penalty = 1.0f;
  // Subtracted once from the logit of every recently seen token; 0 = off.
  // Must be finite (negative values encourage repetition).
  // Default: 0.
  float presence_penalty = 0.0f;
  // Subtracted from a recently seen token's logit once per occurrence; 0 = off.
  // Must be finite.
  // Default: 0.
  float frequency_penalty = 0.0f;
  // How many of the last accepted tokens the penalties look at: 0 disables the
  // penalties, -1 means the whole history. Must be in [-1, kMaxPenaltyLastN].
  // Default: 64.
  int32_t penalty_last_n = 64;
  // Seed of the sampling RNG. The same seed, logits and accepted tokens give the
  // same samples.
  // Default: kDefaultSeed.
  uint64_t seed = kDefaultSeed;

  // InvalidArgument naming the first field out of its documented range.
  absl::Status Validate() const;
};

class Sampler {
 public:
  // InvalidArgument if `options` does not validate or n_vocab <= 0. All buffers
  // are allocated here: Sample and Accept do not allocate.
  static absl::StatusOr<std::unique_ptr<Sampler>> Create(const SamplingOptions& options,
                                                         int32_t n_vocab);
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const SamplingOptions& options() const { return options_; }
  int32_t n_vocab() const { return n_vocab_; }

  // Picks a token from logits: [n_vocab] (anything else aborts: a caller bug).
  // NaN logits count as -inf. Does not record the token: call Accept for that.
  int32_t Sample(absl::Span<const float> logits);

  // Adds a token to the penalty history. Call it for each generated token and,
  // to penalise repeats of the prompt as llama.cpp does, for each prompt token.
  // Ids outside [0, n_vocab) are ignored.
  void Accept(int32_t token);

  // Forgets the history and restarts the RNG from the seed: the sampler then
  // behaves as if just created.
  void Reset();

  // The penalty stage alone, applied in place to logits: [n_vocab] (same
  // precondition as Sample). For tests and for callers reporting adjusted logits.
  void ApplyPenalties(absl::Span<float> logits) const;

 private:
  struct Candidate {
    float logit;
    int32_t id;
    float p;  // probability, valid after a softmax stage
  };

  Sampler(const SamplingOptions& options, int32_t n_vocab);

  bool penalties_enabled() const;
  // Penalised logit of `token` whose current logit is `logit`.
  float Penalised(int32_t token, float logit) const;
  // candidates_[0, n_candidates_) from x[0, n) (NaN as -inf), in id order:
  // every token (k 0 or >= n), or a subset that holds the k most likely.
  void FillCandidates(const float* x, size_t n, size_t k);
  // The filters, on candidates_[0, n_candidates_); max_logit is the largest
  // logit among them.
  void ApplyTopK(int32_t k);
  void ApplyTopP(float p, float max_logit);
  // Top-p without top-k: fills the candidates from x[0, n) and keeps the
  // nucleus, as FillCandidates(x, n, 0) and ApplyTopP would.
  void TopPFromLogits(const float* x, size_t n, float max_logit);
  // ApplyTopP's cut, the probabilities in candidates_[i].p: keeps the
  // smallest prefix of the candidates in ByLogit order whose running sum
  // reaches `target`, sorted.
  void CutNucleus(double target, float max_logit);
  void ApplyMinP(float p, float max_logit);
  // Descending logit, then ascending id: a total order, so every sort of the
  // candidates agrees on which survive.
  static bool ByLogit(const Candidate& a, const Candidate& b);
  // Uniform in [0, 1) from 53 bits of the RNG.
  double NextUniform();

  const SamplingOptions options_;
  const int32_t n_vocab_;

  // Per-call scratch, allocated at construction (Sample does not allocate).
  std::vector<Candidate> candidates_;
  std::vector<float> work_;     // penalised or gathered logits
  std::vector<float> probs_;    // their unnormalised probabilities
  std::vector<double> blocks_;  // sums of probs_ by block of 64
  std::vector<double> bucket_mass_;  // ApplyTopP's mass by logit bucket
  std::vector<float> sample_;        // FillCandidates' logits of every 64th token
  size_t n_candidates_ = 0;
  bool sorted_ = false;  // candidates_[0, n_candidates_) is in ByLogit order

  // Penalty history. counts_[t] is how often t occurs in the window; distinct_
  // lists the tokens with a non-zero count and position_[t] is t's index in it.
  // window_ is a ring of the last penalty_last_n tokens (empty when the window is
  // the whole history, which never evicts).
  std::vector<int32_t> counts_;    // [n_vocab]
  std::vector<int32_t> position_;  // [n_vocab]
  std::vector<int32_t> distinct_;  // capacity n_vocab
  std::vector<int32_t> window_;    // [penalty_last_n] or empty
  size_t window_head_ = 0;         // next slot to write
  size_t window_size_ = 0;         // tokens currently in the ring

  std::mt19937_64 rng_;
};

}  // namespace colibri::sampling

#endif  // COLIBRI_MODEL_SAMPLING_SAMPLER_H_
