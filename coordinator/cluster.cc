#include "coordinator/cluster.h"

#include <algorithm>
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
  std::vector<bool> reachable;
  std::string unreachable;  // the first failure, for the error when none answers
  for (const std::string& address : options.addresses) {
    NodeClientOptions client_options = options.client;
    client_options.address = address;
    COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<NodeClient> client,
                             CreateGrpcNodeClient(client_options));
    v1::InventoryRequest request;
    request.set_model_fingerprint(fingerprint);
    absl::StatusOr<v1::InventoryReply> inventory = client->Inventory(request);
    Node node;
    node.address = address;
    node.node_id = address;
    if (inventory.ok()) {
      if (!inventory->node_id().empty()) node.node_id = inventory->node_id();
      node.inventory = *std::move(inventory);
    } else if (absl::IsUnavailable(inventory.status()) ||
               absl::IsDeadlineExceeded(inventory.status())) {
      const std::string why = absl::StrCat("expert node ", address,
                                           " does not answer: ", inventory.status().message());
      if (unreachable.empty()) unreachable = why;
      std::ostream& log = options.log != nullptr ? *options.log : std::cerr;
      log << "cluster: " << why << "; starting without it, it is placed in once it answers\n";
    } else {
      // Answering with an error (wrong token, bad request) is not a node away.
      return absl::Status(inventory.status().code(),
                          absl::StrCat("expert node ", address, ": ",
                                       inventory.status().message()));
    }
    reachable.push_back(inventory.ok());
    nodes.push_back(std::move(node));
    clients.push_back(std::move(client));
  }
  if (std::find(reachable.begin(), reachable.end(), true) == reachable.end()) {
    return absl::UnavailableError(unreachable);
  }
  return Create(options, fingerprint, experts_per_layer, std::move(clients), std::move(nodes),
                std::move(reachable));
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Create(
    const ClusterOptions& options, const std::string& fingerprint,
    const std::vector<int>& experts_per_layer, std::vector<std::unique_ptr<NodeClient>> clients,
    std::vector<Node> nodes, std::vector<bool> reachable) {
  if (clients.size() != nodes.size() || clients.empty()) {
    return absl::InvalidArgumentError("a cluster needs one client per node, and a node");
  }
  if (reachable.empty()) reachable.assign(nodes.size(), true);
  const int n_reachable = static_cast<int>(std::count(reachable.begin(), reachable.end(), true));
  if (reachable.size() != nodes.size() || n_reachable == 0) {
    return absl::InvalidArgumentError("a cluster needs a reachable node");
  }
  std::set<std::string> ids;
  for (const Node& n : nodes) {
    if (!ids.insert(n.node_id).second) {
      return absl::InvalidArgumentError(absl::StrCat("node id '", n.node_id,
                                                     "' is reported twice (", n.address,
                                                     "): give each node its own --node-id"));
    }
  }
  if (options.replicas < 1) return absl::InvalidArgumentError("replicas must be >= 1");
  COLIBRI_ASSIGN_OR_RETURN(
      Placement placement,
      Placement::Compute(PlacementNodesOf(nodes, options.assume_equal), experts_per_layer,
                         std::min(options.replicas, n_reachable), reachable));
  return std::unique_ptr<Cluster>(new Cluster(options, fingerprint, experts_per_layer,
                                              std::move(placement), std::move(clients),
                                              std::move(nodes), std::move(reachable)));
}

Cluster::Cluster(const ClusterOptions& options, std::string fingerprint,
                 std::vector<int> experts_per_layer, Placement placement,
                 std::vector<std::unique_ptr<NodeClient>> clients, std::vector<Node> nodes,
                 std::vector<bool> reachable)
    : options_(options),
      fingerprint_(std::move(fingerprint)),
      experts_per_layer_(std::move(experts_per_layer)),
      clients_(std::move(clients)),
      nodes_(std::move(nodes)),
      healthy_(reachable),
      unhealthy_since_(clients_.size(), absl::InfinitePast()),
      counters_(clients_.size()),
      available_(reachable),
      wanted_available_(std::move(reachable)) {
  for (size_t i = 0; i < healthy_.size(); ++i) {
    if (!healthy_[i]) unhealthy_since_[i] = absl::Now();
  }
  placements_.push_back(std::make_unique<const Placement>(std::move(placement)));
  current_.store(placements_.back().get(), std::memory_order_release);
  prober_ = std::thread([this] { ProbeLoop(); });
}

Cluster::~Cluster() { Shutdown(); }

void Cluster::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (prober_.joinable()) prober_.join();
  if (rebalancer_thread_.joinable()) rebalancer_thread_.join();
}

bool Cluster::stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void Cluster::SetRebalancer(Rebalancer rebalancer) {
  {
    absl::MutexLock lock(&mu_);
    if (rebalancer_ || stop_) return;
    rebalancer_ = std::move(rebalancer);
  }
  rebalancer_thread_ = std::thread([this] { RebalanceLoop(); });
}

void Cluster::RequestRepair() {
  absl::MutexLock lock(&mu_);
  if (rebalancer_) repair_requested_ = true;
}

int64_t Cluster::repairs() const {
  absl::MutexLock lock(&mu_);
  return repairs_;
}

bool Cluster::excluded(int node) const {
  absl::MutexLock lock(&mu_);
  return !available_[node];
}

int64_t Cluster::replacements() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(placements_.size()) - 1;
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
    if (was_healthy) unhealthy_since_[node] = absl::Now();
  }
  if (was_healthy) {
    Log(absl::StrCat("cluster: node ", nodes_[node].address, " unhealthy: ", why.message()));
  }
}

void Cluster::ReportExpertLoss(int node, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    ++expert_losses_;
  }
  Log(absl::StrCat("cluster: node ", nodes_[node].address, " lost an expert: ", why.message()));
  RequestRepair();
}

int64_t Cluster::expert_losses() const {
  absl::MutexLock lock(&mu_);
  return expert_losses_;
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
      UpdateWantedPlacement();
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

void Cluster::UpdateWantedPlacement() {
  if (!rebalancer_) return;
  const absl::Time now = absl::Now();
  for (int i = 0; i < n_nodes(); ++i) {
    if (healthy_[i]) {
      wanted_available_[i] = true;
    } else if (wanted_available_[i] && now - unhealthy_since_[i] > options_.replace_after &&
               std::count(wanted_available_.begin(), wanted_available_.end(), true) > 1) {
      // The last node is never excluded: there would be nowhere to place onto,
      // and the coordinator's fallback serves its work meanwhile.
      wanted_available_[i] = false;
    }
  }
}

namespace {

// (layer, expert, node) assignments of `to` that `from` does not have.
int64_t NewAssignments(const Placement& from, const Placement& to) {
  int64_t n = 0;
  for (int l = 0; l < to.n_layer(); ++l) {
    for (int e = 0; e < to.n_expert(l); ++e) {
      absl::Span<const int> before = from.Owners(l, e);
      for (int node : to.Owners(l, e)) {
        n += std::find(before.begin(), before.end(), node) == before.end() ? 1 : 0;
      }
    }
  }
  return n;
}

std::string NodeList(const std::vector<Cluster::Node>& nodes, const std::vector<bool>& available) {
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (available[i]) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ", nodes[i].address);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

void Cluster::RebalanceLoop() {
  absl::Duration backoff = options_.probe_interval;
  while (true) {
    std::vector<bool> want;
    bool repair = false;
    Rebalancer rebalancer;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || wanted_available_ != available_ || repair_requested_;
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      want = wanted_available_;
      repair = want == available_;
      repair_requested_ = false;
      rebalancer = rebalancer_;
    }
    absl::Status status;
    std::unique_ptr<Placement> next;
    if (repair) {
      Log("cluster: repairing: re-sending the experts nodes reported lost");
      status = rebalancer(placement());
    } else {
      const int n_available = static_cast<int>(std::count(want.begin(), want.end(), true));
      absl::StatusOr<Placement> computed =
          Placement::Compute(PlacementNodesOf(nodes_, options_.assume_equal), experts_per_layer_,
                             std::min(options_.replicas, n_available), want);
      status = computed.status();
      if (status.ok()) {
        next = std::make_unique<Placement>(*std::move(computed));
        Log(absl::StrCat("cluster: re-placing experts (excluded: ", NodeList(nodes_, want), "; ",
                         NewAssignments(placement(), *next), " expert copies move)"));
        status = rebalancer(*next);
      }
    }
    if (!status.ok()) {
      Log(absl::StrCat(repair ? "cluster: repair failed, will retry: "
                              : "cluster: re-placement failed, the current placement stays: ",
                       status.message()));
      absl::MutexLock lock(&mu_);
      if (repair) repair_requested_ = true;
      mu_.AwaitWithTimeout(absl::Condition(&stop_), backoff);
      backoff = std::min(backoff * 2, absl::Seconds(30));
      continue;
    }
    backoff = options_.probe_interval;
    if (repair) {
      absl::MutexLock lock(&mu_);
      ++repairs_;
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      placements_.push_back(std::move(next));
      available_ = want;
      current_.store(placements_.back().get(), std::memory_order_release);
    }
    Log(absl::StrCat("cluster: new placement in force (excluded: ", NodeList(nodes_, want), ")"));
  }
}

}  // namespace colibri::coordinator
