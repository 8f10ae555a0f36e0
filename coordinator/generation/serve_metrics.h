// The Prometheus metrics of `serve` (GET /metrics on the HTTP port).
//
// Recorded as they happen: requests by API, endpoint and status (HTTP by
// HttpServer, gRPC by the interceptor MakeGrpcMetricsInterceptor returns),
// generations by outcome, prompt tokens (and those the prefix cache
// supplied) and generated tokens, time to first token
// (from submission, so queueing counts), inter-token latency and drafted
// tokens accepted or rejected by speculative decoding (the
// GenerationScheduler calls the On* hooks). Read at scrape time: queue depth,
// active generations, predictor recall and prefix cache occupancy (from
// the scheduler), per-node
// round trips, failures, failovers, bytes, hidden-state floor bytes and
// wait, health, fallback routes and hedged calls (from the cluster), and the
// wire's bytes and floor per generated token.
//
// Thread-safety: thread-safe; SetSources once, before serving.
#ifndef COLIBRI_COORDINATOR_GENERATION_SERVE_METRICS_H_
#define COLIBRI_COORDINATOR_GENERATION_SERVE_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/metrics.h"
#include "grpcpp/support/server_interceptor.h"

namespace colibri::coordinator {

class GenerationScheduler;
class ClusterExperts;

class ServeMetrics {
 public:
  ServeMetrics();
  ServeMetrics(const ServeMetrics&) = delete;
  ServeMetrics& operator=(const ServeMetrics&) = delete;

  // Where the scrape-time values come from; borrowed, and they must outlive
  // every Render. Either may be null (no cluster: experts are local).
  void SetSources(const GenerationScheduler* scheduler, ClusterExperts* cluster);

  // One finished request. `api` is "http" or "grpc"; `endpoint` a route or
  // method name (the callers keep its set bounded); `status` the HTTP status
  // or the gRPC code name.
  void RecordRequest(absl::string_view api, absl::string_view endpoint, absl::string_view status);

  // Generation hooks (GenerationScheduler): the first token came
  // `seconds` after submission; a later one `seconds` after the previous
  // one; a generation ended with `status` after its `prompt_tokens` were
  // evaluated (`cached_prompt_tokens` of them taken from the prefix cache)
  // and `generated_tokens` produced (cancelled ones included).
  void OnFirstToken(double seconds);
  void OnInterToken(double seconds);
  void OnGenerationEnd(const absl::Status& status, int prompt_tokens, int cached_prompt_tokens,
                       int generated_tokens);
  // A speculative verify step: of its drafted tokens, `accepted` were the
  // sampled ones and `rejected` were not (dropped from the cache).
  void OnDrafts(int accepted, int rejected);

  // Every metric in the text format (metrics::kTextContentType).
  std::string Render() const;

 private:
  metrics::Registry registry_;
  metrics::Family<metrics::Counter>* requests_;
  metrics::Family<metrics::Counter>* generations_;
  metrics::Counter* prompt_tokens_;
  metrics::Counter* prompt_tokens_cached_;
  metrics::Counter* generated_tokens_;
  metrics::Counter* drafts_accepted_;
  metrics::Counter* drafts_rejected_;
  metrics::Histogram* time_to_first_token_;
  metrics::Histogram* inter_token_;
};

// A gRPC server interceptor that records every call's method and status code
// in `metrics` (borrowed; it must outlive the server). Methods outside the
// colibri.v1 and grpc.health.v1 services count as "other".
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeGrpcMetricsInterceptor(
    ServeMetrics* metrics);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_SERVE_METRICS_H_
