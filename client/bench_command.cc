#include "client/bench_command.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/bench_prompts.h"
#include "nlohmann/json.hpp"

namespace colibri::client {
namespace {

// Nearest-rank percentile of sorted samples.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Percentiles Summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Percentiles p;
  p.p50 = Percentile(samples, 50);
  p.p90 = Percentile(samples, 90);
  p.p99 = Percentile(samples, 99);
  return p;
}

nlohmann::ordered_json ToJson(const Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
}

}  // namespace

absl::StatusOr<BenchReport> RunBench(BenchTarget& target, const BenchOptions& options) {
  if (options.concurrency < 1) return absl::InvalidArgumentError("--concurrency must be >= 1");
  if (options.duration_seconds <= 0 && options.requests < 1) {
    return absl::InvalidArgumentError("--requests must be >= 1 (or give --duration)");
  }
  if (options.prompt_tokens < 1 || options.max_tokens < 1) {
    return absl::InvalidArgumentError("--prompt-tokens and --max-tokens must be >= 1");
  }
  const TokenizeFunction tokenize =
      [&target](const std::string& text, bool add_special) -> absl::StatusOr<std::vector<int32_t>> {
    v1::TokenizeRequest request;
    request.set_text(text);
    request.set_add_special(add_special);
    absl::StatusOr<v1::TokenizeReply> reply = target.Tokenize(request);
    if (!reply.ok()) return reply.status();
    return std::vector<int32_t>(reply->ids().begin(), reply->ids().end());
  };
  absl::StatusOr<std::vector<std::vector<int32_t>>> prompts =
      TokenizeBenchPrompts(options.prompts.empty() ? BuiltInBenchPrompts() : options.prompts,
                           options.prompt_tokens, tokenize);
  if (!prompts.ok()) return prompts.status();

  std::vector<v1::GenerateRequest> requests(prompts->size());
  for (size_t i = 0; i < prompts->size(); ++i) {
    v1::GenerateRequest& request = requests[i];
    request.mutable_tokens()->mutable_ids()->Add((*prompts)[i].begin(), (*prompts)[i].end());
    request.set_max_tokens(options.max_tokens);
    request.set_ignore_eos(true);
    request.mutable_sampling()->set_temperature(0);
  }

  absl::Mutex mu;
  BenchReport report;
  std::vector<double> first_token, inter_token;
  std::atomic<int64_t> next{0};
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(options.duration_seconds);
  const auto worker = [&] {
    for (;;) {
      const int64_t k = next.fetch_add(1);
      if (options.duration_seconds > 0) {
        if (absl::Now() >= end) return;
      } else if (k >= options.requests) {
        return;
      }
      const v1::GenerateRequest& request = requests[k % requests.size()];
      const absl::Time sent = absl::Now();
      absl::Time last = sent;
      std::vector<double> gaps;
      double ttft = -1;
      int64_t tokens = 0;
      absl::StatusOr<GenerateResult> result =
          target.Generate(request, [&](const v1::GenerateReply& reply) {
            if (reply.done()) return true;
            const absl::Time now = absl::Now();
            if (tokens == 0) {
              ttft = absl::ToDoubleSeconds(now - sent);
            } else {
              gaps.push_back(absl::ToDoubleSeconds(now - last));
            }
            last = now;
            ++tokens;
            return true;
          });
      absl::MutexLock lock(&mu);
      ++report.requests;
      report.output_tokens += tokens;
      if (result.ok()) {
        ++report.ok;
      } else {
        ++report.errors[absl::StatusCodeToString(result.status().code())];
      }
      if (ttft >= 0) first_token.push_back(ttft);
      inter_token.insert(inter_token.end(), gaps.begin(), gaps.end());
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < options.concurrency; ++i) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  report.output_tokens_per_second =
      report.seconds > 0 ? static_cast<double>(report.output_tokens) / report.seconds : 0;
  report.distinct_prompts =
      static_cast<int64_t>(std::set<std::vector<int32_t>>(prompts->begin(), prompts->end()).size());
  report.time_to_first_token = Summarize(std::move(first_token));
  report.inter_token_latency = Summarize(std::move(inter_token));
  return report;
}

absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& options) {
  ClientBenchTarget target(client);
  return RunBench(target, options);
}

void PrintBenchTable(const BenchOptions& options, const BenchReport& r, std::ostream& out) {
  out << absl::StrFormat("concurrency %d, prompt %d tokens (%lld distinct), output %d tokens\n",
                         options.concurrency, options.prompt_tokens,
                         static_cast<long long>(r.distinct_prompts), options.max_tokens);
  out << absl::StrFormat("%-28s %lld (ok %lld)\n", "requests", static_cast<long long>(r.requests),
                         static_cast<long long>(r.ok));
  for (const auto& [code, n] : r.errors) {
    out << absl::StrFormat("%-28s %lld\n", "errors " + code, static_cast<long long>(n));
  }
  out << absl::StrFormat("%-28s %.3f\n", "wall time (s)", r.seconds);
  out << absl::StrFormat("%-28s %lld\n", "output tokens", static_cast<long long>(r.output_tokens));
  out << absl::StrFormat("%-28s %.2f\n", "output tokens/s (total)", r.output_tokens_per_second);
  out << absl::StrFormat("%-28s %10s %10s %10s\n", "", "p50", "p90", "p99");
  for (const auto& [name, p] : {std::make_pair("time to first token (s)", r.time_to_first_token),
                                std::make_pair("inter-token latency (s)", r.inter_token_latency)}) {
    out << absl::StrFormat("%-28s %10.4f %10.4f %10.4f\n", name, p.p50, p.p90, p.p99);
  }
}

void PrintBenchJson(const BenchOptions& options, const BenchReport& r, std::ostream& out) {
  nlohmann::ordered_json errors = nlohmann::ordered_json::object();
  for (const auto& [code, n] : r.errors) errors[code] = n;
  const nlohmann::ordered_json j = {
      {"concurrency", options.concurrency},
      {"prompt_tokens", options.prompt_tokens},
      {"distinct_prompts", r.distinct_prompts},
      {"max_tokens", options.max_tokens},
      {"requests", r.requests},
      {"ok", r.ok},
      {"errors", errors},
      {"seconds", r.seconds},
      {"output_tokens", r.output_tokens},
      {"output_tokens_per_second", r.output_tokens_per_second},
      {"time_to_first_token_seconds", ToJson(r.time_to_first_token)},
      {"inter_token_latency_seconds", ToJson(r.inter_token_latency)},
  };
  out << j.dump(2) << "\n";
}

}  // namespace colibri::client
