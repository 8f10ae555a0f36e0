// colibri-coordinator: the command line. Flags are read here only; each
// subcommand is a library function taking an Options struct.
#include <signal.h>

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/cli_checks.h"
#include "common/cli_config.h"
#include "common/mutex_mode.h"
#include "common/process_knobs.h"
#include "common/progress_line.h"
#include "common/shutdown_signals.h"
#include "common/version_flag.h"
#include "coordinator/cli/chat_template_command.h"
#include "coordinator/cli/cluster_command.h"
#include "coordinator/cli/inspect_command.h"
#include "coordinator/cli/perplexity_command.h"
#include "coordinator/cli/project_command.h"
#include "coordinator/cli/run_command.h"
#include "coordinator/cli/schema_check_command.h"
#include "coordinator/cli/serve_command.h"
#include "coordinator/cli/tokenize_command.h"
#include "model/ops/matmul.h"
#include "rpc/protobuf_log.h"
#include "rpc/wire_tensor.h"

namespace {

constexpr const char* kMmapHelp =
    "keep the weights mapped from the file instead of copying them into RAM on huge pages "
    "(the copy is made when they take at most half of the memory limit)";
constexpr const char* kGgufOrderHelp =
    "copy the weights into RAM in the file's row order, not in the interleaved layout the "
    "kernels read faster (same results; for comparisons)";
constexpr const char* kTraceRoutingHelp =
    "record every forward step's experts per layer (with token counts) and prediction hints "
    "to this file, for colibri-cache-sim (format: model/moe/routing_trace.h; at most 256 MiB)";

using colibri::coordinator::InspectOptions;
using colibri::coordinator::RunOptions;

// --kv-type f32|f16|q8_0 (arch::KvType).
void AddKvTypeFlag(CLI::App* cmd, colibri::arch::KvType* kv_type) {
  using colibri::arch::KvType;
  const std::map<std::string, KvType> types = {
      {"f32", KvType::kF32}, {"f16", KvType::kF16}, {"q8_0", KvType::kQ8_0}};
  cmd->add_option("--kv-type", *kv_type,
                  "element type of the KV cache: f32, f16 (half the memory and the bytes "
                  "attention reads) or q8_0 (8-bit blocks of 32 with a scale: 0.27 of f32's; "
                  "head dimensions must be multiples of 32)")
      ->transform(CLI::CheckedTransformer(types))
      ->type_name("f32|f16|q8_0")
      ->default_str("f32");
}

void AddRunFlags(CLI::App* cmd, RunOptions* o, std::string* prompt_tokens, bool* exact) {
  cmd->add_option("--model,-m", o->model_path, "GGUF model file (first file of a split model)")
      ->required();
  cmd->add_option("--prompt,-p", o->prompt, "prompt text");
  cmd->add_option("--prompt-file", o->prompt_file, "file holding the prompt text");
  cmd->add_option("--prompt-tokens", *prompt_tokens,
                  "comma-separated token ids, fed exactly as given (no BOS added)");
  cmd->add_option("--n-predict,-n", o->n_predict,
                  "tokens to generate (0: evaluate the prompt; the context bounds it)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating after end-of-generation tokens");
  cmd->add_option("--temp", o->sampling.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", o->sampling.top_k, "top-k (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->sampling.top_p, "top-p (1: off)")
      ->capture_default_str()
      ->check(colibri::cli::kProbability);
  cmd->add_option("--min-p", o->sampling.min_p, "min-p (0: off)")
      ->capture_default_str()
      ->check(colibri::cli::kProbability);
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "repetition penalty (1: off)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "(0: off)")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "(0: off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", o->sampling.penalty_last_n,
                  "tokens the penalties look back over (-1: all)")
      ->capture_default_str()
      ->check(CLI::Range(-1, colibri::sampling::SamplingOptions::kMaxPenaltyLastN));
  cmd->add_option("--seed", o->sampling.seed, "sampling seed")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads,-t", o->threads, "worker threads (0: physical cores)")
      ->capture_default_str()
      ->check(colibri::cli::kThreadCount);
  cmd->add_option("--ctx-size,-c", o->ctx_size,
                  "context size (0: min(model, 4096); at most the model's)")
      ->capture_default_str()
      ->check(colibri::cli::kContextSize);
  cmd->add_option("--batch-size,-b", o->batch_size, "prompt tokens per batch")
      ->capture_default_str()
      ->check(colibri::cli::kBatchSize);
  cmd->add_flag("--exact", *exact, "keep activations in float32 (the reference path)");
  cmd->add_option("--logits-out", o->logits_out, "write float32 logits rows to this file");
  cmd->add_flag("--all-logits", o->all_logits, "with --logits-out: a row per prompt position");
  cmd->add_flag("--print-token-ids", o->print_token_ids,
                "print the generated ids on one line instead of the text");
  cmd->add_flag("--mmap", o->keep_mapped, kMmapHelp);
  cmd->add_flag("--gguf-order", o->gguf_order, kGgufOrderHelp);
  AddKvTypeFlag(cmd, &o->kv_type);
  cmd->add_option("--prefetch-depth", o->prefetch_depth,
                  "layers ahead to predict experts for, 0-2 (default: 1 with --nodes, 0 without)")
      ->check(CLI::Range(0, 2));
  cmd->add_option("--prefetch-count", o->prefetch_count,
                  "experts predicted per token (0: the model's top-k)")
      ->capture_default_str()
      ->check(colibri::cli::kExpertCount);
  cmd->add_option("--trace-routing", o->trace_routing, kTraceRoutingHelp);
}

// --draft, --draft-max, --draft-fixed and --no-grammar-drafts of run and serve.
void AddSpeculationFlags(CLI::App* cmd, colibri::coordinator::SpeculationOptions* o) {
  using colibri::coordinator::DraftKind;
  const std::map<std::string, DraftKind> kinds = {
      {"none", DraftKind::kNone}, {"ngram", DraftKind::kNgram}, {"mtp", DraftKind::kMtp}};
  cmd->add_option("--draft", o->draft,
                  "speculative decoding drafter: none, ngram (prompt lookup) or mtp (the "
                  "model's own NextN/MTP block, for files that carry one; it runs with its "
                  "routed experts on this process, also with --nodes); the output is the same "
                  "either way")
      ->transform(CLI::CheckedTransformer(kinds))
      ->type_name("none|ngram|mtp")
      ->default_str("none");
  cmd->add_option("--draft-max", o->draft_max, "most drafted tokens per verify step")
      ->capture_default_str()
      ->check(colibri::cli::kDraftTokens);
  cmd->add_flag("--draft-fixed{false}", o->adaptive,
                "always draft --draft-max tokens instead of adapting the length to the "
                "measured acceptance and cost");
  cmd->add_flag("--no-grammar-drafts{false}", o->grammar_drafts,
                "constrained (JSON schema) generations do not draft the tokens their grammar "
                "forces next (keys, punctuation); the output is the same either way");
}

// --nodes and the options every cluster command shares. For `serve`
// (node_prefix "node-") the TLS flags to the nodes are --node-tls-*, since
// --tls-cert/--tls-key are the server's own, and the token flags are serve's.
void AddClusterFlags(CLI::App* cmd, colibri::coordinator::ClusterCommandOptions* o,
                     const std::string& node_prefix = "") {
  CLI::Option* nodes =
      cmd->add_option("--nodes", o->nodes, "expert nodes host:port,... (none: experts run here)")
          ->delimiter(',')
          ->check(colibri::cli::ConnectAddress());
  CLI::Option* dns = cmd->add_option("--nodes-dns", o->nodes_dns,
                                     "NAME:PORT: every address NAME resolves to is an expert node")
                         ->excludes(nodes)
                         ->check(colibri::cli::ConnectAddress());
  cmd->add_option("--nodes-dns-interval", o->nodes_dns_interval_seconds,
                  "seconds between resolutions of --nodes-dns while serving")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 7 * 24 * 3600.0));
  cmd->add_option("--nodes-file", o->nodes_file,
                  "file with one expert node HOST:PORT per line (serve re-reads it on SIGHUP)")
      ->excludes(nodes)
      ->excludes(dns);
  cmd->add_option("--replicas", o->replicas, "copies of each expert on distinct nodes")
      ->capture_default_str()
      ->check(colibri::cli::kReplicaCount);
  const std::map<std::string, colibri::coordinator::ReplicaChoice> choices = {
      {"fastest", colibri::coordinator::ReplicaChoice::kFastest},
      {"balance", colibri::coordinator::ReplicaChoice::kBalance},
      {"primary", colibri::coordinator::ReplicaChoice::kPrimary}};
  cmd->add_option("--replica-choice", o->replica_choice,
                  "with --replicas above 1, which replica computes each expert of a layer: "
                  "fastest (the one expected to answer first, from each node's observed reply "
                  "times and the work already given it), balance (the one that evens out the "
                  "nodes' work, blind to their speed) or primary (always the first healthy one); "
                  "fastest and balance have nodes read experts they hold as secondaries too")
      ->transform(CLI::CheckedTransformer(choices))
      ->type_name("fastest|balance|primary")
      ->default_str("fastest");
  cmd->add_option("--deadline-factor", o->deadline_factor,
                  "a call to a node is late after this many times its observed high-percentile "
                  "reply time (at least --deadline-floor): the node is suspect and its work goes "
                  "to a replica or is computed here")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_option("--deadline-floor", o->deadline_floor_seconds,
                  "seconds a call to a node may always take before it is late")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
  cmd->add_option("--hedge-factor", o->hedge_factor,
                  "a call to a node not answered after this many times its observed "
                  "high-percentile reply time (at least --hedge-floor) has its work re-sent to "
                  "the experts' other copies; the first answer is taken")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1000.0));
  cmd->add_option("--hedge-floor", o->hedge_floor_seconds,
                  "seconds a call to a node may always take before it is hedged")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--hedge-budget", o->hedge_budget,
                  "most hedged calls per second (0: no hedging)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  if (node_prefix.empty()) {
    cmd->add_option("--auth-token-file", o->auth_token_file, "file holding the nodes' shared token");
  }
  cmd->add_option("--" + node_prefix + "tls-ca", o->tls_ca_file,
                  "PEM CA certificate: talk TLS to the nodes");
  cmd->add_option("--" + node_prefix + "tls-cert", o->tls_cert_file,
                  "PEM client certificate for the nodes");
  cmd->add_option("--" + node_prefix + "tls-key", o->tls_key_file,
                  "PEM key of --" + node_prefix + "tls-cert");
  cmd->add_option("--node-gguf", o->node_gguf,
                  "nodes import experts from this GGUF path on their own disks");
  cmd->add_option("--replace-after", o->replace_after_seconds,
                  "seconds a node may be away before its experts are re-placed (0: never)")
      ->capture_default_str()
      ->check(colibri::cli::kSeconds);
  cmd->add_option("--probe-interval", o->probe_interval_seconds,
                  "seconds between health probes of unhealthy nodes")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 3600.0));
}

// How activations travel to the nodes (run and serve).
void AddWireFlags(CLI::App* cmd, colibri::coordinator::WireOptions* o) {
  cmd->add_option_function<std::string>(
         "--wire-dtype",
         [o](const std::string& name) {
           absl::StatusOr<colibri::v1::DType> dtype = colibri::rpc::ParseWireDType(name);
           if (dtype.ok()) o->dtype = *dtype;
         },
         "activations to and from the nodes: f32 (default; results bitwise equal to a local "
         "run) or bf16 (half the bytes)")
      ->check(CLI::Validator(
          [](std::string& name) {
            absl::StatusOr<colibri::v1::DType> dtype = colibri::rpc::ParseWireDType(name);
            return dtype.ok() ? std::string() : std::string(dtype.status().message());
          },
          "f32|bf16"));
  cmd->add_flag("--wire-reduce", o->reduce,
                "nodes return one weighted sum per token instead of one row per route (fewer "
                "bytes; results equal a local run only up to float rounding)");
}

}  // namespace

int main(int argc, char** argv) {
  colibri::UseReleaseMutexMode();
  // Malformed requests (serve) and replies make libprotobuf log a line each.
  colibri::rpc::InstallRateLimitedProtobufLog("colibri-coordinator");
  CLI::App app{"colibri-coordinator: runs Mixture-of-Experts GGUF models"};
  app.require_subcommand(1);
  colibri::AddVersionFlag(&app, "colibri-coordinator");

  RunOptions run;
  std::string prompt_tokens;
  bool exact = false;
  CLI::App* run_cmd = app.add_subcommand("run", "one-shot generation or evaluation");
  AddRunFlags(run_cmd, &run, &prompt_tokens, &exact);
  AddClusterFlags(run_cmd, &run.cluster);
  AddWireFlags(run_cmd, &run.cluster.wire);
  AddSpeculationFlags(run_cmd, &run.speculation);

  colibri::coordinator::ServeOptions serve;
  CLI::App* serve_cmd = app.add_subcommand(
      "serve", "serve colibri.v1.Inference over gRPC and the OpenAI API over HTTP");
  serve_cmd->add_option("--model,-m", serve.model_path, "GGUF model file")->required();
  serve_cmd->add_option("--listen", serve.listen, "gRPC address (port 0: the OS picks one)")
      ->capture_default_str()
      ->check(colibri::cli::ListenAddress());
  serve_cmd->add_option("--http-listen", serve.http_listen,
                        "OpenAI-compatible HTTP API address HOST:PORT (port 0: the OS picks one)")
      ->check(colibri::cli::ListenAddress());
  serve_cmd->add_option("--health-listen", serve.health_listen,
                        "plaintext HOST:PORT of GET /healthz and /readyz for probes, open "
                        "without a token (default: off)")
      ->check(colibri::cli::ListenAddress());
  serve_cmd->add_flag("--health-metrics", serve.health_metrics,
                      "also serve GET /metrics on --health-listen, without a token (for "
                      "Prometheus scraping)");
  serve_cmd->add_option("--chat-template-file", serve.chat_template_file,
                        "Jinja chat template for the chat endpoints (default: the GGUF's, else "
                        "ChatML)");
  serve_cmd->add_option("--http-tls-cert", serve.http_tls_cert_file,
                        "PEM certificate chain of the HTTP API (HTTPS with --http-tls-key)");
  serve_cmd->add_option("--http-tls-key", serve.http_tls_key_file,
                        "PEM private key of the HTTP API");
  serve_cmd->add_option("--api-key-file", serve.api_key_file,
                        "file of the HTTP API's keys, one per line (then the API accepts these "
                        "and not the --auth-token-file token)");
  serve_cmd->add_option("--cors-origin", serve.cors_origins,
                        "origin (https://host[:port]) whose web pages may call the HTTP API; "
                        "repeatable; '*' for any (warned)")
      ->take_all();
  serve_cmd->add_option("--max-queued", serve.max_queued,
                        "generations waiting for a session at most; more get HTTP 429 with "
                        "Retry-After (gRPC RESOURCE_EXHAUSTED)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  serve_cmd->add_option("--http-threads", serve.http_threads,
                        "HTTP connection threads (0: 4 * --sessions + 4)")
      ->capture_default_str()
      ->check(colibri::cli::kThreadCount);
  serve_cmd->add_option("--threads,-t", serve.threads, "worker threads (0: physical cores)")
      ->capture_default_str()
      ->check(colibri::cli::kThreadCount);
  serve_cmd
      ->add_option("--ctx-size,-c", serve.ctx_size,
                   "context size (0: min(model, 4096); at most the model's)")
      ->capture_default_str()
      ->check(colibri::cli::kContextSize);
  serve_cmd->add_option("--batch-size,-b", serve.batch_size, "prompt tokens per batch")
      ->capture_default_str()
      ->check(colibri::cli::kBatchSize);
  serve_cmd
      ->add_option("--sessions", serve.sessions, "concurrent generations (more requests queue)")
      ->capture_default_str()
      ->check(colibri::cli::kSessionCount);
  serve_cmd->add_option("--tls-cert", serve.tls_cert_file,
                        "PEM certificate chain of this server (enables TLS)");
  serve_cmd->add_option("--tls-key", serve.tls_key_file, "PEM key of --tls-cert");
  serve_cmd->add_flag("--insecure", serve.insecure,
                      "allow listening beyond loopback without an auth token");
  serve_cmd->add_option("--auth-token-file", serve.auth_token_file,
                        "token clients must send; also sent to the nodes unless "
                        "--node-auth-token-file is given");
  serve_cmd->add_option("--node-auth-token-file", serve.node_auth_token_file,
                        "the nodes' token when it differs from --auth-token-file");
  serve_cmd->add_flag("--mmap", serve.keep_mapped, kMmapHelp);
  serve_cmd->add_flag("--gguf-order", serve.gguf_order, kGgufOrderHelp);
  AddKvTypeFlag(serve_cmd, &serve.kv_type);
  serve_cmd
      ->add_option("--kv-cache-size", serve.kv_cache_bytes,
                   "bytes of KV rows kept to reuse request prefixes (chat history, system "
                   "prompts) in later requests, least recently used evicted first; suffixes "
                   "K, M, G (binary); 0 turns reuse off")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("RAM/8");
  serve_cmd->add_option("--kv-cache-dir", serve.kv_cache_dir,
                        "directory where cached prefixes are also written (in the background, "
                        "one checksummed file per 16-token block), found again by later requests "
                        "and after a restart or crash; one serve per directory");
  serve_cmd
      ->add_option("--kv-cache-disk", serve.kv_cache_disk_bytes,
                   "bytes of files kept in --kv-cache-dir, least recently used removed first; "
                   "suffixes K, M, G (binary); 0 leaves the directory unused")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("min(4G, free/2)");
  serve_cmd->add_option("--prefetch-depth", serve.prefetch_depth,
                        "layers ahead to predict experts for, 0-2 (default: 1 with nodes, 0 "
                        "without)")
      ->check(CLI::Range(0, 2));
  serve_cmd
      ->add_option("--prefetch-count", serve.prefetch_count,
                   "experts predicted per token (0: the model's top-k)")
      ->capture_default_str()
      ->check(colibri::cli::kExpertCount);
  serve_cmd->add_option("--trace-routing", serve.trace_routing, kTraceRoutingHelp);
  {
    using colibri::arch::PipelineHalves;
    const std::map<std::string, PipelineHalves> halves = {
        {"auto", PipelineHalves::kAuto}, {"on", PipelineHalves::kOn}, {"off", PipelineHalves::kOff}};
    serve_cmd
        ->add_option("--pipeline-halves", serve.pipeline_halves,
                     "split each step's sequences into two halves pipelined against the expert "
                     "nodes: auto (with nodes, whichever is measured faster), on or off")
        ->transform(CLI::CheckedTransformer(halves))
        ->type_name("auto|on|off")
        ->default_str("auto");
  }
  AddClusterFlags(serve_cmd, &serve.cluster, "node-");
  serve.cluster.rebalance = true;
  serve_cmd
      ->add_flag("--rebalance,!--no-rebalance", serve.cluster.rebalance,
                 "with --nodes: copy the most used experts to the nodes that relieve the busiest "
                 "one most (fastest first, within their RAM budgets) and drop copies that stay "
                 "cold, in the background; a copy is used once its node holds it")
      ->default_str("on");
  serve_cmd
      ->add_option("--rebalance-interval", serve.cluster.rebalance_interval_seconds,
                   "seconds between --rebalance rounds")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 7 * 24 * 3600.0));
  serve_cmd
      ->add_option("--rebalance-bytes", serve.cluster.rebalance_bytes,
                   "most expert bytes one --rebalance round sends; suffixes K, M, G (binary)")
      ->transform(CLI::AsSizeValue(false))
      ->default_str("256M");
  AddSpeculationFlags(serve_cmd, &serve.speculation);
  AddWireFlags(serve_cmd, &serve.cluster.wire);

  colibri::coordinator::PlanOptions plan;
  CLI::App* plan_cmd = app.add_subcommand("plan", "where every expert would go (moves nothing)");
  plan_cmd->add_option("--model,-m", plan.model_path, "GGUF model file")->required();
  AddClusterFlags(plan_cmd, &plan.cluster);
  plan_cmd->add_flag("--assume-equal", plan.cluster.assume_equal,
                     "weigh nodes equally and do not contact them");
  bool plan_summary_only = false;
  plan_cmd->add_flag("--summary", plan_summary_only, "only the per-node totals");
  // --project: a throughput projection for a described cluster (no nodes needed).
  bool plan_project = false;
  colibri::coordinator::ProjectOptions project;
  double project_rtt_ms = 0.5;
  double project_ram_gib = 0;
  double project_call_overhead_ms = 0.3;
  plan_cmd->add_flag("--project", plan_project,
                     "project decode throughput for the cluster the --project-* flags describe");
  plan_cmd->add_option("--project-shape", project.shape,
                       "model shape to project instead of the model's own: deepseek-v3, kimi-k2, "
                       "qwen3-235b, glm-4.5, qwen3-30b, or layers=..,moe_layers=..,experts=..,"
                       "experts_used=..,embd=..,expert_mib=..,dense_gib=..");
  plan_cmd->add_option("--project-nodes", project.cluster.nodes, "expert nodes (0: none)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  plan_cmd->add_option("--project-rtt-ms", project_rtt_ms, "round trip to a node, ms")
      ->check(CLI::Range(0.0, 10000.0))
      ->capture_default_str();
  plan_cmd->add_option("--project-gbit", project.cluster.link_gbit,
                       "the coordinator's link, Gbit/s")
      ->check(CLI::Range(0.001, 10000.0))
      ->capture_default_str();
  plan_cmd->add_option("--project-node-threads", project.cluster.node_threads,
                       "threads per node (default: this machine's)")
      ->check(CLI::Range(1, 4096));
  plan_cmd->add_option("--project-ram-gib", project_ram_gib,
                       "RAM for experts per node, GiB (default: all fit)")
      ->check(CLI::Range(0.0, 1e6));
  plan_cmd->add_option("--project-node-mem-gbs", project.cluster.node_mem_gbs,
                       "memory bandwidth per node, GB/s (default: this machine's measured rate)")
      ->check(CLI::Range(0.0, 10000.0));
  plan_cmd->add_option("--project-coordinator-threads", project.cluster.coordinator_threads,
                       "threads of the coordinator's PC (default: this machine's)")
      ->check(CLI::Range(1, 4096));
  plan_cmd->add_option("--project-coordinator-mem-gbs", project.cluster.coordinator_mem_gbs,
                       "memory bandwidth of the coordinator's PC, GB/s (default: this machine's "
                       "measured rate)")
      ->check(CLI::Range(0.0, 10000.0));
  plan_cmd->add_flag("--project-grid", project.grid,
                     "one line per cluster of 3, 5, 8 nodes on 1, 2.5, 10 Gbit/s links");
  plan_cmd->add_option("--project-disk-gbs", project.cluster.disk_gbs,
                       "disk read rate per node, GB/s")
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  plan_cmd->add_option("--project-call-overhead-ms", project_call_overhead_ms,
                       "cost of one node call beyond the round trip, ms")
      ->check(CLI::Range(0.0, 10000.0))
      ->capture_default_str();
  plan_cmd->add_option("--project-drafts", project.drafts, "drafts per step in the speculation rows")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  plan_cmd->add_option("--project-acceptance", project.acceptance, "acceptance of each draft")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();

  InspectOptions inspect;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "describe a GGUF model file");
  inspect_cmd->add_option("--model,-m", inspect.model_path, "GGUF model file")->required();
  inspect_cmd->add_flag("--verbose,-v", inspect.verbose, "list every metadata key and tensor");

  colibri::coordinator::PerplexityOptions perplexity;
  bool perplexity_exact = false;
  CLI::App* perplexity_cmd =
      app.add_subcommand("perplexity", "mean next-token loss and perplexity over a text");
  perplexity_cmd->add_option("--model,-m", perplexity.model_path, "GGUF model file")->required();
  perplexity_cmd->add_option("--text-file", perplexity.text_file, "the text to score")->required();
  perplexity_cmd->add_option("--ctx", perplexity.ctx,
                             "tokens per window (0: the model's context, at most 512)")
      ->capture_default_str()
      ->check(colibri::cli::kContextSize);
  perplexity_cmd->add_option("--max-windows", perplexity.max_windows,
                             "score at most this many windows (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  perplexity_cmd->add_option("--threads,-t", perplexity.threads,
                             "worker threads (0: physical cores)")
      ->capture_default_str()
      ->check(colibri::cli::kThreadCount);
  AddKvTypeFlag(perplexity_cmd, &perplexity.kv_type);
  perplexity_cmd->add_flag("--exact", perplexity_exact,
                           "keep activations in float32 (the reference path)");

  colibri::coordinator::TokenizeOptions tokenize;
  CLI::App* tokenize_cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  tokenize_cmd->add_option("--model,-m", tokenize.model_path, "GGUF file (vocab-only is fine)")
      ->required();
  tokenize_cmd->add_option("--text", tokenize.text, "the text");
  tokenize_cmd->add_option("--text-file", tokenize.text_file, "file holding the text");
  tokenize_cmd->add_option("--separator", tokenize.separator,
                           "split the input on this string; one line of ids per piece");
  tokenize_cmd->add_flag("--add-special", tokenize.add_special, "add BOS/EOS as the vocab asks");
  tokenize_cmd->add_flag("--parse-special", tokenize.parse_special,
                         "recognise special-token text in the input");

  colibri::coordinator::DetokenizeOptions detokenize;
  std::string detokenize_ids;
  CLI::App* detokenize_cmd = app.add_subcommand("detokenize", "print the text of token ids");
  detokenize_cmd->add_option("--model,-m", detokenize.model_path, "GGUF file")->required();
  detokenize_cmd->add_option("--ids", detokenize_ids, "comma-separated token ids")->required();
  detokenize_cmd->add_flag("--render-special", detokenize.render_special,
                           "render control tokens as text");

  colibri::coordinator::ChatTemplateOptions chat_template;
  CLI::App* chat_template_cmd =
      app.add_subcommand("chat-template", "render a Jinja chat template for one conversation");
  chat_template_cmd->add_option("--template-file", chat_template.template_file, "Jinja template")
      ->required();
  chat_template_cmd
      ->add_option("--conversation-file", chat_template.conversation_file,
                   "JSON object with messages and optional tools")
      ->required();
  chat_template_cmd->add_flag("--add-generation-prompt", chat_template.add_generation_prompt,
                              "end with the assistant turn's opening");
  chat_template_cmd->add_option("--bos-token", chat_template.bos_token, "value of bos_token");
  chat_template_cmd->add_option("--eos-token", chat_template.eos_token, "value of eos_token");

  colibri::coordinator::SchemaCheckOptions schema_check;
  CLI::App* schema_check_cmd = app.add_subcommand(
      "schema-check",
      "compile JSON Schemas to token masks and check test instances (one JSON line per case)");
  schema_check_cmd
      ->add_option("--vocab", schema_check.vocab_path, "GGUF file with the vocabulary")
      ->required();
  schema_check_cmd
      ->add_option("cases", schema_check.case_files,
                   "case files: {\"schema\": ..., \"tests\": [{\"valid\": b, \"data\": v}]}")
      ->required();
  schema_check_cmd
      ->add_option("--max-ref-depth", schema_check.compile.max_ref_depth,
                   "expansions of a recursive $ref inside itself")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  schema_check_cmd
      ->add_option("--max-any-depth", schema_check.compile.max_any_depth,
                   "nesting of arrays and objects inside values of unconstrained schemas")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  schema_check_cmd->add_flag("--cpu-time", schema_check.cpu_time,
                             "time masks on the thread's CPU clock (not the wall clock)");
  schema_check_cmd->add_flag("--explain", schema_check.explain,
                             "say where each refused valid instance was refused");

  colibri::AddConfigFileOption(&app);
  if (const int code = colibri::cli::Parse(app, argc, argv); code >= 0) return code;

  // The environment's knobs, passed on to what each command builds.
  absl::StatusOr<colibri::ProcessKnobs> knobs = colibri::ReadProcessKnobs();
  absl::Status status = knobs.status();
  if (status.ok()) {
    status = colibri::ops::ConfigureKernelChoice({knobs->cpu_cap, knobs->cache_dir});
  }
  if (!status.ok()) {
    std::cerr << "error: " << status.message() << "\n";
    return 2;
  }
  run.spin_us = serve.spin_us = perplexity.spin_us = knobs->spin_us;
  run.cluster.cache_dir = serve.cluster.cache_dir = knobs->cache_dir;
  run.cluster.progress_in_place = serve.cluster.progress_in_place = colibri::StderrIsTerminal();

  if (serve_cmd->parsed()) {
    const sigset_t signals = colibri::BlockShutdownSignals();
    colibri::coordinator::BlockReloadSignal();
    serve.cluster.reload_on_sighup = true;
    status = colibri::coordinator::RunServe(
        serve, [&signals] { colibri::WaitForShutdownSignal(signals); }, std::cout, std::cerr);
  } else if (run_cmd->parsed()) {
    if (run_cmd->count("--prompt-tokens") > 0) {
      if (const std::string error = colibri::cli::ParseTokenIds(prompt_tokens, &run.prompt_tokens);
          !error.empty()) {
        std::cerr << "error: --prompt-tokens: " << error << "\n";
        return 2;
      }
      run.has_prompt_tokens = true;
    }
    if (exact) run.path = colibri::ops::NumericPath::kExact;
    status = colibri::coordinator::RunGenerate(run, std::cout, std::cerr);
  } else if (plan_cmd->parsed() && plan_project) {
    project.model_path = plan.model_path;
    project.cluster.rtt_seconds = project_rtt_ms / 1e3;
    project.cluster.node_ram_bytes = project_ram_gib * (1 << 30);
    project.cluster.replicas = plan.cluster.replicas;
    project.call_overhead_seconds = project_call_overhead_ms / 1e3;
    status = colibri::coordinator::RunProject(project, std::cout, std::cerr);
  } else if (plan_cmd->parsed()) {
    plan.list_experts = !plan_summary_only;
    status = colibri::coordinator::RunPlan(plan, std::cout);
  } else if (inspect_cmd->parsed()) {
    status = colibri::coordinator::RunInspect(inspect, std::cout);
  } else if (perplexity_cmd->parsed()) {
    if (perplexity_exact) perplexity.path = colibri::ops::NumericPath::kExact;
    status = colibri::coordinator::RunPerplexity(perplexity, std::cout, std::cerr);
  } else if (tokenize_cmd->parsed()) {
    tokenize.has_separator = tokenize_cmd->count("--separator") > 0;
    status = colibri::coordinator::RunTokenize(tokenize, std::cout);
  } else if (schema_check_cmd->parsed()) {
    status = colibri::coordinator::RunSchemaCheck(schema_check, std::cout, std::cerr);
  } else if (chat_template_cmd->parsed()) {
    status = colibri::coordinator::RunChatTemplate(chat_template, std::cout);
  } else if (detokenize_cmd->parsed()) {
    if (const std::string error = colibri::cli::ParseTokenIds(detokenize_ids, &detokenize.ids);
        !error.empty()) {
      std::cerr << "error: --ids: " << error << "\n";
      return 2;
    }
    status = colibri::coordinator::RunDetokenize(detokenize, std::cout);
  }
  if (!status.ok()) {
    std::cerr << "error: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
