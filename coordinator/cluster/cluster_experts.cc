#include "coordinator/cluster/cluster_experts.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/api/model_summary.h"
#include "coordinator/cluster/node_discovery.h"
#include "model/gguf/gguf_fingerprint.h"
#include "rpc/auth_token.h"
#include "rpc/wire_tensor.h"

namespace colibri::coordinator {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " file ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<ClusterOptions> MakeClusterOptions(const ClusterCommandOptions& options) {
  ClusterOptions out;
  out.addresses = options.nodes;
  if (!options.nodes.empty() + !options.nodes_dns.empty() + !options.nodes_file.empty() > 1) {
    return absl::InvalidArgumentError("give one of --nodes, --nodes-dns and --nodes-file");
  }
  if (!options.nodes_dns.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(out.addresses, ResolveNodeAddresses(options.nodes_dns));
  }
  if (!options.nodes_file.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(out.addresses, ReadNodesFile(options.nodes_file));
  }
  out.replicas = options.replicas;
  out.replica_choice = options.replica_choice;
  out.deadline_factor = options.deadline_factor;
  out.deadline_floor = absl::Seconds(options.deadline_floor_seconds);
  out.hedge_factor = options.hedge_factor;
  out.hedge_floor = absl::Seconds(options.hedge_floor_seconds);
  out.hedge_budget = options.hedge_budget;
  out.assume_equal = options.assume_equal;
  if (options.replicas < 1) return absl::InvalidArgumentError("--replicas must be >= 1");
  out.replace_after = options.replace_after_seconds > 0
                          ? absl::Seconds(options.replace_after_seconds)
                          : absl::InfiniteDuration();
  if (!(options.probe_interval_seconds > 0)) {
    return absl::InvalidArgumentError("--probe-interval must be > 0");
  }
  out.probe_interval = absl::Seconds(options.probe_interval_seconds);
  if (!options.auth_token_file.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(out.client.auth_token, rpc::ReadTokenFile(options.auth_token_file));
  }
  if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty()) {
    out.client.use_tls = true;
    if (!options.tls_ca_file.empty()) {
      COLIBRI_ASSIGN_OR_RETURN(out.client.tls_ca_pem, ReadFile(options.tls_ca_file, "TLS CA"));
    }
    if (!options.tls_cert_file.empty()) {
      COLIBRI_ASSIGN_OR_RETURN(out.client.tls_cert_pem,
                               ReadFile(options.tls_cert_file, "TLS certificate"));
    }
    if (!options.tls_key_file.empty()) {
      COLIBRI_ASSIGN_OR_RETURN(out.client.tls_key_pem, ReadFile(options.tls_key_file, "TLS key"));
    }
  }
  return out;
}

namespace {

// Keeps the expert hashes for the next start; a failure only costs that
// start the hashing, so it is reported and ignored.
// Saves the expert hash cache; on failure, the line that says so (else "").
std::string SaveChecksums(ExpertChecksums& checksums) {
  const absl::Status s = checksums.Save();
  if (s.ok()) return "";
  return absl::StrCat("expert hash cache not saved (the next start hashes the experts again): ",
                      s.message());
}

}  // namespace

std::vector<int> ExpertsPerLayer(const arch::Model& model) {
  std::vector<int> out;
  for (const auto& layer : model.experts()) out.push_back(static_cast<int>(layer.size()));
  return out;
}

absl::StatusOr<std::unique_ptr<ClusterExperts>> ClusterExperts::Start(
    const ClusterCommandOptions& options, const arch::Model& model, ThreadPool* pool,
    std::ostream& err) {
  if (rpc::WireElementBytes(options.wire.dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "wire dtype ", rpc::WireDTypeName(options.wire.dtype), " is not one of f32, bf16"));
  }
  COLIBRI_ASSIGN_OR_RETURN(ClusterOptions cluster_options, MakeClusterOptions(options));
  cluster_options.log = &err;
  COLIBRI_ASSIGN_OR_RETURN(std::string fingerprint, gguf::ModelFingerprint(model.file()));
  std::unique_ptr<ClusterExperts> experts(new ClusterExperts());
  experts->model_ = &model;
  experts->pool_ = pool;
  experts->start_addresses_ = cluster_options.addresses;
  experts->wire_ = options.wire;
  COLIBRI_ASSIGN_OR_RETURN(experts->cluster_,
                           Cluster::Connect(cluster_options, fingerprint, ExpertsPerLayer(model)));
  experts->checksums_ = std::make_unique<ExpertChecksums>(options.cache_dir, &model, fingerprint);
  ExpertSetupOptions setup;
  setup.node_gguf_path = options.node_gguf;
  setup.progress = &err;
  setup.progress_in_place = options.progress_in_place;
  setup.skip_failed_nodes = true;
  setup.checksums = experts->checksums_.get();
  COLIBRI_ASSIGN_OR_RETURN(ExpertSetupResult result,
                           EnsureExperts(*experts->cluster_, model, setup));
  if (const std::string line = SaveChecksums(*experts->checksums_); !line.empty()) {
    err << line << "\n";
  }
  if (experts->checksums_->hits() + experts->checksums_->computed() > 0) {
    err << "expert hashes: " << experts->checksums_->hits() << " read from "
        << (experts->checksums_->path().empty() ? "(no cache)" : experts->checksums_->path())
        << ", " << experts->checksums_->computed() << " computed\n";
  }
  // A node lost during the transfer does not stop the start-up: it is marked
  // unhealthy (its work goes to a replica or is computed here), and once it
  // answers again the repair path re-sends what it misses.
  for (const auto& [node, why] : result.failed_nodes) {
    experts->cluster_->MarkUnhealthy(node, why);
    err << "ingest: " << experts->cluster_->node(node).address << " failed (" << why.message()
        << "); going on without it until it is back\n";
  }
  err << "ingest: " << result.bytes_sent << " bytes sent (" << result.experts_sent << " experts), "
      << result.experts_imported << " experts imported\n";
  ReleaseExpertPages(model);
  // Re-placement streams (or has nodes import) the moved experts, then drops
  // the pages that reading them brought in.
  Cluster* cluster = experts->cluster_.get();
  ExpertSetupOptions replace = setup;
  replace.refresh_inventory = true;
  replace.skip_failed_nodes = false;
  replace.cancelled = [cluster] { return cluster->stopping(); };
  ExpertChecksums* checksums = experts->checksums_.get();
  cluster->SetRebalancer([cluster, &model, replace, checksums](const Placement& placement) {
    absl::StatusOr<ExpertSetupResult> moved = EnsureExperts(*cluster, placement, model, replace);
    ReleaseExpertPages(model);
    // On the rebalancer's thread: whole lines through the cluster's log.
    if (const std::string line = SaveChecksums(*checksums); !line.empty()) cluster->Log(line);
    if (!moved.ok()) return moved.status();
    cluster->RecordMovedBytes(static_cast<int64_t>(moved->bytes_sent));
    cluster->Log(absl::StrCat("re-placement: ", moved->bytes_sent, " bytes sent (",
                              moved->experts_sent, " experts), ", moved->experts_imported,
                              " experts imported"));
    return absl::OkStatus();
  });
  return experts;
}

absl::Status ClusterExperts::WatchMembership(const ClusterCommandOptions& options,
                                             std::ostream& err) {
  if (options.nodes_dns.empty() && options.nodes_file.empty()) return absl::OkStatus();
  MembershipWatcherOptions watch;
  watch.nodes_dns = options.nodes_dns;
  watch.dns_interval = absl::Seconds(options.nodes_dns_interval_seconds);
  watch.nodes_file = options.nodes_file;
  watch.reload_on_sighup = options.reload_on_sighup;
  watch.log = &err;
  Cluster* cluster = cluster_.get();
  COLIBRI_ASSIGN_OR_RETURN(
      watcher_, MembershipWatcher::Start(watch, start_addresses_,
                                         [cluster](const std::vector<std::string>& addresses) {
                                           return cluster->SetMembers(addresses);
                                         }));
  return absl::OkStatus();
}

absl::Status ClusterExperts::StartRebalancing(const ClusterCommandOptions& options,
                                              HotExpertRebalancer::UseSource use,
                                              std::ostream& err) {
  if (!options.rebalance || hot_ != nullptr) return absl::OkStatus();
  if (!(options.rebalance_interval_seconds > 0) || options.rebalance_bytes < 0) {
    return absl::InvalidArgumentError(
        "--rebalance-interval must be > 0 and --rebalance-bytes >= 0");
  }
  std::vector<int64_t> expert_bytes;
  for (const auto& layer : model_->experts()) {
    expert_bytes.push_back(layer.empty() ? 0 : static_cast<int64_t>(ExpertBytes(layer[0])));
  }
  HotExpertRebalancerOptions hot;
  hot.interval = absl::Seconds(options.rebalance_interval_seconds);
  hot.max_bytes_per_round = options.rebalance_bytes;
  hot_ = std::make_unique<HotExpertRebalancer>(hot, cluster_.get(), std::move(expert_bytes),
                                               std::move(use));
  hot_->Start();
  err << absl::StrFormat(
      "serve: hot-expert replication every %.3g s, at most %d bytes per round (--rebalance)\n",
      options.rebalance_interval_seconds, options.rebalance_bytes);
  return absl::OkStatus();
}

RemoteExpertBackend* ClusterExperts::Backend(ops::NumericPath path) {
  std::unique_ptr<RemoteExpertBackend>& backend = backends_[path == ops::NumericPath::kExact];
  if (backend == nullptr) {
    backend = std::make_unique<RemoteExpertBackend>(cluster_.get(), &model_->experts(),
                                                    model_->config().n_expert, path, pool_, wire_);
  }
  return backend.get();
}

RemoteBackendStats ClusterExperts::BackendTotals() const {
  RemoteBackendStats total;
  for (const auto& backend : backends_) {
    if (backend != nullptr) total += backend->stats();
  }
  return total;
}

std::vector<LayerNodeStats> ClusterExperts::LayerTotals() const {
  std::vector<LayerNodeStats> total;
  for (const auto& backend : backends_) {
    if (backend == nullptr) continue;
    const std::vector<LayerNodeStats> s = backend->layer_stats();
    if (s.size() > total.size()) total.resize(s.size());
    for (size_t l = 0; l < s.size(); ++l) total[l] += s[l];
  }
  return total;
}

namespace {

absl::StatusOr<v1::NodeStatsReply> TierStats(Cluster& cluster, int node) {
  std::shared_ptr<NodeClient> client = cluster.client(node);
  if (!cluster.healthy(node) || client == nullptr) return absl::UnavailableError("unhealthy");
  return client->NodeStats();
}

}  // namespace

void ClusterExperts::MarkPromptDone() {
  at_prompt_done_ = BackendTotals();
  layers_at_prompt_done_ = LayerTotals();
  tiers_at_prompt_done_.clear();
  for (int i = 0; i < cluster_->n_nodes(); ++i) {
    tiers_at_prompt_done_.push_back(TierStats(*cluster_, i));
  }
}

void ClusterExperts::PrintStats(std::ostream& err, int64_t decode_tokens) const {
  for (int i = 0; i < cluster_->n_nodes(); ++i) {
    const NodeCounters c = cluster_->counters(i);
    const LatencyEstimate l = cluster_->latency(i);
    err << absl::StrFormat(
        "node %s: requests=%d failures=%d deadline_misses=%d failovers=%d bytes_sent=%d "
        "bytes_received=%d wait_s=%.3f node_s=%.3f healthy=%d\n",
        cluster_->node(i).address, c.requests, c.failures, c.deadline_misses, c.failovers,
        c.bytes_sent, c.bytes_received, c.wait_seconds, c.node_seconds,
        cluster_->healthy(i) ? 1 : 0);
    err << absl::StrFormat(
        "node %s latency: wait_ewma_ms=%.3f wait_p95_ms=%.3f network_ewma_ms=%.3f "
        "network_p95_ms=%.3f work_us_per_unit=%.3f\n",
        cluster_->node(i).address, 1e3 * l.wait_ewma, 1e3 * l.wait_high, 1e3 * l.network_ewma,
        1e3 * l.network_high, 1e6 * l.seconds_per_work_ewma);
  }
  {
    // The busiest node against the mean of those not retired: what a layer
    // waits for when the work is uneven.
    int64_t max = 0;
    int64_t sum = 0;
    int n = 0;
    for (int i = 0; i < cluster_->n_nodes(); ++i) {
      if (cluster_->retired(i)) continue;
      const int64_t w = cluster_->counters(i).work_units;
      max = std::max(max, w);
      sum += w;
      ++n;
    }
    const double mean = n > 0 ? static_cast<double>(sum) / n : 0.0;
    err << absl::StrFormat("node work: units_max=%d units_mean=%.1f max_over_mean=%.3f\n", max,
                           mean, mean > 0 ? static_cast<double>(max) / mean : 0.0);
  }
  {
    const Cluster::ExtraCopyCounters x = cluster_->extra_copy_counters();
    if (x.added + x.dropped + x.moved_bytes > 0 || hot_ != nullptr) {
      err << absl::StrFormat("extra copies: added=%d dropped=%d moved_bytes=%d in_force=%d\n",
                             x.added, x.dropped, x.moved_bytes,
                             cluster_->placement().AllExtras().size());
    }
  }
  const RemoteBackendStats s = BackendTotals();
  err << absl::StrFormat(
      "experts: layers=%d round_trips=%d involved_nodes=%d hedges=%d hedge_wins=%d "
      "hedge_wasted_bytes=%d failovers=%d fallback_routes=%d\n",
      s.layers, s.round_trips, s.involved_nodes, s.hedges, s.hedge_wins, s.hedge_wasted_bytes,
      s.failovers, s.fallback_routes);
  const RemoteBackendStats& p = at_prompt_done_;
  err << absl::StrFormat(
      "experts decode: layers=%d round_trips=%d involved_nodes=%d hedges=%d hedge_wins=%d "
      "hedge_wasted_bytes=%d failovers=%d fallback_routes=%d\n",
      s.layers - p.layers, s.round_trips - p.round_trips, s.involved_nodes - p.involved_nodes,
      s.hedges - p.hedges, s.hedge_wins - p.hedge_wins,
      s.hedge_wasted_bytes - p.hedge_wasted_bytes, s.failovers - p.failovers,
      s.fallback_routes - p.fallback_routes);
  err << absl::StrFormat(
      "wire: dtype=%s reduce=%d bytes_sent=%d bytes_received=%d payload_sent=%d "
      "payload_received=%d floor_bytes=%d\n",
      rpc::WireDTypeName(wire_.dtype), wire_.reduce ? 1 : 0, s.bytes_sent, s.bytes_received,
      s.payload_sent, s.payload_received, s.floor_bytes);
  {
    const int64_t sent = s.bytes_sent - p.bytes_sent;
    const int64_t received = s.bytes_received - p.bytes_received;
    const int64_t bytes = sent + received;
    const int64_t floor = s.floor_bytes - p.floor_bytes;
    const double per = decode_tokens > 0 ? 1.0 / static_cast<double>(decode_tokens) : 0.0;
    err << absl::StrFormat(
        "wire decode: tokens=%d bytes_sent=%d bytes_received=%d payload_sent=%d "
        "payload_received=%d floor_bytes=%d bytes_per_token=%.0f floor_per_token=%.0f "
        "bytes_over_floor=%.3f\n",
        decode_tokens, sent, received, s.payload_sent - p.payload_sent,
        s.payload_received - p.payload_received, floor, bytes * per, floor * per,
        floor > 0 ? static_cast<double>(bytes) / static_cast<double>(floor) : 0.0);
  }
  if (s.hints_riding + s.hints_separate + s.hints_dropped > 0) {
    err << absl::StrFormat("prefetch hints: riding=%d separate=%d dropped=%d prefetch_calls=%d\n",
                           s.hints_riding, s.hints_separate, s.hints_dropped, s.prefetch_calls);
  }
  for (int i = 0; i < static_cast<int>(tiers_at_prompt_done_.size()); ++i) {
    const absl::StatusOr<v1::NodeStatsReply>& before = tiers_at_prompt_done_[i];
    const absl::StatusOr<v1::NodeStatsReply> now = TierStats(*cluster_, i);
    if (!before.ok() || !now.ok()) continue;
    err << absl::StrFormat(
        "node-tier %s decode: ram_hits=%d ram_misses=%d disk_bytes_read=%d disk_wait_us=%d "
        "prefetch_issued=%d prefetch_used=%d prefetch_wasted=%d prefetch_dropped=%d "
        "prefetch_stale=%d\n",
        cluster_->node(i).address, now->ram_hits() - before->ram_hits(),
        now->ram_misses() - before->ram_misses(),
        now->disk_bytes_read() - before->disk_bytes_read(),
        now->disk_wait_micros() - before->disk_wait_micros(),
        now->prefetch_issued() - before->prefetch_issued(),
        now->prefetch_used() - before->prefetch_used(),
        now->prefetch_wasted() - before->prefetch_wasted(),
        now->prefetch_dropped() - before->prefetch_dropped(),
        now->prefetch_stale() - before->prefetch_stale());
  }
  const std::vector<LayerNodeStats> layers = LayerTotals();
  const double per = decode_tokens > 0 ? 1.0 / static_cast<double>(decode_tokens) : 0.0;
  for (size_t l = 0; l < layers.size(); ++l) {
    LayerNodeStats d = layers[l];
    if (l < layers_at_prompt_done_.size()) {
      const LayerNodeStats& p0 = layers_at_prompt_done_[l];
      d.calls -= p0.calls;
      d.wait_micros -= p0.wait_micros;
      d.compute_micros -= p0.compute_micros;
      d.disk_wait_micros -= p0.disk_wait_micros;
      d.ram_hits -= p0.ram_hits;
      d.ram_misses -= p0.ram_misses;
    }
    if (d.calls == 0) continue;
    err << absl::StrFormat(
        "layer %d decode: calls=%d ram_hits=%d ram_misses=%d per token (summed over calls): "
        "wait_ms=%.3f node_compute_ms=%.3f node_disk_wait_ms=%.3f\n",
        l, d.calls, d.ram_hits, d.ram_misses, 1e-3 * d.wait_micros * per,
        1e-3 * d.compute_micros * per, 1e-3 * d.disk_wait_micros * per);
  }
}

}  // namespace colibri::coordinator
