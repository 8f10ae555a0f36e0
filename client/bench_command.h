// `colibri-client bench`: a load generator. `concurrency` threads each send
// Generate requests one after another, for `duration_seconds` or until
// `requests` have been sent, with `max_tokens` output tokens (EOS ignored,
// greedy), and measures time to first token and inter-token latency on the
// client side. Request k (numbered as they start) carries prompt k modulo the
// number of prompts (client/bench_prompts.h: built-in texts or a file, each
// tokenized by the server and made `prompt_tokens` long), so concurrent
// requests carry different prompts.
//
// Thread-safety: RunBench is a function of its arguments; it runs its own
// threads over `target` (which must be thread-safe, as Client is).
#ifndef COLIBRI_CLIENT_BENCH_COMMAND_H_
#define COLIBRI_CLIENT_BENCH_COMMAND_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

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
  // Prompt length in tokens: each prompt text is cut or repeated to it.
  // Default: 32.
  int prompt_tokens = 32;
  // Prompt texts, used in rotation. Default: empty (BuiltInBenchPrompts()).
  std::vector<std::string> prompts;
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
  // Different token lists among the prompts in rotation (equal texts, or
  // texts equal in their first prompt_tokens tokens, count once).
  int64_t distinct_prompts = 0;
  Percentiles time_to_first_token;
  Percentiles inter_token_latency;
};

// What RunBench talks to: a Client (ClientBenchTarget) or a test's fake.
// Implementations must be thread-safe.
class BenchTarget {
 public:
  virtual ~BenchTarget() = default;
  virtual absl::StatusOr<v1::TokenizeReply> Tokenize(const v1::TokenizeRequest& request) = 0;
  virtual absl::StatusOr<GenerateResult> Generate(const v1::GenerateRequest& request,
                                                  const ReplyCallback& on_reply) = 0;
};

// A BenchTarget over a borrowed Client, which must outlive it.
class ClientBenchTarget : public BenchTarget {
 public:
  explicit ClientBenchTarget(Client& client) : client_(client) {}
  absl::StatusOr<v1::TokenizeReply> Tokenize(const v1::TokenizeRequest& request) override {
    return client_.Tokenize(request);
  }
  absl::StatusOr<GenerateResult> Generate(const v1::GenerateRequest& request,
                                          const ReplyCallback& on_reply) override {
    return client_.Generate(request, on_reply);
  }

 private:
  Client& client_;
};

// Runs the benchmark. InvalidArgument for bad options; the Tokenize errors
// of the prompts (they are tokenized first, one call or two per prompt).
// Failed requests are counted, not returned.
absl::StatusOr<BenchReport> RunBench(BenchTarget& target, const BenchOptions& options);
absl::StatusOr<BenchReport> RunBench(Client& client, const BenchOptions& options);

// The report as a table, or as one JSON object (keys as BenchReport's fields,
// the percentiles as {"p50","p90","p99"} objects in seconds, plus the options).
void PrintBenchTable(const BenchOptions& options, const BenchReport& report, std::ostream& out);
void PrintBenchJson(const BenchOptions& options, const BenchReport& report, std::ostream& out);

}  // namespace colibri::client

#endif  // COLIBRI_CLIENT_BENCH_COMMAND_H_
