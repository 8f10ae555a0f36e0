// colibri_sampler_bench: time of one Sampler::Sample over a vocabulary.
//
//   colibri_sampler_bench [--vocab=151936] [--seconds=1] [--reps=3]
//
// Two sets of logits, the same for every call: "flat", normal random numbers
// of spread 3 (the most likely token has about 3% of the probability and
// top-p 0.95 keeps tens of thousands: a random-weight model's, or a trained
// one's at its least certain), and "peaked", the same with 20 tokens 16
// higher (a trained model's usual step: a few tokens hold nearly all of it).
// The bench prints how many tokens top-p 0.95 keeps of each. Each
// configuration (greedy; temperature 0.8 with no filter, with top-k 40, with
// top-p 0.95, with repeat penalties over 64 tokens) is timed for `seconds`,
// best of `reps` runs, and printed as microseconds per sampled token next to
// that time's share of a token at 30 tokens/s, the decode rate of the models
// this project runs on a PC. Last, SumExpBelow over the flat logits: what
// each token's log-probabilities add when a client asks for them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "model/sampling/sampler.h"

namespace colibri::sampling {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  const char* name;
  SamplingOptions options;
};

std::vector<Config> Configs() {
  std::vector<Config> configs;
  SamplingOptions o;
  o.temperature = 0.0f;
  configs.push_back({"greedy", o});
  o.temperature = 0.8f;
  configs.push_back({"temperature 0.8", o});
  o.top_k = 40;
  configs.push_back({"temperature 0.8, top-k 40", o});
  o.top_k = 0;
  o.top_p = 0.95f;
  configs.push_back({"temperature 0.8, top-p 0.95", o});
  o.top_p = 1.0f;
  o.repeat_penalty = 1.1f;
  configs.push_back({"temperature 0.8, repeat penalty 1.1", o});
  return configs;
}

// Microseconds per call of `call`, the best of `reps` runs of about
// `seconds` each (calls in groups of 16 between clock reads).
template <typename Call>
double BestMicros(double seconds, int reps, const Call& call) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    int64_t calls = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    while (elapsed < seconds) {
      for (int i = 0; i < 16; ++i) call();
      calls += 16;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    }
    best = std::min(best, elapsed / static_cast<double>(calls) * 1e6);
  }
  return best;
}

// Microseconds per Sample, after 64 tokens accepted (for the penalties).
double TimeSample(const SamplingOptions& options, const std::vector<float>& logits, double seconds,
                  int reps) {
  std::unique_ptr<Sampler> sampler =
      Sampler::Create(options, static_cast<int32_t>(logits.size())).value();
  for (int32_t t = 0; t < 64; ++t) sampler->Accept(t * 997 % static_cast<int32_t>(logits.size()));
  int64_t checksum = 0;
  const double us = BestMicros(seconds, reps, [&] { checksum += sampler->Sample(logits); });
  if (checksum == -1) std::printf("(unreachable)\n");  // keeps the calls
  return us;
}

// Tokens in the smallest set of the most likely ones holding `p` of the
// softmax's mass (temperature 1).
size_t NucleusSize(std::vector<float> logits, double p) {
  std::sort(logits.begin(), logits.end(), [](float a, float b) { return a > b; });
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - logits[0]));
  double cumulative = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    cumulative += std::exp(static_cast<double>(logits[i] - logits[0]));
    if (cumulative >= p * sum) return i + 1;
  }
  return logits.size();
}

int Main(int argc, char** argv) {
  CLI::App app{"colibri_sampler_bench: microseconds per sampled token"};
  int vocab = 151936;
  double seconds = 1.0;
  int reps = 3;
  app.add_option("--vocab", vocab, "vocabulary size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--seconds", seconds, "time per run")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 60.0));
  app.add_option("--reps", reps, "runs per configuration (best)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> flat(static_cast<size_t>(vocab));
  for (float& x : flat) x = normal(rng);
  std::vector<float> peaked = flat;
  for (int i = 0; i < 20; ++i) peaked[rng() % peaked.size()] += 16.0f;

  std::printf(
      "vocabulary %d, best of %d runs of %.2f s; top-p 0.95 keeps %zu (flat) and %zu "
      "(peaked) tokens\n",
      vocab, reps, seconds, NucleusSize(flat, 0.95), NucleusSize(peaked, 0.95));
  for (const Config& c : Configs()) {
    for (const auto& [name, logits] : {std::pair{"flat", &flat}, std::pair{"peaked", &peaked}}) {
      const double us = TimeSample(c.options, *logits, seconds, reps);
      std::printf("%-36s %-7s %9.1f us per token (%.1f%% of a token at 30 tokens/s)\n", c.name,
                  name, us, us / (1e6 / 30.0) * 100.0);
    }
  }
  // What a token's log-probabilities add (the softmax's denominator).
  const float max = *std::max_element(flat.begin(), flat.end());
  double checksum = 0;
  const double best = BestMicros(seconds, reps, [&] { checksum += SumExpBelow(flat, max); });
  std::printf("%-44s %9.1f us per token (%.1f%% of a token at 30 tokens/s)%s\n",
              "SumExpBelow (log-probabilities), flat", best, best / (1e6 / 30.0) * 100.0,
              checksum < 0 ? " (a negative sum?)" : "");
  return 0;
}

}  // namespace
}  // namespace colibri::sampling

int main(int argc, char** argv) { return colibri::sampling::Main(argc, argv); }
