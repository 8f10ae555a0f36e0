// colibri_kv_type_bench: what a KV cache type costs in quality and gives in
// speed, against the float cache.
//
//   colibri_kv_type_bench quality MODEL.gguf TEXT [max_windows] [exact|fast]
//     The text, tokenized by the model, in non-overlapping windows of the
//     model's context; every window evaluated (all positions' logits) with an
//     f32, an f16 and a q8_0 cache. Per type against f32: mean and largest
//     KL(P_f32 || P_type) in nats over every position, and the share of
//     positions whose most likely token is the same. On the exact numeric
//     path (float activations, the default) or the fast one (8-bit
//     activations, whose rounding amplifies any change upstream). On the fast
//     path a fourth evaluation, an f32 cache on the exact path, gives the
//     path's own noise floor: the same figures for fast f32 against exact f32.
//
//   colibri_kv_type_bench speed MODEL.gguf [depth] [tokens] [pairs] [threads]
//     One session per type (f16, q8_0) filled with `depth` (default 2048)
//     seeded random tokens; then `pairs` (default 5) interleaved pairs (the
//     order alternating) of `tokens` (default 32) decode steps from that
//     depth, the cache truncated back after each run. Prints each run's
//     tokens/s, the medians, the spread and the q8_0 / f16 ratio.
//
// Figures go to docs/benchmarks.md with the command; nothing here asserts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/thread_pool.h"
#include "model/arch/model.h"
#include "model/arch/session.h"
#include "model/moe/local_expert_backend.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::arch {
namespace {

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<moe::LocalExpertBackend> backend;
  ops::NumericPath path = ops::NumericPath::kFast;
  // On the fast path's quality run: the exact path's experts, for the floor.
  std::unique_ptr<moe::LocalExpertBackend> exact_backend;
};

absl::StatusOr<std::unique_ptr<Session>> NewSession(const Loaded& m, ThreadPool* pool, KvType type,
                                                    int n_ctx, bool exact_floor = false) {
  SessionOptions options;
  options.path = exact_floor ? ops::NumericPath::kExact : m.path;
  options.n_ctx = n_ctx;
  options.n_batch = std::min(n_ctx, 512);
  options.kv_type = type;
  return Session::Create(*m.model, exact_floor ? m.exact_backend.get() : m.backend.get(), pool,
                         options);
}

// log softmax of a row, in double.
void LogSoftmax(const float* logits, int n, std::vector<double>* out) {
  out->resize(n);
  const double max = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(logits[i] - max);
  const double log_sum = std::log(sum);
  for (int i = 0; i < n; ++i) (*out)[i] = logits[i] - max - log_sum;
}

int Quality(const Loaded& m, const std::string& text_path, int max_windows, ThreadPool* pool) {
  std::ifstream in(text_path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", text_path.c_str());
    return 1;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  auto tok = tokenizer::Tokenizer::FromGguf(m.model->file());
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  auto tokens = (*tok)->Encode(ss.str(), tokenizer::EncodeOptions{});
  if (!tokens.ok()) {
    std::fprintf(stderr, "%s\n", tokens.status().ToString().c_str());
    return 1;
  }
  const int ctx = m.model->config().n_ctx_train;
  const int n_vocab = m.model->config().n_vocab;
  int64_t windows = static_cast<int64_t>(tokens->size()) / ctx;
  if (max_windows > 0) windows = std::min<int64_t>(windows, max_windows);
  // f32 (the reference), f16, q8_0 on m.path; on the fast path also f32 on
  // the exact path (the floor).
  const KvType types[4] = {KvType::kF32, KvType::kF16, KvType::kQ8_0, KvType::kF32};
  const int n_runs = m.exact_backend != nullptr ? 4 : 3;
  std::unique_ptr<Session> sessions[4];
  for (int t = 0; t < n_runs; ++t) {
    auto s = NewSession(m, pool, types[t], ctx, /*exact_floor=*/t == 3);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      return 1;
    }
    sessions[t] = std::move(*s);
  }
  double kl_sum[4] = {}, kl_max[4] = {};
  int64_t same_top[4] = {}, positions = 0;
  std::vector<float> logits[4];
  std::vector<double> ref, other;
  for (int64_t w = 0; w < windows; ++w) {
    const absl::Span<const int32_t> window(tokens->data() + w * ctx, ctx);
    for (int t = 0; t < n_runs; ++t) {
      sessions[t]->Reset();
      absl::Status status = sessions[t]->Evaluate(window, /*all_logits=*/true, &logits[t]);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.ToString().c_str());
        return 1;
      }
    }
    for (int i = 0; i < ctx; ++i) {
      const float* r = logits[0].data() + static_cast<size_t>(i) * n_vocab;
      LogSoftmax(r, n_vocab, &ref);
      const int top = static_cast<int>(std::max_element(r, r + n_vocab) - r);
      for (int t = 1; t < n_runs; ++t) {
        const float* o = logits[t].data() + static_cast<size_t>(i) * n_vocab;
        LogSoftmax(o, n_vocab, &other);
        double kl = 0;
        for (int v = 0; v < n_vocab; ++v) kl += std::exp(ref[v]) * (ref[v] - other[v]);
        kl_sum[t] += kl;
        kl_max[t] = std::max(kl_max[t], kl);
        same_top[t] += static_cast<int>(std::max_element(o, o + n_vocab) - o) == top;
      }
      ++positions;
    }
  }
  std::printf("text: %s, %zu tokens, %lld windows of %d, %lld positions, %s path\n",
              text_path.c_str(), tokens->size(), static_cast<long long>(windows), ctx,
              static_cast<long long>(positions),
              m.path == ops::NumericPath::kExact ? "exact" : "fast");
  for (int t = 1; t < 3; ++t) {
    std::printf("%-5s mean KL(f32 || %s) %.3g nats (max %.3g), top-1 agreement %.2f%%%s\n",
                KvTypeName(types[t]), KvTypeName(types[t]), kl_sum[t] / positions, kl_max[t],
                100.0 * same_top[t] / positions,
                types[t] == KvType::kQ8_0 ? "  [targets: KL <= 0.001, top-1 >= 99.5%]" : "");
  }
  if (n_runs == 4) {
    // KL(P_fast || P_exact): the fast path's f32 run is the reference above.
    std::printf("floor: f32 KV, fast path against exact path: mean KL %.3g nats (max %.3g), "
                "top-1 agreement %.2f%%\n",
                kl_sum[3] / positions, kl_max[3], 100.0 * same_top[3] / positions);
  }
  return 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int Speed(const Loaded& m, int depth, int tokens, int pairs, ThreadPool* pool) {
  const KvType types[2] = {KvType::kF16, KvType::kQ8_0};
  std::unique_ptr<Session> sessions[2];
  std::mt19937 rng(47);
  std::uniform_int_distribution<int32_t> pick(0, m.model->config().n_vocab - 1);
  std::vector<int32_t> prompt(depth), decode(tokens);
  for (int32_t& t : prompt) t = pick(rng);
  for (int32_t& t : decode) t = pick(rng);
  std::vector<float> logits;
  for (int t = 0; t < 2; ++t) {
    auto s = NewSession(m, pool, types[t], depth + tokens);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      return 1;
    }
    sessions[t] = std::move(*s);
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = sessions[t]->Evaluate(prompt, false, &logits);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    std::printf("%-5s prompt of %d tokens: %.1f s\n", KvTypeName(types[t]), depth,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::vector<double> rate[2];
  for (int p = 0; p < pairs; ++p) {
    for (int k = 0; k < 2; ++k) {
      const int t = (p + k) % 2;  // f16 first in even pairs, q8_0 first in odd ones
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < tokens; ++i) {
        absl::Status status = sessions[t]->Evaluate({&decode[i], 1}, false, &logits);
        if (!status.ok()) {
          std::fprintf(stderr, "%s\n", status.ToString().c_str());
          return 1;
        }
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      sessions[t]->Truncate(depth);
      rate[t].push_back(tokens / s);
      std::printf("pair %d %-5s %.2f tok/s\n", p, KvTypeName(types[t]), tokens / s);
    }
  }
  std::vector<double> ratio;
  for (int p = 0; p < pairs; ++p) ratio.push_back(rate[1][p] / rate[0][p]);
  for (int t = 0; t < 2; ++t) {
    std::printf("%-5s decode at depth %d: median %.2f tok/s (%.2f-%.2f)\n", KvTypeName(types[t]),
                depth, Median(rate[t]), *std::min_element(rate[t].begin(), rate[t].end()),
                *std::max_element(rate[t].begin(), rate[t].end()));
  }
  std::printf("q8_0 / f16 per pair: median %.3f (%.3f-%.3f)  [target: >= 1, no slower]\n",
              Median(ratio), *std::min_element(ratio.begin(), ratio.end()),
              *std::max_element(ratio.begin(), ratio.end()));
  return 0;
}

int Main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s quality MODEL.gguf TEXT [max_windows] [exact|fast]\n"
                 "       %s speed MODEL.gguf [depth] [tokens] [pairs] [threads]\n",
                 argv[0], argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  auto arg = [&](int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; };
  const int threads = mode == "speed" ? arg(6, 2) : 2;
  ThreadPool pool(threads);
  Loaded m;
  auto model = Model::Open(argv[2]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  m.model = std::move(*model);
  if (mode == "quality") {
    m.path = argc > 5 && std::string(argv[5]) == "fast" ? ops::NumericPath::kFast
                                                        : ops::NumericPath::kExact;
  }
  m.backend = std::make_unique<moe::LocalExpertBackend>(&m.model->experts(),
                                                        m.model->config().n_expert, m.path, &pool);
  if (mode == "quality" && m.path == ops::NumericPath::kFast) {
    m.exact_backend = std::make_unique<moe::LocalExpertBackend>(
        &m.model->experts(), m.model->config().n_expert, ops::NumericPath::kExact, &pool);
  }
  if (mode == "quality" && argc >= 4) return Quality(m, argv[3], arg(4, 0), &pool);
  if (mode == "speed") return Speed(m, arg(3, 2048), arg(4, 32), arg(5, 5), &pool);
  std::fprintf(stderr, "unknown mode or missing TEXT: %s\n", mode.c_str());
  return 2;
}

}  // namespace
}  // namespace colibri::arch

int main(int argc, char** argv) { return colibri::arch::Main(argc, argv); }
