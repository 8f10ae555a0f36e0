#include "model/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri::sampling {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

std::unique_ptr<Sampler> MakeSampler(const SamplingOptions& options, int32_t n_vocab) {
  absl::StatusOr<std::unique_ptr<Sampler>> sampler = Sampler::Create(options, n_vocab);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return sampler.ok() ? std::move(sampler).value() : nullptr;
}

SamplingOptions Greedy() {
  SamplingOptions options;
  options.temperature = 0.0f;
  return options;
}

// Portable normal-ish logits: a sum of uniforms from mt19937_64's raw bits.
std::vector<float> RandomLogits(int n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::vector<float> logits(static_cast<size_t>(n));
  for (float& x : logits) {
    double sum = 0;
    for (int i = 0; i < 4; ++i) sum += static_cast<double>(rng() >> 11) * 0x1.0p-53 - 0.5;
    x = static_cast<float>(sum * scale);
  }
  return logits;
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Tokens drawn by `draws` samplers with seeds 1..draws, `per_seed` draws each.
std::set<int32_t> TokensSeen(SamplingOptions options, const std::vector<float>& logits, int seeds,
                             int per_seed) {
  std::set<int32_t> seen;
  for (int seed = 1; seed <= seeds; ++seed) {
    options.seed = static_cast<uint64_t>(seed);
    std::unique_ptr<Sampler> sampler = MakeSampler(options, static_cast<int32_t>(logits.size()));
    for (int i = 0; i < per_seed; ++i) seen.insert(sampler->Sample(logits));
  }
  return seen;
}

std::vector<float> LogProbs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

TEST(SamplerTest, GreedyPicksArgmax) {
  std::unique_ptr<Sampler> sampler = MakeSampler(Greedy(), 4);
  EXPECT_EQ(sampler->Sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.5f}), 1);
  EXPECT_EQ(sampler->Sample(std::vector<float>{-3.0f, -2.0f, -1.0f, -1.5f}), 2);
}

TEST(SamplerTest, GreedyTiesPickLowestIndex) {
  std::unique_ptr<Sampler> sampler = MakeSampler(Greedy(), 5);
  EXPECT_EQ(sampler->Sample(std::vector<float>{1.0f, 3.0f, 0.0f, 3.0f, 3.0f}), 1);
  EXPECT_EQ(sampler->Sample(std::vector<float>(5, -kInf)), 0);
  EXPECT_EQ(sampler->Sample(std::vector<float>{NAN, 0.0f, NAN, 0.5f, 0.5f}), 3);
  EXPECT_EQ(sampler->Sample(std::vector<float>(5, NAN)), 0);
  EXPECT_EQ(sampler->Sample(std::vector<float>{NAN, -kInf, kInf, 1.0f, kInf}), 2);
  EXPECT_EQ(sampler->Sample(std::vector<float>{-kInf, NAN, -kInf, -1e30f, NAN}), 3);
}

TEST(SamplerTest, GreedyIgnoresSeedAndFilters) {
  const std::vector<float> logits = RandomLogits(1000, 7, 4.0f);
  for (uint64_t seed : {1u, 2u, 3u}) {
    SamplingOptions options = Greedy();
    options.seed = seed;
    options.top_k = 5;
    options.top_p = 0.5f;
    options.min_p = 0.3f;
    EXPECT_EQ(MakeSampler(options, 1000)->Sample(logits), Argmax(logits));
  }
}

TEST(SamplerTest, InfiniteLogitIsChosen) {
  SamplingOptions options;
  options.temperature = 1.0f;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, 4);
  EXPECT_EQ(sampler->Sample(std::vector<float>{0.0f, kInf, 1.0f, kInf}), 1);
}

TEST(SamplerTest, TemperatureTooSmallToInvertIsGreedy) {
  // 1 / 1e-39 overflows a float: the limit of ever colder sampling, the
  // argmax (not a draw over probabilities that all came out 0 or NaN).
  SamplingOptions options;
  options.temperature = 1e-39f;
  const std::vector<float> logits = RandomLogits(300, 5, 4.0f);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    options.seed = seed;
    EXPECT_EQ(MakeSampler(options, 300)->Sample(logits), Argmax(logits)) << "seed " << seed;
  }
}

TEST(SamplerTest, TopK1EqualsGreedy) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const std::vector<float> logits = RandomLogits(500, seed + 100, 3.0f);
    SamplingOptions options;
    options.temperature = 1.5f;
    options.top_k = 1;
    options.seed = seed;
    EXPECT_EQ(MakeSampler(options, 500)->Sample(logits), Argmax(logits)) << "seed " << seed;
  }
}

TEST(SamplerTest, TopKKeepsTheKLargest) {
  // Equal logits everywhere but a clear top 3: the survivors are exactly those.
  std::vector<float> logits(20, 0.0f);
  logits[4] = 1.0f;
  logits[11] = 1.1f;
  logits[17] = 0.9f;
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_k = 3;
  EXPECT_EQ(TokensSeen(options, logits, 100, 20), (std::set<int32_t>{4, 11, 17}));
  // On ties the lower ids win.
  options.top_k = 5;
  EXPECT_EQ(TokensSeen(options, logits, 100, 20), (std::set<int32_t>{0, 1, 4, 11, 17}));
}

TEST(SamplerTest, TopKKeepsExactlyTheKFirstThroughTies) {
  // 3000 tokens: 60 tied at 0 spread over the ids, the rest at -2 (buckets
  // below), a NaN and a -inf. Top-k 50 keeps the 50 lowest ids of the tied
  // ones, top-k 61 all of them and the lowest id at -2 (drawn about 45 times
  // in the 20,000 draws).
  constexpr int kVocab = 3000;
  std::vector<float> logits(kVocab, -2.0f);
  std::vector<int32_t> tied;
  for (int i = 0; i < 60; ++i) tied.push_back((i * 47 + 11) % kVocab);
  for (int32_t id : tied) logits[static_cast<size_t>(id)] = 0.0f;
  logits[0] = NAN;
  logits[1] = -kInf;
  std::sort(tied.begin(), tied.end());
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_k = 50;
  EXPECT_EQ(TokensSeen(options, logits, 100, 60),
            std::set<int32_t>(tied.begin(), tied.begin() + 50));
  options.top_k = 61;
  std::set<int32_t> all(tied.begin(), tied.end());
  all.insert(2);  // the lowest id at -2 (0 is NaN, 1 is -inf)
  EXPECT_EQ(TokensSeen(options, logits, 200, 100), all);
}

TEST(SamplerTest, TopKIsExactWhenEvery64thTokenIsTheLikeliest) {
  // Top-k picks its candidates by a threshold from every 64th logit; here
  // those 100 tokens are the likeliest of 6400, so no sampled threshold
  // lets 150 through and all tokens must be considered: top-k 150 keeps the
  // 100 and the 50 likeliest of the rest.
  constexpr int kVocab = 6400;
  std::vector<float> logits(kVocab);
  std::vector<int32_t> rest;
  for (int i = 0; i < kVocab; ++i) {
    if (i % 64 == 0) {
      logits[static_cast<size_t>(i)] = 1.0f;
    } else {
      logits[static_cast<size_t>(i)] = 0.9f * static_cast<float>((i * 7919) % kVocab) / kVocab;
      rest.push_back(i);
    }
  }
  std::sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  std::set<int32_t> expected(rest.begin(), rest.begin() + 50);
  for (int i = 0; i < kVocab; i += 64) expected.insert(i);
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_k = 150;
  EXPECT_EQ(TokensSeen(options, logits, 100, 100), expected);
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingP) {
  const std::vector<float> logits = LogProbs({0.05, 0.5, 0.15, 0.3});
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_p = 0.7f;  // 0.5 < 0.7 <= 0.5 + 0.3
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{1, 3}));
  options.top_p = 0.9f;  // needs 0.15 too
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{1, 2, 3}));
  options.top_p = 0.4f;
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{1}));
  options.top_p = 1.0f;
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(SamplerTest, TopPNucleusLargerThanFirstSortedChunk) {
  // 1000 equal logits: top-p 0.5 keeps exactly the 500 lowest ids.
  const std::vector<float> logits(1000, 0.25f);
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_p = 0.5f;
  const std::set<int32_t> seen = TokensSeen(options, logits, 60, 50);
  EXPECT_EQ(*seen.rbegin(), 499);
  EXPECT_GT(seen.size(), 490u);
}

TEST(SamplerTest, TopPNucleusBeyondTheFirstSortedChunkIsExact) {
  // 400 likely tokens with distinct logits in (0, 0.04] (so in the same and
  // in neighbouring top-p buckets) spread over 6000 ids among 5600 unlikely
  // ones at -3 and a NaN and a -inf: top-p 0.55 must keep exactly the most
  // likely ones up to 55% of the mass (about 400 + 5600 e^-3 = 679), some
  // 370 of the 400.
  constexpr int kVocab = 6000;
  std::vector<float> logits(kVocab, -3.0f);
  std::vector<int32_t> likely;
  for (int i = 0; i < 400; ++i) likely.push_back((i * 7919) % kVocab);
  for (size_t i = 0; i < likely.size(); ++i) {
    logits[static_cast<size_t>(likely[i])] = 0.0001f * static_cast<float>(1 + (i * 37) % 400);
  }
  logits[1] = NAN;
  logits[2] = -kInf;
  // The expected nucleus, from the same probabilities and sequential sum.
  std::vector<int32_t> order(kVocab);
  for (int i = 0; i < kVocab; ++i) order[static_cast<size_t>(i)] = i;
  const auto logit_or_low = [&](int32_t id) {
    const float x = logits[static_cast<size_t>(id)];
    return std::isnan(x) ? -kInf : x;
  };
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logit_or_low(a) > logit_or_low(b) || (logit_or_low(a) == logit_or_low(b) && a < b);
  });
  const float max_logit = logit_or_low(order[0]);
  double sum = 0;
  for (int32_t id : order) sum += internal::ExpNonPositive(logit_or_low(id) - max_logit);
  std::set<int32_t> expected;
  double cumulative = 0;
  for (int32_t id : order) {
    expected.insert(id);
    cumulative += internal::ExpNonPositive(logit_or_low(id) - max_logit);
    if (cumulative >= static_cast<double>(0.55f) * sum) break;
  }
  ASSERT_GT(expected.size(), 300u);  // past the first 256 sorted
  ASSERT_LT(expected.size(), 400u);  // and not all the likely ones
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_p = 0.55f;
  EXPECT_EQ(TokensSeen(options, logits, 100, 100), expected) << expected.size() << " expected";
}

TEST(SamplerTest, TopPNucleusBeyondTheFirstCandidatesTakesEveryToken) {
  // 600 tokens at 0 and 1000 at -0.2, interleaved by id. Without top-k,
  // top-p first looks at the likeliest few hundred (here the 600 at 0: ties
  // are kept together); 0.8 of the mass needs 654 of the tokens at -0.2 as
  // well (the lowest ids first), which only the whole vocabulary has.
  constexpr int kVocab = 1600;
  std::vector<float> logits(kVocab, -0.2f);
  for (int i = 0; i < 600; ++i) logits[static_cast<size_t>((i * 8) / 3)] = 0.0f;
  std::vector<int32_t> order(kVocab);
  for (int i = 0; i < kVocab; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  double sum = 0;
  for (int32_t id : order) sum += internal::ExpNonPositive(logits[static_cast<size_t>(id)]);
  size_t kept = 0;
  double cumulative = 0;
  while (cumulative < static_cast<double>(0.8f) * sum) {
    cumulative += internal::ExpNonPositive(logits[static_cast<size_t>(order[kept++])]);
  }
  ASSERT_EQ(kept, 600u + 654u);
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_p = 0.8f;
  // 10,000 draws: each kept token about 8 times, so the last one kept is
  // seen; the first one left out never is, nor anything after it.
  const std::set<int32_t> seen = TokensSeen(options, logits, 100, 100);
  EXPECT_TRUE(seen.count(order[kept - 1])) << "the last token of the nucleus, " << order[kept - 1];
  for (size_t i = kept; i < order.size(); ++i) {
    ASSERT_FALSE(seen.count(order[i])) << "token " << order[i] << " is outside the nucleus";
  }
}

TEST(SamplerTest, TopPUsesUntemperedProbabilities) {
  // Temperature comes after top-p, so a high temperature widens the draw over the
  // survivors but does not let excluded tokens back in.
  const std::vector<float> logits = LogProbs({0.5, 0.3, 0.15, 0.05});
  SamplingOptions options;
  options.temperature = 5.0f;
  options.top_p = 0.7f;
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{0, 1}));
}

TEST(SamplerTest, TopPRenormalisesAfterTopK) {
  // After top-2 the probabilities are 0.625 / 0.375, so top-p 0.6 keeps only one.
  const std::vector<float> logits = LogProbs({0.5, 0.3, 0.15, 0.05});
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_p = 0.6f;
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{0, 1}));
  options.top_k = 2;
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{0}));
}

TEST(SamplerTest, MinPKeepsTokensAboveFractionOfMax) {
  const std::vector<float> logits = LogProbs({0.15, 0.05, 0.5, 0.3});
  SamplingOptions options;
  options.temperature = 1.0f;
  options.min_p = 0.25f;  // threshold 0.125
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{0, 2, 3}));
  options.min_p = 0.7f;  // threshold 0.35
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{2}));
  options.top_k = 3;  // same result on the sorted path
  options.min_p = 0.25f;
  EXPECT_EQ(TokensSeen(options, logits, 200, 20), (std::set<int32_t>{0, 2, 3}));
}

// A plain reference for the candidate set of the whole chain (no penalties).
std::set<int32_t> ReferenceCandidates(const std::vector<float>& logits, int top_k, double top_p,
                                      double min_p) {
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (top_k > 0 && static_cast<size_t>(top_k) < order.size()) order.resize(top_k);
  double sum = 0;
  for (int32_t id : order) sum += std::exp(static_cast<double>(logits[id] - logits[order[0]]));
  double cumulative = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    cumulative += std::exp(static_cast<double>(logits[order[i]] - logits[order[0]])) / sum;
    if (cumulative >= top_p) {
      order.resize(i + 1);
      break;
    }
  }
  std::set<int32_t> kept;
  for (int32_t id : order) {
    if (std::exp(static_cast<double>(logits[id] - logits[order[0]])) >= min_p * 0.999999) {
      kept.insert(id);
    }
  }
  return kept;
}

TEST(SamplerTest, FullChainStaysInReferenceSet) {
  const std::vector<float> logits = RandomLogits(5000, 42, 6.0f);
  struct Case {
    int top_k;
    float top_p;
    float min_p;
  };
  for (const Case& c : {Case{40, 0.9f, 0.05f}, Case{0, 0.8f, 0.0f}, Case{0, 1.0f, 0.1f},
                        Case{100, 1.0f, 0.0f}, Case{0, 0.95f, 0.02f}}) {
    const std::set<int32_t> allowed = ReferenceCandidates(logits, c.top_k, c.top_p, c.min_p);
    SamplingOptions options;
    options.temperature = 1.0f;
    options.top_k = c.top_k;
    options.top_p = c.top_p;
    options.min_p = c.min_p;
    const std::set<int32_t> seen = TokensSeen(options, logits, 25, 20);
    for (int32_t token : seen) {
      EXPECT_TRUE(allowed.count(token)) << "token " << token << " top_k " << c.top_k;
    }
    EXPECT_GT(seen.size(), 1u);
  }
}

// Pearson's chi-square of `counts` against `probs`.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * n;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

// Chi-square of `draws` samples at `temperature` (seed `seed`) against the
// exact softmax of `logits`.
double ChiSquareOfDraws(const std::vector<float>& logits, float temperature, uint64_t seed,
                        int draws) {
  std::vector<double> probs;
  double sum = 0;
  for (float logit : logits) {
    probs.push_back(std::exp(static_cast<double>(logit) / temperature));
    sum += probs.back();
  }
  for (double& p : probs) p /= sum;
  SamplingOptions options;
  options.temperature = temperature;
  options.seed = seed;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, static_cast<int32_t>(logits.size()));
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(sampler->Sample(logits))];
  return ChiSquare(counts, probs, draws);
}

TEST(SamplerTest, TemperatureMatchesSoftmaxDistribution) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f};
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    // 5 degrees of freedom: P(chi2 > 20.5) = 0.001.
    EXPECT_LT(ChiSquareOfDraws(logits, temperature, 12345, 100000), 20.5)
        << "temperature " << temperature;
  }
}

TEST(SamplerTest, ExpNonPositiveIsWithinAnUlpOfExp) {
  // Every 2^-16 from 0 down to -86: within one unit in the last place of
  // the exact exp rounded to float.
  double worst = 0;
  float worst_at = 0;
  for (int i = 0; i <= 86 * 65536; ++i) {
    const float x = -static_cast<float>(i) / 65536.0f;
    const float exact = static_cast<float>(std::exp(static_cast<double>(x)));
    const double ulp = std::nextafter(exact, kInf) - exact;
    const double error = std::fabs(internal::ExpNonPositive(x) - static_cast<double>(exact)) / ulp;
    if (error > worst) {
      worst = error;
      worst_at = x;
    }
  }
  EXPECT_LE(worst, 1.0) << "at " << worst_at;
  EXPECT_EQ(internal::ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(internal::ExpNonPositive(-0.0f), 1.0f);
  EXPECT_GT(internal::ExpNonPositive(-86.0f), 0.0f);
  EXPECT_EQ(internal::ExpNonPositive(-86.01f), 0.0f);
  EXPECT_EQ(internal::ExpNonPositive(-1000.0f), 0.0f);
  EXPECT_EQ(internal::ExpNonPositive(-kInf), 0.0f);
  EXPECT_EQ(internal::ExpNonPositive(NAN), 0.0f);
}

TEST(SamplerTest, SumExpBelowMatchesTheDefinition) {
  // Every length up to 70 (whole groups of 16 and tails) and a vocabulary's,
  // with NaN and -inf counting 0: within 1e-6 of the sum in double of exp.
  std::mt19937_64 rng(11);
  for (int n : {1, 2, 3, 15, 16, 17, 31, 33, 64, 70, 151936}) {
    std::vector<float> x = RandomLogits(n, static_cast<uint64_t>(n), 8.0f);
    for (float& v : x) {
      const uint64_t r = rng() % 10;
      if (r == 0) v = NAN;
      if (r == 1) v = -kInf;
    }
    float max = -kInf;
    for (float v : x) max = v > max ? v : max;
    if (!std::isfinite(max)) max = 0.0f;
    double want = 0;
    for (float v : x) {
      if (std::isfinite(v)) want += std::exp(static_cast<double>(v) - max);
    }
    EXPECT_NEAR(SumExpBelow(x, max), want, 1e-6 * want) << "n " << n;
  }
}

// The first maximum with NaN as -inf (0 when nothing beats -inf): the
// definition FirstMax's vector scan must agree with.
int32_t ReferenceFirstMax(const std::vector<float>& logits) {
  int32_t best = 0;
  float best_logit = -kInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > best_logit) {
      best = static_cast<int32_t>(i);
      best_logit = logits[i];
    }
  }
  return best;
}

TEST(SamplerTest, GreedyFindsTheFirstMaximumInBlocksAndTail) {
  // 200 tokens: three blocks of 64 and a tail of 8.
  constexpr int kVocab = 200;
  std::unique_ptr<Sampler> sampler = MakeSampler(Greedy(), kVocab);
  for (int at : {0, 3, 63, 64, 127, 128, 191, 192, 199}) {
    std::vector<float> logits = RandomLogits(kVocab, static_cast<uint64_t>(at), 4.0f);
    logits[static_cast<size_t>(at)] = 100.0f;
    EXPECT_EQ(sampler->Sample(logits), at);
    logits[static_cast<size_t>(at)] = NAN;  // NaN is never the maximum
    EXPECT_NE(sampler->Sample(logits), at);
  }
  std::vector<float> logits(kVocab, -kInf);
  logits[70] = logits[150] = logits[196] = 1.0f;  // ties: the first
  EXPECT_EQ(sampler->Sample(logits), 70);
  logits.assign(kVocab, NAN);
  logits[199] = -kInf;
  EXPECT_EQ(sampler->Sample(logits), 0);  // nothing beats -inf
  logits[193] = -1e30f;
  EXPECT_EQ(sampler->Sample(logits), 193);
  // Random vectors of every length up to 3 blocks, with NaN and infinities.
  std::mt19937_64 rng(7);
  for (int n = 1; n <= 3 * 64 + 5; ++n) {
    std::vector<float> x = RandomLogits(n, static_cast<uint64_t>(n), 3.0f);
    for (float& v : x) {
      const uint64_t r = rng() % 16;
      if (r == 0) v = NAN;
      if (r == 1) v = -kInf;
    }
    if (rng() % 4 == 0) x[rng() % x.size()] = kInf;
    EXPECT_EQ(MakeSampler(Greedy(), n)->Sample(x), ReferenceFirstMax(x)) << "n " << n;
  }
}

TEST(SamplerTest, DrawReachesEveryBlockPosition) {
  // 150 tokens: two blocks of 64 and a tail of 22. A single finite logit
  // holds all the probability wherever it is.
  constexpr int kVocab = 150;
  SamplingOptions options;
  options.temperature = 1.0f;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, kVocab);
  for (int at : {0, 1, 63, 64, 127, 128, 129, 148, 149}) {
    std::vector<float> logits(kVocab, -kInf);
    logits[static_cast<size_t>(at)] = 0.5f;
    for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler->Sample(logits), at);
  }
  // Two tokens in different blocks, 1 : 3, and NaN elsewhere.
  std::vector<float> logits(kVocab, NAN);
  logits[10] = 0.0f;
  logits[140] = std::log(3.0f);
  constexpr int kDraws = 20000;
  int late = 0;
  for (int i = 0; i < kDraws; ++i) {
    const int32_t token = sampler->Sample(logits);
    ASSERT_TRUE(token == 10 || token == 140) << token;
    late += token == 140;
  }
  // Binomial(20000, 0.75): sd 61; 5 sd either way.
  EXPECT_NEAR(late, 15000, 310);
}

TEST(SamplerTest, WholeVocabularyDrawMatchesSoftmax) {
  // 200 tokens over four blocks (the last one short): the draw's block sums
  // and in-block scan against the exact distribution. 199 degrees of
  // freedom: P(chi2 > 267) is about 0.001.
  EXPECT_LT(ChiSquareOfDraws(RandomLogits(200, 99, 2.0f), 0.8f, 2024, 200000), 267.0);
}

TEST(SamplerTest, PenaltiesChangeLogitsAsSpecified) {
  SamplingOptions options;
  options.repeat_penalty = 2.0f;
  options.presence_penalty = 0.5f;
  options.frequency_penalty = 0.25f;
  options.penalty_last_n = 3;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, 5);
  for (int32_t token : {1, 2, 2, 3}) sampler->Accept(token);  // window: 2 2 3

  std::vector<float> logits = {1.0f, 4.0f, -2.0f, 6.0f, 3.0f};
  sampler->ApplyPenalties(absl::MakeSpan(logits));
  EXPECT_THAT(logits, ElementsAre(1.0f,                          // never seen
                                  4.0f,                          // left the window
                                  -2.0f * 2 - 2 * 0.25f - 0.5f,  // negative: multiplied
                                  6.0f / 2 - 0.25f - 0.5f,       // positive: divided
                                  3.0f));
}

TEST(SamplerTest, PenaltyWindowOfWholeHistoryNeverForgets) {
  SamplingOptions options;
  options.frequency_penalty = 1.0f;
  options.penalty_last_n = -1;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, 3);
  for (int i = 0; i < 1000; ++i) sampler->Accept(i == 0 ? 0 : 1);
  std::vector<float> logits = {0.0f, 0.0f, 0.0f};
  sampler->ApplyPenalties(absl::MakeSpan(logits));
  EXPECT_THAT(logits, ElementsAre(-1.0f, -999.0f, 0.0f));
}

TEST(SamplerTest, PenaltiesSteerGreedy) {
  SamplingOptions options = Greedy();
  options.repeat_penalty = 1.5f;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, 2);
  EXPECT_EQ(sampler->Sample(std::vector<float>{2.0f, 1.9f}), 0);
  sampler->Accept(0);
  EXPECT_EQ(sampler->Sample(std::vector<float>{2.0f, 1.9f}), 1);    // 2 / 1.5 < 1.9
  EXPECT_EQ(sampler->Sample(std::vector<float>{-1.0f, -1.2f}), 1);  // -1 * 1.5 < -1.2
  sampler->Reset();
  EXPECT_EQ(sampler->Sample(std::vector<float>{2.0f, 1.9f}), 0);
}

TEST(SamplerTest, PenaltyLastNZeroDisablesPenalties) {
  SamplingOptions options = Greedy();
  options.repeat_penalty = 10.0f;
  options.presence_penalty = 5.0f;
  options.penalty_last_n = 0;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, 2);
  sampler->Accept(0);
  EXPECT_EQ(sampler->Sample(std::vector<float>{2.0f, 1.9f}), 0);
}

TEST(SamplerTest, OutOfRangeAcceptIsIgnored) {
  SamplingOptions options;
  options.presence_penalty = 1.0f;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, 2);
  sampler->Accept(-1);
  sampler->Accept(2);
  std::vector<float> logits = {0.5f, 0.5f};
  sampler->ApplyPenalties(absl::MakeSpan(logits));
  EXPECT_THAT(logits, ElementsAre(0.5f, 0.5f));
}

std::vector<int32_t> Generate(Sampler& sampler, int steps) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < steps; ++i) {
    const std::vector<float> logits = RandomLogits(sampler.n_vocab(), 1000 + i, 2.0f);
    tokens.push_back(sampler.Sample(logits));
    sampler.Accept(tokens.back());
  }
  return tokens;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  SamplingOptions options;
  options.temperature = 1.0f;
  options.top_k = 50;
  options.top_p = 0.95f;
  options.repeat_penalty = 1.1f;
  options.seed = 99;
  std::unique_ptr<Sampler> a = MakeSampler(options, 2000);
  std::unique_ptr<Sampler> b = MakeSampler(options, 2000);
  options.seed = 100;
  std::unique_ptr<Sampler> c = MakeSampler(options, 2000);

  const std::vector<int32_t> first = Generate(*a, 64);
  EXPECT_EQ(first, Generate(*b, 64));
  EXPECT_NE(first, Generate(*c, 64));
  a->Reset();
  EXPECT_EQ(first, Generate(*a, 64));
}

TEST(SamplerTest, FixedSeedGivesPinnedTokens) {
  // Pins the RNG and the draw: with 8 equal logits the token is the top 3 bits of
  // each mt19937_64 output (checked against an independent MT19937-64). These ids
  // must not change across platforms or standard libraries.
  SamplingOptions options;
  options.temperature = 1.0f;
  std::unique_ptr<Sampler> sampler = MakeSampler(options, 8);
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<int32_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back(sampler->Sample(logits));
  EXPECT_THAT(tokens, ElementsAre(7, 7, 6, 1, 7, 5, 5, 4, 4, 5, 0, 2));
}

TEST(SamplingOptionsTest, DefaultsValidate) { EXPECT_TRUE(SamplingOptions().Validate().ok()); }

TEST(SamplingOptionsTest, ValidateNamesTheBadField) {
  struct Case {
    const char* field;
    void (*mutate)(SamplingOptions&);
  };
  const Case cases[] = {
      {"temperature", [](SamplingOptions& o) { o.temperature = -0.1f; }},
      {"temperature", [](SamplingOptions& o) { o.temperature = NAN; }},
      {"top_k", [](SamplingOptions& o) { o.top_k = -1; }},
      {"top_p", [](SamplingOptions& o) { o.top_p = 0.0f; }},
      {"top_p", [](SamplingOptions& o) { o.top_p = 1.01f; }},
      {"min_p", [](SamplingOptions& o) { o.min_p = -0.01f; }},
      {"min_p", [](SamplingOptions& o) { o.min_p = 1.5f; }},
      {"repeat_penalty", [](SamplingOptions& o) { o.repeat_penalty = 0.0f; }},
      {"repeat_penalty", [](SamplingOptions& o) { o.repeat_penalty = kInf; }},
      {"presence_penalty", [](SamplingOptions& o) { o.presence_penalty = NAN; }},
      {"frequency_penalty", [](SamplingOptions& o) { o.frequency_penalty = -kInf; }},
      {"penalty_last_n", [](SamplingOptions& o) { o.penalty_last_n = -2; }},
      {"penalty_last_n",
       [](SamplingOptions& o) { o.penalty_last_n = SamplingOptions::kMaxPenaltyLastN + 1; }},
  };
  for (const Case& c : cases) {
    SamplingOptions options;
    c.mutate(options);
    const absl::Status status = options.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.field));
    EXPECT_EQ(Sampler::Create(options, 10).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(SamplingOptionsTest, CreateRejectsEmptyVocabulary) {
  EXPECT_EQ(Sampler::Create(SamplingOptions(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri::sampling
