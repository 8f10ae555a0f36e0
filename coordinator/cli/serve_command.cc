#include "coordinator/cli/serve_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/service_notify.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "coordinator/api/chat_prompt.h"
#include "coordinator/api/cluster_view.h"
#include "coordinator/api/grpc_health_publisher.h"
#include "coordinator/api/http_server.h"
#include "coordinator/api/inference_service.h"
#include "coordinator/api/model_summary.h"
#include "coordinator/cli/resident_weights.h"
#include "coordinator/generation/expert_use.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/serve_metrics.h"
#include "coordinator/generation/step_timeline.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "model/arch/model.h"
#include "model/moe/routing_trace.h"
#include "model/tokenizer/tokenizer.h"
#include "rpc/auth_token.h"
#include "rpc/probe_server.h"
#include "rpc/server_support.h"

namespace colibri::coordinator {
namespace {

// The model's name in the HTTP API: the file name without ".gguf".
std::string ModelId(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (absl::EndsWith(name, ".gguf")) name.resize(name.size() - 5);
  return name.empty() ? "colibri" : name;
}

// Physical RAM, 0 where the system does not say.
int64_t PhysicalRamBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
}

}  // namespace

absl::Status RunServe(const ServeOptions& options, const std::function<void()>& wait_for_shutdown,
                      std::ostream& out, std::ostream& err) {
  std::string token;
  if (!options.auth_token_file.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(token, rpc::ReadTokenFile(options.auth_token_file));
  }
  // Checked before the model loads (the cluster reads it again when it starts).
  if (!options.node_auth_token_file.empty()) {
    COLIBRI_RETURN_IF_ERROR(rpc::ReadTokenFile(options.node_auth_token_file).status());
  }
  COLIBRI_RETURN_IF_ERROR(
      rpc::CheckListenAllowed(options.listen, !token.empty(), options.insecure));
  std::vector<std::string> api_keys;
  if (!options.api_key_file.empty()) {
    if (options.http_listen.empty()) {
      return absl::InvalidArgumentError("--api-key-file needs --http-listen");
    }
    COLIBRI_ASSIGN_OR_RETURN(api_keys, rpc::ReadKeyFile(options.api_key_file));
  }
  if ((!options.http_tls_cert_file.empty() || !options.http_tls_key_file.empty()) &&
      options.http_listen.empty()) {
    return absl::InvalidArgumentError("--http-tls-cert and --http-tls-key need --http-listen");
  }
  if (!options.cors_origins.empty() && options.http_listen.empty()) {
    return absl::InvalidArgumentError("--cors-origin needs --http-listen");
  }
  for (const std::string& origin : options.cors_origins) {
    if (origin == "*") {
      err << "serve: warning: --cors-origin '*': web pages of any site may call the HTTP API "
             "with a key their users give them\n";
    } else if (!absl::StartsWith(origin, "http://") && !absl::StartsWith(origin, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cors-origin '", origin, "': an origin is SCHEME://HOST[:PORT], or '*'"));
    }
  }
  if (!options.http_listen.empty()) {
    COLIBRI_RETURN_IF_ERROR(rpc::CheckListenAllowed(
        options.http_listen, !token.empty() || !api_keys.empty(), options.insecure,
        "--auth-token-file or --api-key-file"));
  }
  if (options.health_metrics && options.health_listen.empty()) {
    return absl::InvalidArgumentError("--health-metrics needs --health-listen");
  }
  // Outlives everything that records into it.
  ServeMetrics metrics;
  // Probes see "starting" while the model loads and the nodes are reached.
  std::unique_ptr<rpc::ProbeServer> probes;
  if (!options.health_listen.empty()) {
    rpc::ProbeServer::Options probe_options;
    probe_options.listen = options.health_listen;
    probe_options.metrics = options.health_metrics;
    COLIBRI_ASSIGN_OR_RETURN(probes, rpc::ProbeServer::Start(probe_options));
  }
  // The HTTP API listens while the model loads, answering 503 until then.
  std::unique_ptr<HttpServer> http;
  if (!options.http_listen.empty()) {
    HttpServer::Options http_options;
    http_options.listen = options.http_listen;
    http_options.auth_token = token;
    http_options.tls_cert_file = options.http_tls_cert_file;
    http_options.tls_key_file = options.http_tls_key_file;
    http_options.api_keys = std::move(api_keys);
    http_options.cors_origins = options.cors_origins;
    http_options.defaults.max_queued = options.max_queued;
    http_options.threads =
        options.http_threads > 0 ? options.http_threads : 4 * std::max(options.sessions, 1) + 4;
    http_options.model_id = ModelId(options.model_path);
    http_options.metrics = &metrics;
    COLIBRI_ASSIGN_OR_RETURN(http, HttpServer::Start(http_options));
  }
  rpc::ServerTlsFiles tls;
  tls.cert_file = options.tls_cert_file;
  tls.key_file = options.tls_key_file;
  COLIBRI_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           rpc::MakeServerCredentials(tls));

  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<arch::Model> model,
                           arch::Model::Open(options.model_path));
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::FromGguf(model->file());
  if (!tok.ok()) err << "serve: no tokenizer (" << tok.status().message() << "): id prompts only\n";

  WarnIfContextCapped("serve", options.ctx_size, model->config(), err);

  // Before the nodes are set up and the first request: every weight when every
  // expert runs here, else the dense part.
  MakeWeightsResident(model.get(), /*experts_here=*/!options.cluster.enabled(), options.keep_mapped,
                      /*interleave=*/!options.gguf_order, err);
  std::unique_ptr<ThreadPool> pool =
      MakeCommandPool(options.threads, options.cluster.enabled(), options.spin_us);
  // What the dashboard draws and --rebalance plans from; written by the
  // scheduler's stepping thread. Before `cluster`, whose rebalancer reads it.
  ExpertUse expert_use(ExpertsPerLayer(*model));
  std::unique_ptr<ClusterExperts> cluster;
  if (options.cluster.enabled()) {
    ClusterCommandOptions cluster_options = options.cluster;
    cluster_options.auth_token_file = !options.node_auth_token_file.empty()
                                          ? options.node_auth_token_file
                                          : options.auth_token_file;
    COLIBRI_ASSIGN_OR_RETURN(cluster,
                             ClusterExperts::Start(cluster_options, *model, pool.get(), err));
    COLIBRI_RETURN_IF_ERROR(cluster->WatchMembership(cluster_options, err));
  }

  GenerationScheduler::Options scheduler_options;
  scheduler_options.sessions = options.sessions;
  scheduler_options.ctx_size = options.ctx_size;
  scheduler_options.batch_size = options.batch_size;
  scheduler_options.prefetch.depth = options.prefetch_depth >= 0 ? options.prefetch_depth
                                     : cluster != nullptr        ? 1
                                                                 : 0;
  scheduler_options.prefetch.count = options.prefetch_count;
  std::unique_ptr<moe::RoutingTraceWriter> routing_trace;
  if (!options.trace_routing.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(routing_trace, moe::RoutingTraceWriter::Open(options.trace_routing, {}));
    scheduler_options.routing_observers.push_back(routing_trace.get());
  }
  scheduler_options.pipeline_halves = options.pipeline_halves;
  scheduler_options.kv_type = options.kv_type;
  scheduler_options.log = &err;
  scheduler_options.metrics = &metrics;
  scheduler_options.speculation = options.speculation;
  scheduler_options.prefix_cache_bytes =
      options.kv_cache_bytes >= 0 ? options.kv_cache_bytes : PhysicalRamBytes() / 8;
  scheduler_options.prefix_cache_dir = options.kv_cache_dir;
  scheduler_options.prefix_cache_disk_bytes = options.kv_cache_disk_bytes;
  scheduler_options.build_token_trie_at_start = true;
  const tokenizer::Tokenizer* tokenizer = tok.ok() ? tok->get() : nullptr;
  // Both front ends render chats: gRPC Generate's `chat` prompt and HTTP.
  ChatRenderer chat;
  std::string chat_template_source;
  if (tokenizer != nullptr || http != nullptr) {
    COLIBRI_ASSIGN_OR_RETURN(chat, LoadChatRenderer(model->file(), tokenizer,
                                                    options.chat_template_file, err,
                                                    &chat_template_source));
  }
  if (scheduler_options.prefix_cache_bytes > 0) {
    err << "serve: prefix reuse across requests in up to "
        << FormatBytes(static_cast<uint64_t>(scheduler_options.prefix_cache_bytes))
        << " of KV rows (--kv-cache-size)\n";
  }
  StepTimeline timeline;
  scheduler_options.routing_observers.push_back(&expert_use);
  if (cluster != nullptr) {
    COLIBRI_RETURN_IF_ERROR(cluster->StartRebalancing(
        options.cluster, [&expert_use] { return expert_use.Snapshot(); }, err));
  }
  scheduler_options.timeline = &timeline;
  COLIBRI_ASSIGN_OR_RETURN(
      std::unique_ptr<GenerationScheduler> scheduler,
      GenerationScheduler::Create(scheduler_options, *model, tokenizer, cluster.get(), pool.get()));
  InferenceServiceImpl::Options service_options;
  service_options.auth_token = token;
  service_options.defaults.max_queued = options.max_queued;
  service_options.chat = chat;
  service_options.chat_template_source = chat_template_source;
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<InferenceServiceImpl> service,
                           InferenceServiceImpl::Create(service_options, *model, tokenizer,
                                                        cluster.get(), scheduler.get()));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, credentials, &port);
  builder.RegisterService(service.get());
  rpc::ServerTransportOptions transport;
  transport.max_message_bytes = options.max_message_bytes;
  rpc::ConfigureServerBuilder(transport, &builder);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MakeGrpcMetricsInterceptor(&metrics));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  // Ready while it can compute: with nodes, while one of them is healthy.
  const auto ready = [c = cluster.get()]() -> absl::Status {
    if (c != nullptr && !c->cluster().AnyHealthy()) {
      return absl::UnavailableError("no expert node is healthy");
    }
    return absl::OkStatus();
  };
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  std::unique_ptr<GrpcHealthPublisher> health_publisher;
  if (health != nullptr) {
    GrpcHealthPublisher::Options publisher_options;
    publisher_options.services = {v1::Inference::service_full_name()};
    health_publisher = std::make_unique<GrpcHealthPublisher>(publisher_options, health, ready);
  }
  const arch::ModelConfig& config = model->config();
  err << absl::StrFormat(
      "serve: %s (%s), %d layers, %d experts top-%d, context %d, %d session(s), %s, %s%s\n",
      config.arch, config.name, config.n_layer, config.n_expert, config.n_expert_used,
      scheduler->n_ctx(), options.sessions,
      cluster != nullptr ? absl::StrCat(cluster->cluster().n_nodes(), " expert nodes")
                         : std::string("local experts"),
      token.empty() ? "no auth" : "token auth", options.tls_cert_file.empty() ? "" : ", TLS");
  if (options.speculation.draft != DraftKind::kNone) {
    err << absl::StrFormat("serve: speculative decoding with %s drafts, at most %d per step (%s)\n",
                           DraftKindName(options.speculation.draft), options.speculation.draft_max,
                           options.speculation.adaptive ? "adaptive" : "fixed");
  }
  out << "listening on " << rpc::ListenHost(options.listen) << ":" << port << std::endl;

  ClusterView::Sources view_sources;
  view_sources.model = model.get();
  view_sources.scheduler = scheduler.get();
  view_sources.cluster = cluster != nullptr ? &cluster->cluster() : nullptr;
  view_sources.expert_use = &expert_use;
  view_sources.timeline = &timeline;
  ClusterView cluster_view(view_sources);
  // Stopped before what they serve is destroyed, on every return.
  absl::Cleanup stop_http = [&http, &probes, &health_publisher] {
    if (http != nullptr) http->Stop();
    if (probes != nullptr) probes->Stop();
    if (health_publisher != nullptr) health_publisher->Stop();
  };
  metrics.SetSources(scheduler.get(), cluster.get());
  if (http != nullptr) {
    HttpServer::Backend backend;
    backend.model = model.get();
    backend.tokenizer = tokenizer;
    backend.scheduler = scheduler.get();
    backend.cluster = cluster.get();
    backend.chat = std::move(chat);
    backend.chat_template_source = std::move(chat_template_source);
    backend.cluster_view = &cluster_view;
    http->Attach(std::move(backend));
    out << "http listening on " << rpc::ListenHost(options.http_listen) << ":" << http->port()
        << std::endl;
  }
  if (probes != nullptr) {
    probes->MarkStarted(ready, [&metrics] { return metrics.Render(); });
    out << "health listening on " << probes->address() << std::endl;
  }
  // Type=notify units: started once the model is loaded and the nodes reached.
  if (absl::Status notified = NotifyServiceReady(absl::StrCat(
          "serving on ", rpc::ListenHost(options.listen), ":", port,
          cluster != nullptr ? absl::StrCat(" with ", cluster->cluster().n_nodes(), " expert nodes")
                             : std::string()));
      !notified.ok()) {
    err << "serve: " << notified.message() << "\n";
  }

  wait_for_shutdown();

  err << "serve: shutting down\n";
  NotifyServiceStopping("shutting down").IgnoreError();
  if (health_publisher != nullptr) health_publisher->Stop();
  if (health != nullptr) health->Shutdown();
  // Calls in progress get the grace period to finish; then gRPC cancels them
  // and the workers stop at their next token.
  server->Shutdown(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(options.shutdown_grace));
  server->Wait();
  // Running HTTP streams end with the cancellation of their generations:
  // given a moment to send that error event before the connections close.
  scheduler->BeginShutdown();
  if (http != nullptr) {
    http->Drain(absl::Seconds(2));
    http->Stop();
  }
  scheduler->Stop();
  service->Stop();
  err << "serve: stopped\n";
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
