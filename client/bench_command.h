// `colibri-client bench`: a load generator. `concurrency` threads each send
// Generate requests one after another, for `duration_seconds` or until
// `requests` have been sent, with a prompt of `prompt_tokens` token ids and
// `max_tokens` output tokens (EOS ignored, greedy), and measures time to
// first token and inter-token latency on the client side.
//
// Thread-safety: RunBench is a function of its arguments; it runs its own
// threads over `client` (which is thread-safe).
#ifndef COLIBRI_CLIENT_BENCH_COMMAND_H_
#define COLIBRI_CLIENT_BENCH_COMMAND_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"

namespace colibri::client {

struct BenchOptions {
  // Requests in flight at once. Default: 4.
  int concurrency = 4;
  // Run this long (> 0), starting no request after it. Default: 0 (use
  // `requests`).
  double duration_seconds = 0;
  // Requests in total when duration_seconds is 0. Default: 16.
  int requests = 16;
  // Prompt length in tokens (ids spread over the vocabulary). Default: 32.
  int prompt_tokens = 32;
  // Output tokens of every request. Default: 32.
  int max_tokens = 32;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;  // seconds; 0 without samples
};

struct BenchReport {
  int64_t requests = 0;  // sent = ok + the errors' counts
  int64_t ok = 0;
  std::map<std::string, int64_t> errors;  // by gRPC status code name
  int64_t output_tokens = 0;              // received, failed requests included
  double seconds = 0;                     // wall time of the whole run
  double output_tokens_per_second = 0;
  Percentiles time_to_first_token;
  Percentiles inter_token_latency;
};

// Runs the benchmark. InvalidArgument for bad options; the model's
// ModelInfo errors (it is read first, for the vocabulary size). Failed
// requests are counted, not returned.
absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& options);

// The report as a table, or as one JSON object (keys as BenchReport's fields,
// the percentiles as {"p50","p90","p99"} objects in seconds, plus the options).
void PrintBenchTable(const BenchOptions& options, const BenchReport& report, std::ostream& out);
void PrintBenchJson(const BenchOptions& options, const BenchReport& report, std::ostream& out);

}  // namespace colibri::client

#endif  // COLIBRI_CLIENT_BENCH_COMMAND_H_
