// colibri-expert-node: serves colibri.v1.ExpertService from a RocksDB store
// with a RAM tier in front. Flags are read here only.
//
// Prints "listening on HOST:PORT" on stdout once serving (so scripts can pass
// --listen 127.0.0.1:0), logs significant events on stderr, and shuts down
// gracefully on SIGTERM / SIGINT.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/cli_checks.h"
#include "common/cli_config.h"
#include "common/mutex_mode.h"
#include "common/process_knobs.h"
#include "common/service_notify.h"
#include "common/shutdown_signals.h"
#include "common/status_macros.h"
#include "common/version_flag.h"
#include "expert_node/event_log.h"
#include "expert_node/expert_import.h"
#include "expert_node/model_registry.h"
#include "expert_node/node_config.h"
#include "expert_node/node_identity.h"
#include "expert_node/node_metrics.h"
#include "expert_node/node_server.h"
#include "expert_node/share_import.h"
#include "model/ops/matmul.h"
#include "expert_node/node_report.h"
#include "rpc/auth_token.h"
#include "rpc/probe_server.h"
#include "rpc/protobuf_log.h"
#include "rpc/server_support.h"

namespace {

using colibri::expert_node::ExpertImporter;
using colibri::expert_node::ExpertStore;
using colibri::expert_node::LogEvent;
using colibri::expert_node::ModelRegistry;
using colibri::expert_node::NodeServer;
using colibri::expert_node::OpenNodeStore;

// --import-gguf with --exit-after-import: the import on the node's store,
// with no server. Errors as OpenNodeStore and ExpertImporter::Import.
absl::Status ImportWithoutServing(const NodeServer::Options& options,
                                  const colibri::v1::ImportRequest& request) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store, OpenNodeStore(options));
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<ModelRegistry> registry,
                           ModelRegistry::Load(store.get()));
  ExpertImporter::Options import_options;
  import_options.progress_interval = options.service.progress_interval;
  ExpertImporter importer(import_options, store.get(), registry.get());
  colibri::v1::ImportReply reply;
  return importer.Import(request, &reply);
}

}  // namespace

int main(int argc, char** argv) {
  colibri::UseReleaseMutexMode();
  // Expert buffers do not come from malloc (BlobBufferPool maps and recycles
  // them). What still goes through malloc in megabytes is RocksDB's transient
  // buffers of each read (an expert's size, freed before Get returns). Keep
  // those in the heap (mmap threshold above any expert) and keep up to 64 MiB
  // free at an arena's top instead of trimming it: trimming would make every
  // read fault its buffers in afresh (docs/benchmarks.md). Setting the
  // thresholds also stops glibc from raising them on its own.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  colibri::rpc::InstallRateLimitedProtobufLog("colibri-expert-node");
  CLI::App app{"colibri-expert-node: holds routed experts and computes them for a coordinator"};
  colibri::AddVersionFlag(&app, "colibri-expert-node");
  NodeServer::Options options;
  std::string ram_budget = "1G";
  std::string disk_budget = "0";
  std::string pin_budget = "0";
  std::string free_buffers = "32M";
  std::string io_engine = "auto";
  int prefetch_protect_ms = static_cast<int>(
      absl::ToInt64Milliseconds(options.ram.prefetch_protection));
  std::string auth_token_file;
  std::string import_gguf;
  double ingest_idle_seconds = absl::ToDoubleSeconds(options.service.ingest_idle_timeout);
  std::string metrics_listen;
  int threads = 0;
  app.add_option("--listen", options.listen, "gRPC address, e.g. 127.0.0.1:0 or 0.0.0.0:7070")
      ->capture_default_str()
      ->check(colibri::cli::ListenAddress());
  app.add_option("--data-dir", options.store.data_dir, "RocksDB folder of the stored experts")
      ->required();
  app.add_option("--ram-budget", ram_budget, "RAM tier budget in bytes (suffixes K, M, G, T)")
      ->capture_default_str();
  app.add_option("--disk-budget", disk_budget,
                 "disk capacity reported for placement (0: unknown)")
      ->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: physical cores)")
      ->capture_default_str()
      ->check(colibri::cli::kThreadCount);
  app.add_option("--auth-token-file", auth_token_file,
                 "file holding the bearer token every call must carry");
  app.add_option("--node-id", options.service.node_id, "name in placement, inventory and stats (default: recorded in DATA_DIR/NODE_ID, "
                 "created as HOSTNAME-RANDOM on first start)");
  app.add_option("--advertise", options.service.advertise_address,
                 "HOST:PORT others should dial when it is not --listen (reported to the "
                 "coordinator)")
      ->check(CLI::Validator(
          [](std::string& value) {
            return std::string(colibri::expert_node::ValidateAdvertiseAddress(value).message());
          },
          "HOST:PORT", "advertise"));
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT of GET /metrics (Prometheus text); same token/--insecure rule "
                 "as --listen (default: off)")
      ->check(colibri::cli::ListenAddress());
  std::string health_listen;
  bool health_metrics = false;
  app.add_option("--health-listen", health_listen,
                 "plaintext HOST:PORT of GET /healthz and /readyz for probes (200 once the "
                 "store is open and the node serves), open without a token (default: off)")
      ->check(colibri::cli::ListenAddress());
  app.add_flag("--health-metrics", health_metrics,
               "also serve GET /metrics on --health-listen, without a token (for Prometheus "
               "scraping)");
  app.add_option("--tls-cert", options.tls_cert_file, "PEM certificate chain (enables TLS)");
  app.add_option("--tls-key", options.tls_key_file, "PEM private key");
  app.add_option("--tls-ca", options.tls_ca_file, "PEM CA: require and verify client certificates");
  app.add_flag("--insecure", options.insecure,
               "allow listening beyond loopback without an auth token");
  options.warm_ram = true;
  app.add_flag("--warm-ram,!--no-warm-ram", options.warm_ram,
               "fill the RAM tier's free room from disk in the background after start-up and "
               "after experts are ingested or imported (most used first; evicts nothing)")
      ->capture_default_str();
  app.add_flag("--direct-io", options.store.direct_reads,
               "read experts with O_DIRECT (bypass the page cache)");
  app.add_option("--io-engine", io_engine,
                 "how experts are read from disk: io_uring, threads (pread pool), or auto "
                 "(io_uring when the kernel and the container allow it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "io_uring", "threads"}));
  app.add_option("--io-depth", options.store.read_queue.depth,
                 "expert reads in flight at most (a layer's misses and prefetches together)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--background-reads", options.store.read_queue.background_depth,
                 "prefetch reads in flight at most; demand reads (a request's misses) always "
                 "start first, behind at most this many prefetch reads")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_flag("--background-idle,!--no-background-idle",
               options.store.read_queue.background_idle_class,
               "prefetch reads carry the idle I/O priority class (io_uring), so that the "
               "kernel's I/O scheduler serves other reads of the disk first")
      ->capture_default_str();
  app.add_option("--io-threads", options.service.io_threads,
                 "threads loading prefetch hints from disk")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--prefetch-queue", options.service.prefetch_queue_limit,
                 "prefetch hints waiting at most; more are dropped")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--prefetch-protect-ms", prefetch_protect_ms,
                 "ms a prefetched, unused expert is protected from eviction")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600 * 1000));
  std::string ram_policy = "adaptive";
  app.add_option("--ram-policy", ram_policy,
                 "which resident expert the RAM tier evicts first: adaptive (expected next use "
                 "from decayed use counts, recency and hints) or lru")
      ->capture_default_str()
      ->check(CLI::IsMember({"adaptive", "lru"}));
  app.add_option("--prefetch-cost", options.ram.prefetch_cost,
                 "a prefetch's disk read relative to a demand miss: a prefetch is issued only "
                 "when its hint's measured precision exceeds this plus the use probability of "
                 "what it would evict (negative: always)")
      ->capture_default_str();
  app.add_option("--pin-budget", pin_budget,
                 "bytes of the most used experts to load and keep resident at start-up "
                 "(<= --ram-budget)")
      ->capture_default_str();
  app.add_option("--free-buffers", free_buffers,
                 "bytes of freed expert buffers kept for reuse by later loads")
      ->capture_default_str();
  app.add_option("--ingest-idle-timeout", ingest_idle_seconds,
                 "seconds an Ingest stream may send nothing before the node ends it "
                 "(DEADLINE_EXCEEDED; its partial expert is not stored)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 24 * 3600.0));
  app.add_option("--max-batch-tokens", options.service.max_batch_tokens,
                 "tokens one ComputeLayer request may carry (>= the coordinators' --batch-size); "
                 "sets that method's request size cap")
      ->capture_default_str()
      ->check(colibri::cli::kBatchSize);
  app.add_option("--import-gguf", import_gguf,
                 "import every expert of this GGUF file at start-up (skips stored ones)");
  std::vector<std::string> import_share_of;
  int import_replicas = 1;
  bool exit_after_import = false;
  app.add_option("--import-share-of", import_share_of,
                 "with --import-gguf: import only this node's rendezvous share among these node "
                 "ids (id,id,...; equal weights)")
      ->delimiter(',');
  app.add_option("--import-replicas", import_replicas,
                 "copies of each expert for --import-share-of")
      ->capture_default_str()
      ->check(colibri::cli::kReplicaCount);
  app.add_flag("--exit-after-import", exit_after_import,
               "with --import-gguf: import without serving, then exit (an init step)");
  app.add_flag("--repair", options.repair_damaged_store,
               "if the store is damaged: let RocksDB repair it, then verify every expert "
               "(what fails is dropped and re-sent by the coordinator)");
  app.add_flag("--reset-store", options.reset_damaged_store,
               "if the store is (still) damaged: move it aside to DATA_DIR.damaged-TIME (never "
               "deleted) and start empty; the coordinator re-sends the experts");
  colibri::AddConfigFileOption(&app);
  if (const int code = colibri::cli::Parse(app, argc, argv); code >= 0) return code;

  // The environment's knobs, passed on to the kernels and the matmul pool.
  absl::StatusOr<colibri::ProcessKnobs> knobs = colibri::ReadProcessKnobs();
  absl::Status knobs_status = knobs.status();
  if (knobs_status.ok()) {
    knobs_status = colibri::ops::ConfigureKernelChoice({knobs->cpu_cap, knobs->cache_dir});
  }
  if (!knobs_status.ok()) {
    std::cerr << "colibri-expert-node: " << knobs_status.message() << "\n";
    return 2;
  }
  options.service.compute_spin_us = knobs->spin_us;

  absl::StatusOr<uint64_t> ram = colibri::expert_node::ParseByteSize(ram_budget);
  absl::StatusOr<uint64_t> disk = colibri::expert_node::ParseByteSize(disk_budget);
  absl::StatusOr<uint64_t> pin = colibri::expert_node::ParseByteSize(pin_budget);
  absl::StatusOr<uint64_t> free_bytes = colibri::expert_node::ParseByteSize(free_buffers);
  for (const auto* size : {&ram, &disk, &pin, &free_bytes}) {
    if (!size->ok()) {
      std::cerr << "colibri-expert-node: " << size->status().message() << "\n";
      return 2;
    }
  }
  if (*pin > *ram) {
    std::cerr << "colibri-expert-node: --pin-budget " << pin_budget << " exceeds --ram-budget "
              << ram_budget << "\n";
    return 2;
  }
  options.store.read_queue.engine = *colibri::expert_node::ParseEngine(io_engine);  // checked above
  options.ram.budget_bytes = *ram;
  options.pin_budget_bytes = *pin;
  options.buffer_pool.max_free_bytes = *free_bytes;
  options.ram.prefetch_protection = absl::Milliseconds(prefetch_protect_ms);
  options.ram.policy = *colibri::expert_node::ParseCachePolicyKind(ram_policy);
  options.service.disk_budget_bytes = *disk;
  options.service.compute_threads = threads;
  options.service.ingest_idle_timeout = absl::Seconds(ingest_idle_seconds);
  if (!options.service.node_id.empty()) {
    if (absl::Status valid = colibri::expert_node::ValidateNodeId(options.service.node_id);
        !valid.ok()) {
      std::cerr << "colibri-expert-node: --node-id: " << valid.message() << "\n";
      return 2;
    }
  }
  if (options.service.node_id.empty()) {
    absl::StatusOr<std::string> id =
        colibri::expert_node::LoadOrCreateNodeId(options.store.data_dir);
    if (!id.ok()) {
      std::cerr << "colibri-expert-node: " << id.status().message() << "\n";
      return 1;
    }
    options.service.node_id = *id;
  }
  if (!auth_token_file.empty()) {
    absl::StatusOr<std::string> token = colibri::rpc::ReadTokenFile(auth_token_file);
    if (!token.ok()) {
      std::cerr << "colibri-expert-node: " << token.status().message() << "\n";
      return 2;
    }
    options.service.auth_token = *token;
  }

  const sigset_t signals = colibri::BlockShutdownSignals();

  const bool outside_share =
      !import_share_of.empty() && std::find(import_share_of.begin(), import_share_of.end(),
                                            options.service.node_id) == import_share_of.end();
  if (outside_share) {
    // A pod added by scaling before the id list was updated: the coordinator
    // places its share once it joins.
    LogEvent(absl::StrCat("node ", options.service.node_id,
                          " is not among --import-share-of: importing nothing"));
  }
  const bool importing = !import_gguf.empty() && !outside_share;
  colibri::v1::ImportRequest import_request;
  import_request.set_gguf_path(import_gguf);
  if (importing && !import_share_of.empty()) {
    absl::StatusOr<colibri::v1::ImportRequest> share = colibri::expert_node::ShareImportRequest(
        import_gguf, import_share_of, options.service.node_id, import_replicas);
    if (!share.ok()) {
      LogEvent(absl::StrCat("import of ", import_gguf, " failed: ", share.status().message()));
      return 1;
    }
    import_request = *std::move(share);
  }
  if (!import_gguf.empty() && exit_after_import) {
    if (importing) {
      if (absl::Status s = ImportWithoutServing(options, import_request); !s.ok()) {
        LogEvent(absl::StrCat("import of ", import_gguf, " failed: ", s.message()));
        return 1;
      }
    }
    LogEvent("import done, exiting (--exit-after-import)");
    return 0;
  }

  if (health_metrics && health_listen.empty()) {
    std::cerr << "colibri-expert-node: --health-metrics needs --health-listen\n";
    return 2;
  }
  // Probes see "starting" while the store opens (a large or damaged store
  // takes a while).
  std::unique_ptr<colibri::rpc::ProbeServer> probes;
  if (!health_listen.empty()) {
    colibri::rpc::ProbeServer::Options probe_options;
    probe_options.listen = health_listen;
    probe_options.metrics = health_metrics;
    absl::StatusOr<std::unique_ptr<colibri::rpc::ProbeServer>> started =
        colibri::rpc::ProbeServer::Start(probe_options);
    if (!started.ok()) {
      std::cerr << "colibri-expert-node: " << started.status().message() << "\n";
      return 1;
    }
    probes = *std::move(started);
  }
  absl::StatusOr<std::unique_ptr<NodeServer>> server = NodeServer::Start(options);
  if (!server.ok()) {
    std::cerr << "colibri-expert-node: " << server.status().message() << "\n";
    return 1;
  }
  // The gRPC line first: scripts and tests read the first "listening on".
  std::printf("listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  std::unique_ptr<colibri::expert_node::NodeMetricsServer> metrics;
  if (!metrics_listen.empty()) {
    colibri::expert_node::NodeMetricsServer::Options metrics_options;
    metrics_options.listen = metrics_listen;
    metrics_options.auth_token = options.service.auth_token;
    metrics_options.insecure = options.insecure;
    absl::StatusOr<std::unique_ptr<colibri::expert_node::NodeMetricsServer>> started =
        colibri::expert_node::NodeMetricsServer::Start(metrics_options,
                                                       (*server)->service()->report());
    if (!started.ok()) {
      std::cerr << "colibri-expert-node: " << started.status().message() << "\n";
      (*server)->Shutdown(absl::Seconds(1));
      return 1;
    }
    metrics = std::move(*started);
    std::printf("metrics listening on %s\n", metrics->address().c_str());
    std::fflush(stdout);
  }

  if (probes != nullptr) {
    const colibri::expert_node::NodeReport* report = (*server)->service()->report();
    probes->MarkStarted(nullptr, [report] { return colibri::expert_node::RenderNodeReport(*report); });
    std::printf("health listening on %s\n", probes->address().c_str());
    std::fflush(stdout);
  }

  LogEvent(absl::StrCat("started: node ", options.service.node_id, " on ", (*server)->address(),
                        ", data ", options.store.data_dir, ", ", (*server)->store()->experts_stored(),
                        " experts stored, RAM budget ", options.ram.budget_bytes, " bytes",
                        ", pinned ", (*server)->ram_tier()->counters().pinned_experts, " experts",
                        options.store.direct_reads ? ", direct I/O" : "", ", reads by ",
                        colibri::expert_node::EngineName((*server)->store()->read_engine()),
                        " at depth ", options.store.read_queue.depth,
                        options.service.auth_token.empty() ? ", no auth" : ", token auth",
                        options.tls_cert_file.empty() ? "" : ", TLS"));
  if (!options.service.advertise_address.empty()) {
    LogEvent(absl::StrCat("advertised as ", options.service.advertise_address));
  }
  // Type=notify units: started once the store is open and the node serves.
  if (absl::Status notified = colibri::NotifyServiceReady(
          absl::StrCat("serving on ", (*server)->address(), ", ",
                       (*server)->store()->experts_stored(), " experts stored"));
      !notified.ok()) {
    LogEvent(std::string(notified.message()));
  }

  if (importing) {
    // While serving: the node answers (and the warm-up fills RAM) meanwhile.
    colibri::v1::ImportReply reply;
    absl::Status s = (*server)->service()->importer()->Import(import_request, &reply);
    if (!s.ok()) {
      LogEvent(absl::StrCat("import of ", import_gguf, " failed: ", s.message()));
      (*server)->Shutdown(absl::Seconds(1));
      return 1;
    }
  }

  const int signal_number = colibri::WaitForShutdownSignal(signals);
  LogEvent(absl::StrCat("signal ", signal_number, ": shutting down"));
  colibri::NotifyServiceStopping("shutting down").IgnoreError();
  if (const auto* pool = (*server)->store()->buffer_pool(); pool != nullptr) {
    const colibri::expert_node::BlobBufferPool::Counters b = pool->counters();
    LogEvent(absl::StrCat("expert buffers: ", b.allocations, " allocated, ", b.reuses,
                          " reused, ", b.releases, " released, peak free ", b.peak_free_bytes,
                          " bytes"));
  }
  if (metrics != nullptr) metrics->Stop();
  if (probes != nullptr) probes->Stop();
  (*server)->Shutdown(absl::Seconds(5));
  LogEvent("stopped");
  return 0;
}
