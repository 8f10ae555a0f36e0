#include "coordinator/cluster.h"

#include <iostream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::coordinator {

std::vector<PlacementNode> PlacementNodesOf(const std::vector<Cluster::Node>& nodes,
                                            bool assume_equal) {
  std::vector<PlacementNode> out;
  for (const Cluster::Node& n : nodes) {
    PlacementNode p;
    p.id = n.node_id;
    const uint64_t capacity = n.inventory.disk_budget_bytes() != 0 ? n.inventory.disk_budget_bytes()
                                                                   : n.inventory.ram_budget_bytes();
    p.weight = assume_equal || capacity == 0 ? 1.0 : static_cast<double>(capacity) / (1 << 30);
    out.push_back(std::move(p));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Connect(
    const ClusterOptions& options, const std::string& fingerprint,
    const std::vector<int>& experts_per_layer) {
  if (options.addresses.empty()) return absl::InvalidArgumentError("no expert nodes given");
  std::vector<std::unique_ptr<NodeClient>> clients;
  std::vector<Node> nodes;
  for (const std::string& address : options.addresses) {
    NodeClientOptions client_options = options.client;
    client_options.address = address;
    COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> client,
                             CreateGrpcNodeClient(client_options));
    v1::InventoryRequest request;
    request.set_model_fingerprint(fingerprint);
    absl::StatusOr<v1::InventoryReply> inventory = client->Inventory(request);
    if (!inventory.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "expert node ", address, " does not answer: ", inventory.status().message()));
    }
    Node node;
    node.address = address;
    node.node_id = inventory->node_id().empty() ? address : inventory->node_id();
    node.inventory = *std::move(inventory);
    nodes.push_back(std::move(node));
    clients.push_back(std::move(client));
  }
  return Create(options, fingerprint, experts_per_layer, std::move(clients), std::move(nodes));
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Create(
    const ClusterOptions& options, const std::string& fingerprint,
    const std::vector<int>& experts_per_layer, std::vector<std::unique_ptr<NodeClient>> clients,
    std::vector<Node> nodes) {
  if (clients.size() != nodes.size() || clients.empty()) {
    return absl::InvalidArgumentError("a cluster needs one client per node, and a node");
  }
  std::set<std::string> ids;
  for (const Node& n : nodes) {
    if (!ids.insert(n.node_id).second) {
      return absl::InvalidArgumentError(absl::StrCat("node id '", n.node_id,
                                                     "' is reported twice (", n.address,
                                                     "): give each node its own --node-id"));
    }
  }
  COLIBRI_ASSIGN_OR_RETURN(Placement placement,
                           Placement::Compute(PlacementNodesOf(nodes, options.assume_equal),
                                              experts_per_layer, options.replicas));
  return std::unique_ptr<Cluster>(new Cluster(options, fingerprint, std::move(placement),
                                              std::move(clients), std::move(nodes)));
}

Cluster::Cluster(const ClusterOptions& options, std::string fingerprint, Placement placement,
                 std::vector<std::unique_ptr<NodeClient>> clients, std::vector<Node> nodes)
    : options_(options),
      fingerprint_(std::move(fingerprint)),
      placement_(std::move(placement)),
      clients_(std::move(clients)),
      nodes_(std::move(nodes)),
      healthy_(clients_.size(), true),
      counters_(clients_.size()) {
  prober_ = std::thread([this] { ProbeLoop(); });
}

Cluster::~Cluster() { Shutdown(); }

void Cluster::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (prober_.joinable()) prober_.join();
}

void Cluster::Log(const std::string& line) const {
  absl::MutexLock lock(&log_mu_);
  std::ostream& out = options_.log != nullptr ? *options_.log : std::cerr;
  out << line << "\n" << std::flush;
}

bool Cluster::healthy(int node) const {
  absl::MutexLock lock(&mu_);
  return healthy_[node];
}

void Cluster::MarkUnhealthy(int node, const absl::Status& why) {
  bool was_healthy;
  {
    absl::MutexLock lock(&mu_);
    was_healthy = healthy_[node];
    healthy_[node] = false;
  }
  if (was_healthy) {
    Log(absl::StrCat("cluster: node ", nodes_[node].address, " unhealthy: ", why.message()));
  }
}

void Cluster::RecordCall(int node, int64_t bytes_sent, int64_t bytes_received, double wait_seconds,
                         bool ok) {
  absl::MutexLock lock(&mu_);
  NodeCounters& c = counters_[node];
  ++c.requests;
  if (!ok) ++c.failures;
  c.bytes_sent += bytes_sent;
  c.bytes_received += bytes_received;
  c.wait_seconds += wait_seconds;
}

void Cluster::RecordFailover(int node) {
  absl::MutexLock lock(&mu_);
  ++counters_[node].failovers;
}

void Cluster::RecordFallbackRoutes(int64_t n) {
  absl::MutexLock lock(&mu_);
  fallback_routes_ += n;
}

NodeCounters Cluster::counters(int node) const {
  absl::MutexLock lock(&mu_);
  return counters_[node];
}

int64_t Cluster::fallback_routes() const {
  absl::MutexLock lock(&mu_);
  return fallback_routes_;
}

void Cluster::ProbeLoop() {
  while (true) {
    std::vector<int> unhealthy;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.probe_interval);
      if (stop_) return;
      for (int i = 0; i < n_nodes(); ++i) {
        if (!healthy_[i]) unhealthy.push_back(i);
      }
    }
    for (int i : unhealthy) {
      if (!clients_[i]->CheckHealth().ok()) continue;
      {
        absl::MutexLock lock(&mu_);
        healthy_[i] = true;
      }
      Log(absl::StrCat("cluster: node ", nodes_[i].address, " healthy again"));
    }
  }
}

}  // namespace colibri::coordinator
