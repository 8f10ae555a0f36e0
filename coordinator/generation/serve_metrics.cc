#include "coordinator/generation/serve_metrics.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/cluster/cluster_experts.h"
#include "coordinator/generation/generation_scheduler.h"
#include "grpcpp/support/interceptor.h"

namespace colibri::coordinator {
namespace {

using metrics::Type;

// Time to first token: 10 ms to ~80 s. Between tokens: 1 ms to ~16 s.
const std::vector<double> kFirstTokenBuckets = metrics::ExponentialBuckets(0.01, 2, 14);
const std::vector<double> kInterTokenBuckets = metrics::ExponentialBuckets(0.001, 2, 15);

std::string CodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }

// The prefix cache's disk tier (--kv-cache-dir).
void CollectPrefixDisk(const PrefixDiskStore::Stats& s, metrics::TextWriter& w) {
  const auto sample = [&w](const char* name, const char* help, Type type, int64_t value) {
    w.Family(name, help, type);
    w.Sample(name, {}, {}, static_cast<double>(value));
  };
  sample("colibri_prefix_disk_bytes",
         "Bytes of this model's block files in --kv-cache-dir (--kv-cache-disk bounds them).",
         Type::kGauge, s.bytes);
  sample("colibri_prefix_disk_pending_bytes",
         "Bytes of KV rows queued for --kv-cache-dir or being written.", Type::kGauge,
         s.pending_bytes);
  sample("colibri_prefix_disk_written_blocks_total", "Blocks written to --kv-cache-dir.",
         Type::kCounter, s.written_blocks);
  sample("colibri_prefix_disk_loaded_blocks_total",
         "Blocks read from --kv-cache-dir into the prefix cache.", Type::kCounter,
         s.loaded_blocks);
  sample("colibri_prefix_disk_rejected_files_total",
         "Files of --kv-cache-dir not used: damaged (removed) or of another model, KV type or "
         "layout.",
         Type::kCounter, s.rejected_files);
  sample("colibri_prefix_disk_dropped_total",
         "Prefixes not written to --kv-cache-dir because its write queue was full.",
         Type::kCounter, s.dropped_prefixes);
}

// --pipeline-halves auto: per numeric path and octave of step sizes, the
// decision and the step times it was made from.
void CollectHalves(const std::vector<GenerationScheduler::HalvesDecision>& decisions,
                   metrics::TextWriter& w) {
  if (decisions.empty()) return;
  const std::vector<std::string> labels = {"path", "tokens"};
  const std::vector<std::string> mode_labels = {"path", "tokens", "mode"};
  const auto values = [](const GenerationScheduler::HalvesDecision& d) {
    return std::vector<std::string>{d.path == ops::NumericPath::kExact ? "exact" : "fast",
                                    absl::StrCat(d.octave.min_tokens, "-", d.octave.max_tokens)};
  };
  w.Family("colibri_pipeline_halves_split",
           "1 when steps of these sizes run as two pipelined halves (--pipeline-halves auto).",
           Type::kGauge);
  for (const auto& d : decisions) {
    w.Sample("colibri_pipeline_halves_split", labels, values(d), d.octave.split ? 1 : 0);
  }
  w.Family("colibri_pipeline_halves_step_seconds",
           "Moving average of the step time in each mode (0: not measured).", Type::kGauge);
  for (const auto& d : decisions) {
    std::vector<std::string> v = values(d);
    v.push_back("split");
    w.Sample("colibri_pipeline_halves_step_seconds", mode_labels, v, d.octave.split_seconds);
    v.back() = "unsplit";
    w.Sample("colibri_pipeline_halves_step_seconds", mode_labels, v, d.octave.unsplit_seconds);
  }
  w.Family("colibri_pipeline_halves_step_time_ratio",
           "Split / unsplit step time, averaged over pairs of steps of equal size a few steps "
           "apart: the decision's measure (0 before any pair).",
           Type::kGauge);
  for (const auto& d : decisions) {
    w.Sample("colibri_pipeline_halves_step_time_ratio", labels, values(d), d.octave.ratio);
  }
  w.Family("colibri_pipeline_halves_steps_total", "Steps decided.", Type::kCounter);
  for (const auto& d : decisions) {
    w.Sample("colibri_pipeline_halves_steps_total", labels, values(d),
             static_cast<double>(d.octave.steps));
  }
  w.Family("colibri_pipeline_halves_probe_steps_total",
           "Steps run in the mode not chosen, to keep its time measured.", Type::kCounter);
  for (const auto& d : decisions) {
    w.Sample("colibri_pipeline_halves_probe_steps_total", labels, values(d),
             static_cast<double>(d.octave.probes));
  }
  w.Family("colibri_pipeline_halves_switches_total", "Changes of the decision after the first.",
           Type::kCounter);
  for (const auto& d : decisions) {
    w.Sample("colibri_pipeline_halves_switches_total", labels, values(d),
             static_cast<double>(d.octave.switches));
  }
}

// The scheduler's and cluster's values, read at scrape time.
void CollectSources(const GenerationScheduler* scheduler, ClusterExperts* cluster,
                    const metrics::Counter* generated_tokens, metrics::TextWriter& w) {
  if (scheduler != nullptr) {
    w.Family("colibri_queue_depth", "Generation requests waiting for a session.", Type::kGauge);
    w.Sample("colibri_queue_depth", {}, {}, scheduler->queued());
    w.Family("colibri_active_generations", "Generations running now.", Type::kGauge);
    w.Sample("colibri_active_generations", {}, {}, scheduler->active_generations());
    w.Family("colibri_sessions", "Concurrent generations possible (--sessions).", Type::kGauge);
    w.Sample("colibri_sessions", {}, {}, scheduler->sessions());
    const arch::PredictorStats p = scheduler->predictor();
    w.Family("colibri_predictor_routed_experts_total",
             "Experts routed where the next-layer predictor made a prediction.", Type::kCounter);
    w.Sample("colibri_predictor_routed_experts_total", {}, {}, static_cast<double>(p.routed));
    w.Family("colibri_predictor_predicted_experts_total", "Experts the predictor named.",
             Type::kCounter);
    w.Sample("colibri_predictor_predicted_experts_total", {}, {}, static_cast<double>(p.predicted));
    w.Family("colibri_predictor_hits_total", "Routed experts the predictor had named.",
             Type::kCounter);
    w.Sample("colibri_predictor_hits_total", {}, {}, static_cast<double>(p.hits));
    w.Family("colibri_predictor_recall_ratio",
             "Predictor hits / routed experts since start (0 before any prediction).",
             Type::kGauge);
    w.Sample("colibri_predictor_recall_ratio", {}, {}, p.recall());
    const GenerationScheduler::ExpertOverlap o = scheduler->expert_overlap();
    w.Family("colibri_expert_outstanding_seconds_total",
             "Time routed experts were outstanding (local or on nodes) during forward steps.",
             Type::kCounter);
    w.Sample("colibri_expert_outstanding_seconds_total", {}, {}, o.outstanding_seconds);
    w.Family("colibri_expert_wait_seconds_total",
             "Time forward steps were blocked waiting for routed experts.", Type::kCounter);
    w.Sample("colibri_expert_wait_seconds_total", {}, {}, o.wait_seconds);
    w.Family("colibri_split_batches_total", "Forward steps run as two pipelined half-batches.",
             Type::kCounter);
    w.Sample("colibri_split_batches_total", {}, {}, static_cast<double>(o.split_batches));
    w.Family("colibri_expert_overlap_ratio",
             "Share of the experts' outstanding time the coordinator computed: "
             "1 - wait / outstanding since start (0 before any).",
             Type::kGauge);
    w.Sample("colibri_expert_overlap_ratio", {}, {},
             o.outstanding_seconds > 0 ? std::max(0.0, 1.0 - o.wait_seconds / o.outstanding_seconds)
                                       : 0.0);
    CollectHalves(scheduler->pipeline_halves(), w);
    const PrefixCache::Stats cache = scheduler->prefix_cache();
    w.Family("colibri_prefix_cache_bytes",
             "Bytes of KV rows the prefix cache holds (--kv-cache-size bounds them).",
             Type::kGauge);
    w.Sample("colibri_prefix_cache_bytes", {}, {}, static_cast<double>(cache.bytes));
    w.Family("colibri_prefix_cache_evicted_blocks_total",
             "Prefix cache blocks evicted to stay within --kv-cache-size.", Type::kCounter);
    w.Sample("colibri_prefix_cache_evicted_blocks_total", {}, {},
             static_cast<double>(cache.evicted_blocks));
    if (const PrefixDiskStore* disk = scheduler->prefix_disk()) CollectPrefixDisk(disk->stats(), w);
  }
  if (cluster == nullptr) return;
  Cluster& c = cluster->cluster();
  const int n = c.n_nodes();
  std::vector<NodeCounters> counters(n);
  for (int i = 0; i < n; ++i) counters[i] = c.counters(i);
  const std::vector<std::string> node = {"node"};
  const auto per_node = [&](const char* name, const char* help, Type type, auto value) {
    w.Family(name, help, type);
    for (int i = 0; i < n; ++i) {
      w.Sample(name, node, {c.node(i).node_id}, static_cast<double>(value(i)));
    }
  };
  per_node("colibri_node_round_trips_total", "ComputeLayer calls made to the node.", Type::kCounter,
           [&](int i) { return counters[i].requests; });
  per_node("colibri_node_failures_total", "Calls to the node that failed or missed the deadline.",
           Type::kCounter, [&](int i) { return counters[i].failures; });
  per_node("colibri_node_failovers_total", "Failed calls whose routes moved to a replica.",
           Type::kCounter, [&](int i) { return counters[i].failovers; });
  per_node("colibri_node_sent_bytes_total", "ComputeLayer request bytes sent to the node.",
           Type::kCounter, [&](int i) { return counters[i].bytes_sent; });
  per_node("colibri_node_received_bytes_total", "ComputeLayer reply bytes from the node.",
           Type::kCounter, [&](int i) { return counters[i].bytes_received; });
  per_node("colibri_node_floor_bytes_total",
           "Hidden-state floor of the calls to the node: 2 x tokens x n_embd x 4 bytes.",
           Type::kCounter, [&](int i) { return counters[i].floor_bytes; });
  {
    // The wire against its floor, per generated token (prompt traffic included).
    double bytes = 0;
    double floor = 0;
    for (int i = 0; i < n; ++i) {
      bytes += static_cast<double>(counters[i].bytes_sent + counters[i].bytes_received);
      floor += static_cast<double>(counters[i].floor_bytes);
    }
    const double tokens = generated_tokens->value();
    w.Family("colibri_wire_bytes_per_generated_token",
             "ComputeLayer bytes both ways (prompts included) / generated tokens (0 before any).",
             Type::kGauge);
    w.Sample("colibri_wire_bytes_per_generated_token", {}, {}, tokens > 0 ? bytes / tokens : 0);
    w.Family("colibri_wire_floor_bytes_per_generated_token",
             "Hidden-state floor of those calls / generated tokens (0 before any).", Type::kGauge);
    w.Sample("colibri_wire_floor_bytes_per_generated_token", {}, {},
             tokens > 0 ? floor / tokens : 0);
  }
  per_node("colibri_node_wait_seconds_total", "Time from sending calls to their completion.",
           Type::kCounter, [&](int i) { return counters[i].wait_seconds; });
  per_node("colibri_node_work_seconds_total",
           "Of that wait, the time the node reported computing and reading from disk.",
           Type::kCounter, [&](int i) { return counters[i].node_seconds; });
  per_node("colibri_node_deadline_misses_total",
           "Calls to the node that missed their latency-derived deadline (node marked suspect).",
           Type::kCounter, [&](int i) { return counters[i].deadline_misses; });
  std::vector<LatencyEstimate> latency(n);
  for (int i = 0; i < n; ++i) latency[i] = c.latency(i);
  per_node("colibri_node_reply_seconds_ewma",
           "Running average of the node's ComputeLayer reply time.", Type::kGauge,
           [&](int i) { return latency[i].wait_ewma; });
  per_node("colibri_node_reply_seconds_p95",
           "95th percentile of the node's newest ComputeLayer reply times.", Type::kGauge,
           [&](int i) { return latency[i].wait_high; });
  per_node("colibri_node_network_seconds_ewma",
           "Running average of the reply time minus the node's reported work.", Type::kGauge,
           [&](int i) { return latency[i].network_ewma; });
  per_node("colibri_node_network_seconds_p95",
           "95th percentile of the reply time minus the node's reported work.", Type::kGauge,
           [&](int i) { return latency[i].network_high; });
  per_node("colibri_node_work_seconds_per_unit_ewma",
           "Running average of the node's reported work per unit of expert work.", Type::kGauge,
           [&](int i) { return latency[i].seconds_per_work_ewma; });
  per_node("colibri_node_work_units_total",
           "ExpertWork units of the calls the node answered (4 per expert read + 3 per token).",
           Type::kCounter, [&](int i) { return static_cast<double>(c.counters(i).work_units); });
  per_node("colibri_node_healthy", "1 while the node is healthy.", Type::kGauge,
           [&](int i) { return c.healthy(i) ? 1 : 0; });
  per_node("colibri_node_excluded", "1 while the node is excluded from the placement.",
           Type::kGauge, [&](int i) { return c.excluded(i) ? 1 : 0; });
  // A counter of the whole cluster: one sample without labels.
  const auto total = [&](const char* name, const char* help, int64_t value) {
    w.Family(name, help, Type::kCounter);
    w.Sample(name, {}, {}, static_cast<double>(value));
  };
  total("colibri_fallback_routes_total",
        "Routes computed by the coordinator because no replica could.", c.fallback_routes());
  const HedgeCounters hedges = c.hedges();
  total("colibri_hedges_total", "Late calls whose share was re-sent to the experts' other copies.",
        hedges.hedges);
  total("colibri_hedge_wins_total", "Hedges that answered before the late call.", hedges.wins);
  total("colibri_hedge_wasted_bytes_total",
        "Request and reply bytes of the calls that lost to a hedge or to the late call.",
        hedges.wasted_bytes);
  total("colibri_hedges_refused_total", "Hedges the --hedge-budget refused.", hedges.refused);
  total("colibri_replacements_total", "Placements installed after the first.", c.replacements());
  const Cluster::ExtraCopyCounters extra = c.extra_copy_counters();
  total("colibri_extra_copies_added_total",
        "Extra copies of hot experts that installed placements added (--rebalance).", extra.added);
  total("colibri_extra_copies_dropped_total",
        "Extra copies of experts that installed placements dropped.", extra.dropped);
  total("colibri_placement_moved_bytes_total",
        "Expert bytes sent to nodes for re-placements and extra copies.", extra.moved_bytes);
}

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(ServeMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->RecordRequest(
          "grpc", method_,
          CodeName(static_cast<absl::StatusCode>(methods->GetSendStatus().error_code())));
    }
    methods->Proceed();
  }

 private:
  ServeMetrics* const metrics_;
  const std::string method_;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(ServeMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // Method names come from the client: only the served services' are kept
    // as labels, so that a scanner cannot grow the series without bound.
    std::string method = info->method() != nullptr ? info->method() : "";
    const bool known = (absl::StartsWith(method, "/colibri.v1.") ||
                        absl::StartsWith(method, "/grpc.health.v1.Health/")) &&
                       method.size() < 80;
    return new MetricsInterceptor(metrics_, known ? method : "other");
  }

 private:
  ServeMetrics* const metrics_;
};

}  // namespace

ServeMetrics::ServeMetrics() {
  requests_ = registry_.AddCounter("colibri_requests_total",
                                   "Finished requests by API, endpoint and status.",
                                   {"api", "endpoint", "status"});
  generations_ =
      registry_.AddCounter("colibri_generations_total",
                           "Finished generations by outcome (a status code name).", {"outcome"});
  prompt_tokens_ =
      registry_.AddCounter("colibri_prompt_tokens_total", "Prompt tokens of finished generations.")
          ->With({});
  prompt_tokens_cached_ =
      registry_
          .AddCounter("colibri_prompt_tokens_cached_total",
                      "Prompt tokens of finished generations whose KV rows came from the "
                      "prefix cache instead of being evaluated.")
          ->With({});
  generated_tokens_ =
      registry_
          .AddCounter("colibri_generated_tokens_total",
                      "Tokens generated (cancelled and failed generations included).")
          ->With({});
  metrics::Family<metrics::Counter>* drafts = registry_.AddCounter(
      "colibri_draft_tokens_total", "Drafted tokens verified by speculative decoding, by outcome.",
      {"outcome"});
  drafts_accepted_ = drafts->With({"accepted"});
  drafts_rejected_ = drafts->With({"rejected"});
  time_to_first_token_ =
      registry_
          .AddHistogram("colibri_time_to_first_token_seconds",
                        "From submission (queueing included) to the first generated token.",
                        kFirstTokenBuckets)
          ->With({});
  inter_token_ = registry_
                     .AddHistogram("colibri_inter_token_latency_seconds",
                                   "Between consecutive generated tokens.", kInterTokenBuckets)
                     ->With({});
}

void ServeMetrics::SetSources(const GenerationScheduler* scheduler, ClusterExperts* cluster) {
  const metrics::Counter* generated = generated_tokens_;
  registry_.AddCollector([scheduler, cluster, generated](metrics::TextWriter& w) {
    CollectSources(scheduler, cluster, generated, w);
  });
}

void ServeMetrics::RecordRequest(absl::string_view api, absl::string_view endpoint,
                                 absl::string_view status) {
  requests_->With({std::string(api), std::string(endpoint), std::string(status)})->Increment();
}

void ServeMetrics::OnFirstToken(double seconds) { time_to_first_token_->Observe(seconds); }

void ServeMetrics::OnInterToken(double seconds) { inter_token_->Observe(seconds); }

void ServeMetrics::OnGenerationEnd(const absl::Status& status, int prompt_tokens,
                                   int cached_prompt_tokens, int generated_tokens) {
  generations_->With({CodeName(status.code())})->Increment();
  prompt_tokens_->Increment(prompt_tokens);
  prompt_tokens_cached_->Increment(cached_prompt_tokens);
  generated_tokens_->Increment(generated_tokens);
}

void ServeMetrics::OnDrafts(int accepted, int rejected) {
  drafts_accepted_->Increment(accepted);
  drafts_rejected_->Increment(rejected);
}

std::string ServeMetrics::Render() const { return registry_.Render(); }

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeGrpcMetricsInterceptor(
    ServeMetrics* metrics) {
  return std::make_unique<MetricsInterceptorFactory>(metrics);
}

}  // namespace colibri::coordinator
