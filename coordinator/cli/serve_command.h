// `colibri-coordinator serve`: the model behind colibri.v1.Inference over
// gRPC, with its routed experts on expert nodes or computed here.
#ifndef COLIBRI_COORDINATOR_CLI_SERVE_COMMAND_H_
#define COLIBRI_COORDINATOR_CLI_SERVE_COMMAND_H_

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/cluster/cluster_experts.h"
#include "coordinator/generation/speculation_options.h"
#include "model/arch/session.h"

namespace colibri::coordinator {

struct ServeOptions {
  std::string model_path;
  // gRPC listen address; port 0 lets the OS choose. Default: "127.0.0.1:7070".
  std::string listen = "127.0.0.1:7070";
  // OpenAI-compatible HTTP API address ("HOST:PORT", port 0 lets the OS
  // choose), same token and loopback rule as `listen`. Default: "" (off).
  std::string http_listen;
  // Plaintext HTTP address of the probes (rpc/probe_server.h): /healthz is
  // 200 once the model is loaded and the nodes reached, /readyz while the
  // server can serve (some expert node healthy). Open without a token, also
  // beyond loopback. Default: "" (off).
  std::string health_listen;
  // Serve GET /metrics on health_listen too, without a token. Default: false.
  bool health_metrics = false;
  // PEM certificate chain and key of the HTTP API: HTTPS when both are set
  // (HttpServer::Options::tls_cert_file, which says what changes).
  // Default: "" (plain HTTP).
  std::string http_tls_cert_file;
  std::string http_tls_key_file;
  // File of the HTTP API's keys, one per line (rpc::ReadKeyFile): with it
  // the API accepts these keys and not auth_token's. Default: "" (the token).
  std::string api_key_file;
  // Origins whose browser pages may call the HTTP API (HttpServer::Options::
  // cors_origins; "*" allowed, with a warning). Default: none.
  std::vector<std::string> cors_origins;
  // Generations waiting for a session at most, over gRPC and HTTP alike; more
  // are refused (HTTP 429 with Retry-After, gRPC RESOURCE_EXHAUSTED).
  // Default: 64.
  int max_queued = 64;
  // Connection threads of the HTTP API (each open connection holds one).
  // Default: 0, meaning 4 * sessions + 4.
  int http_threads = 0;
  // Jinja chat template of the chat endpoints, overriding the GGUF's
  // tokenizer.chat_template. Default: "" (the GGUF's, else ChatML).
  std::string chat_template_file;
  // File holding the token clients must send as "authorization: Bearer
  // <token>". Unless node_auth_token_file is set, the same token also
  // authenticates the coordinator to the nodes. Default: "" (no auth; then
  // serving beyond loopback needs `insecure`).
  std::string auth_token_file;
  // File holding the nodes' token when it differs from the clients' one.
  // Default: "" (auth_token_file's token, if any).
  std::string node_auth_token_file;
  // PEM certificate chain and key of the server side; TLS when both are set.
  // Default: "" (plaintext).
  std::string tls_cert_file;
  std::string tls_key_file;
  // Listen beyond loopback without a token. Default: false.
  bool insecure = false;
  // Worker threads of the forward pass. Default: 0, meaning the physical
  // core count.
  int threads = 0;
  // Replaces every spin of the worker pool (ThreadPool::WithSpinOverride;
  // main takes it from COLIBRI_SPIN_US). Default: none, the pool's own.
  std::optional<int> spin_us;
  // Context size of every session. Default: 0, meaning min(model, 4096).
  int ctx_size = 0;
  // Prompt tokens per batch. Default: 512.
  int batch_size = 512;
  // Concurrent generations; more requests queue. Default: 1.
  int sessions = 1;
  // Keep the weights mapped from the file instead of copying them into RAM
  // on huge pages (MakeWeightsResident). Default: false.
  bool keep_mapped = false;
  // Copy the weights in GGUF row order even where the kernels read an
  // interleaved layout faster (Model::InterleaveWeights); results are the
  // same. For comparisons. Default: false.
  bool gguf_order = false;
  // Element type of the KV cache (arch::KvType). Default: kF32.
  arch::KvType kv_type = arch::KvType::kF32;
  // Bytes of KV rows kept for reuse by later requests with the same prefix
  // (GenerationScheduler::Options::prefix_cache_bytes); 0 turns reuse off,
  // -1 means an eighth of the physical RAM. Default: -1.
  int64_t kv_cache_bytes = -1;
  // Directory where the cached prefixes are also kept, for later requests
  // and across restarts (GenerationScheduler::Options::prefix_cache_dir).
  // Default: "" (RAM only).
  std::string kv_cache_dir;
  // Bytes of files kept in kv_cache_dir; -1 means min(4 GiB, half the free
  // space of its file system), 0 leaves it unused. Default: -1.
  int64_t kv_cache_disk_bytes = -1;
  // Next-layer expert prediction, as RunOptions: layers ahead 0 to 2, or -1
  // for 1 with nodes and 0 without. Default: -1.
  int prefetch_depth = -1;
  // Experts predicted per token. Default: 0, meaning the model's top-k.
  int prefetch_count = 0;
  // Where every forward step's expert routing is recorded
  // (model/moe/routing_trace.h); empty: not recorded. Default: empty.
  std::string trace_routing;
  // Pipelining of two half-batches per step (arch::PipelineHalves).
  // Default: kAuto.
  arch::PipelineHalves pipeline_halves = arch::PipelineHalves::kAuto;
  // Speculative decoding inside the batched steps (--draft, --draft-max,
  // --draft-fixed), as `run`'s. Default: none.
  SpeculationOptions speculation;
  // Largest gRPC message. Default: 64 MiB.
  int max_message_bytes = 64 << 20;
  // Expert nodes (cluster.nodes empty: experts computed here). The node TLS
  // files and tokens are cluster.tls_* and cluster.auth_token_file (this
  // command fills the latter from the two token options above).
  ClusterCommandOptions cluster;
  // Grace period for generations in progress at shutdown. Default: 5 s.
  absl::Duration shutdown_grace = absl::Seconds(5);
};

// Loads the model, connects the cluster, serves, prints "listening on
// HOST:PORT" (and "http listening on HOST:PORT" with http_listen) to `out`
// (flushed) and then calls wait_for_shutdown (main.cc
// waits there for SIGINT / SIGTERM), then shuts down cleanly. Start-up
// errors are returned: FailedPrecondition for a non-loopback listen without a
// token or --insecure, Unavailable when the address cannot be bound.
absl::Status RunServe(const ServeOptions& options, const std::function<void()>& wait_for_shutdown,
                      std::ostream& out, std::ostream& err);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_CLI_SERVE_COMMAND_H_
