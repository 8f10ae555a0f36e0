#include "coordinator/cluster/cluster.h"

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
    node.provisional = !inventory.ok();
    if (inventory.ok()) {
      if (!inventory->node_id().empty()) node.node_id = inventory->node_id();
      node.inventory = *std::move(inventory);
    } else if (absl::IsUnavailable(inventory.status()) ||
               absl::IsDeadlineExceeded(inventory.status())) {
      const std::string why =
          absl::StrCat("expert node ", address, " does not answer: ", inventory.status().message());
      if (unreachable.empty()) unreachable = why;
      std::ostream& log = options.log != nullptr ? *options.log : std::cerr;
      log << "cluster: " << why << "; starting without it, it joins once it answers\n";
    } else {
      // Answering with an error (wrong token, bad request) is not a node away.
      return absl::Status(inventory.status().code(), absl::StrCat("expert node ", address, ": ",
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
  if (reachable.size() == nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].provisional) reachable[i] = false;
    }
  }
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
      capacity_(std::max<int>(options.max_node_slots, static_cast<int>(nodes.size()))),
      slots_(new Node[capacity_]),
      healthy_(reachable),
      unhealthy_since_(nodes.size(), absl::InfinitePast()),
      outrun_(nodes.size(), false),
      counters_(nodes.size()),
      latency_(nodes.size(), LatencyEstimator(options.latency)),
      available_(reachable),
      wanted_available_(reachable),
      retired_(nodes.size(), false) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!healthy_[i]) unhealthy_since_[i] = absl::Now();
    // Provisional nodes join under their own id instead (UpdateMembership).
    if (nodes[i].provisional) available_[i] = wanted_available_[i] = false;
    members_.insert(nodes[i].address);
    slots_[i] = std::move(nodes[i]);
  }
  clients_.assign(std::make_move_iterator(clients.begin()), std::make_move_iterator(clients.end()));
  n_nodes_.store(static_cast<int>(nodes.size()), std::memory_order_release);
  placements_.emplace_back(std::make_shared<const Placement>(std::move(placement)),
                           absl::InfiniteFuture());
  current_.store(placements_.back().first.get(), std::memory_order_release);
  prober_ = std::thread([this] { ProbeLoop(); });
}

Cluster::~Cluster() { Shutdown(); }

std::shared_ptr<const Placement> Cluster::HoldPlacement() const {
  absl::MutexLock lock(&mu_);
  return placements_.back().first;
}

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

int64_t Cluster::moved_experts() const {
  absl::MutexLock lock(&mu_);
  return moved_experts_;
}

std::shared_ptr<NodeClient> Cluster::client(int node) const {
  absl::MutexLock lock(&clients_mu_);
  return clients_[node];
}

bool Cluster::retired(int node) const {
  absl::MutexLock lock(&mu_);
  return retired_[node];
}

absl::Status Cluster::SetMembers(const std::vector<std::string>& addresses) {
  if (addresses.empty()) {
    return absl::InvalidArgumentError(
        "an empty node list: a cluster keeps at least one node (stop the coordinator instead)");
  }
  absl::MutexLock lock(&mu_);
  members_ = std::set<std::string>(addresses.begin(), addresses.end());
  return absl::OkStatus();
}

void Cluster::SetExtraCopies(std::vector<placement::ExtraCopy> extras) {
  std::sort(extras.begin(), extras.end());
  extras.erase(std::unique(extras.begin(), extras.end()), extras.end());
  absl::MutexLock lock(&mu_);
  if (rebalancer_) wanted_extras_ = std::move(extras);
}

Cluster::ExtraCopyCounters Cluster::extra_copy_counters() const {
  absl::MutexLock lock(&mu_);
  return extra_counters_;
}

void Cluster::RecordMovedBytes(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  extra_counters_.moved_bytes += bytes;
}

int64_t Cluster::replacements() const {
  absl::MutexLock lock(&mu_);
  return installed_;
}

void Cluster::Log(const std::string& line) const {
  absl::MutexLock lock(&log_mu_);
  std::ostream& out = options_.log != nullptr ? *options_.log : std::cerr;
  out << line + "\n" << std::flush;
}

bool Cluster::healthy(int node) const {
  absl::MutexLock lock(&mu_);
  return healthy_[node];
}

bool Cluster::AnyHealthy() const {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < healthy_.size() && i < retired_.size(); ++i) {
    if (healthy_[i] && !retired_[i]) return true;
  }
  return false;
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
    Log(absl::StrCat(
        "cluster: node ", slots_[node].address,
        absl::IsDeadlineExceeded(why) ? " suspect (late): " : " unhealthy: ", why.message()));
  }
}

void Cluster::ReportExpertLoss(int node, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    ++expert_losses_;
  }
  Log(absl::StrCat("cluster: node ", slots_[node].address, " lost an expert: ", why.message()));
  RequestRepair();
}

int64_t Cluster::expert_losses() const {
  absl::MutexLock lock(&mu_);
  return expert_losses_;
}

void Cluster::RecordCall(int node, int64_t bytes_sent, int64_t bytes_received, double wait_seconds,
                         double node_seconds, int64_t work, const absl::Status& status) {
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  NodeCounters& c = counters_[node];
  ++c.requests;
  if (!status.ok()) ++c.failures;
  if (absl::IsDeadlineExceeded(status)) ++c.deadline_misses;
  if (status.ok()) {
    latency_[node].Observe(now, work, wait_seconds, node_seconds);
    c.work_units += work;
    outrun_[node] = false;
  }
  c.bytes_sent += bytes_sent;
  c.bytes_received += bytes_received;
  c.wait_seconds += wait_seconds;
  c.node_seconds += node_seconds;
}

LatencyEstimate Cluster::latency(int node) const {
  absl::MutexLock lock(&mu_);
  return latency_[node].estimate();
}

std::vector<NodeSpeed> Cluster::Speeds(int n_nodes) const {
  const absl::Time now = Now();
  std::vector<NodeSpeed> speed(n_nodes);
  std::vector<bool> stale(n_nodes, true);
  NodeSpeed fastest;
  bool any_fresh = false;
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < n_nodes && i < static_cast<int>(latency_.size()); ++i) {
    if (latency_[i].Stale(now)) continue;
    const LatencyEstimate& e = latency_[i].estimate();
    // Due to be measured again: weighed as the fastest, and still counted in
    // what the fastest is.
    stale[i] =
        counters_[i].requests < kTrustedReplies ||
        now - e.last_reply > absl::Seconds(kProbeAfterWaits * std::max(e.wait_ewma, e.wait_high));
    speed[i] = SpeedOf(e);
    if (!any_fresh) {
      fastest = speed[i];
    } else {
      fastest.network_seconds = std::min(fastest.network_seconds, speed[i].network_seconds);
      fastest.seconds_per_work = std::min(fastest.seconds_per_work, speed[i].seconds_per_work);
      fastest.network_high_seconds =
          std::min(fastest.network_high_seconds, speed[i].network_high_seconds);
    }
    any_fresh = true;
  }
  for (int i = 0; i < n_nodes; ++i) {
    if (stale[i]) speed[i] = fastest;
  }
  return speed;
}

absl::Duration Cluster::CallDeadline(int node, int64_t work) const {
  const absl::Duration ceiling = options_.client.compute_deadline;
  LatencyEstimate e;
  {
    absl::MutexLock lock(&mu_);
    if (node >= static_cast<int>(latency_.size())) return ceiling;
    e = latency_[node].estimate();
  }
  if (e.samples == 0) return ceiling;
  const absl::Duration late = absl::Seconds(options_.deadline_factor * e.High(work));
  return std::min(std::max(late, options_.deadline_floor), ceiling);
}

absl::Duration Cluster::HedgeDelay(int node, int64_t work) const {
  if (!(options_.hedge_budget > 0)) return absl::InfiniteDuration();
  LatencyEstimate e;
  {
    absl::MutexLock lock(&mu_);
    if (node >= static_cast<int>(latency_.size())) return absl::InfiniteDuration();
    e = latency_[node].estimate();
  }
  if (e.samples == 0) return absl::InfiniteDuration();
  return std::max(absl::Seconds(options_.hedge_factor * e.High(work)), options_.hedge_floor);
}

bool Cluster::TakeHedge() {
  if (!(options_.hedge_budget > 0)) return false;
  const double burst = std::max(1.0, options_.hedge_budget);
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  if (hedge_refilled_ == absl::InfinitePast()) {
    hedge_tokens_ = burst;
  } else if (now > hedge_refilled_) {
    hedge_tokens_ = std::min(
        burst, hedge_tokens_ + options_.hedge_budget * absl::ToDoubleSeconds(now - hedge_refilled_));
  }
  hedge_refilled_ = std::max(hedge_refilled_, now);
  if (hedge_tokens_ < 1) {
    ++hedges_.refused;
    return false;
  }
  hedge_tokens_ -= 1;
  return true;
}

void Cluster::RecordCancelledCall(int node, int64_t bytes_sent, double wait_seconds, int64_t work,
                                  bool outrun) {
  const absl::Time now = Now();
  absl::MutexLock lock(&mu_);
  NodeCounters& c = counters_[node];
  ++c.requests;
  c.bytes_sent += bytes_sent;
  c.wait_seconds += wait_seconds;
  if (outrun) {
    latency_[node].Observe(now, work, wait_seconds, 0.0);
    outrun_[node] = true;
    ++c.outruns;
  }
}

bool Cluster::outrun(int node) const {
  absl::MutexLock lock(&mu_);
  return node < static_cast<int>(outrun_.size()) && outrun_[node];
}

void Cluster::RecordHedges(const HedgeCounters& delta) {
  absl::MutexLock lock(&mu_);
  hedges_.hedges += delta.hedges;
  hedges_.wins += delta.wins;
  hedges_.wasted_bytes += delta.wasted_bytes;
}

HedgeCounters Cluster::hedges() const {
  absl::MutexLock lock(&mu_);
  return hedges_;
}

void Cluster::RecordWireFloor(int node, int64_t floor_bytes) {
  absl::MutexLock lock(&mu_);
  counters_[node].floor_bytes += floor_bytes;
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

std::vector<int64_t> Cluster::WorkUnits(int n) const {
  std::vector<int64_t> out(n, 0);
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < n && i < static_cast<int>(counters_.size()); ++i) {
    out[i] = counters_[i].work_units;
  }
  return out;
}

int64_t Cluster::fallback_routes() const {
  absl::MutexLock lock(&mu_);
  return fallback_routes_;
}

void Cluster::ProbeLoop() {
  while (true) {
    std::vector<int> unhealthy;
    std::vector<int> outrun;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.probe_interval);
      if (stop_) return;
      UpdateWantedPlacement();
      for (int i = 0; i < n_nodes(); ++i) {
        if (!healthy_[i] && !retired_[i] && !slots_[i].provisional) unhealthy.push_back(i);
        if (healthy_[i] && outrun_[i] && !retired_[i]) outrun.push_back(i);
      }
    }
    // An outrun node that answers its probe is given primary work again (its
    // estimate then decides how much).
    for (int i : outrun) {
      std::shared_ptr<NodeClient> c = client(i);
      if (c == nullptr || !c->CheckHealth().ok()) continue;
      absl::MutexLock lock(&mu_);
      outrun_[i] = false;
    }
    for (int i : unhealthy) {
      std::shared_ptr<NodeClient> c = client(i);
      if (c == nullptr || !c->CheckHealth().ok()) continue;
      {
        absl::MutexLock lock(&mu_);
        healthy_[i] = true;
      }
      Log(absl::StrCat("cluster: node ", slots_[i].address, " healthy again"));
    }
    UpdateMembership();
  }
}

void Cluster::UpdateMembership() {
  std::vector<std::string> to_contact;
  {
    absl::MutexLock lock(&mu_);
    if (!rebalancer_) return;
    std::set<std::string> in;  // listed addresses with a node of known id
    for (int i = 0; i < n_nodes(); ++i) {
      if (retired_[i]) continue;
      if (members_.count(slots_[i].address) == 0) {
        retired_[i] = true;
        Log(absl::StrCat("cluster: node ", slots_[i].address,
                         " is no longer listed: its experts move to the others, then it is "
                         "released"));
      } else if (!slots_[i].provisional) {
        in.insert(slots_[i].address);
      }
    }
    for (const std::string& address : members_) {
      if (in.count(address) == 0) to_contact.push_back(address);
    }
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = std::find(to_contact.begin(), to_contact.end(), it->first) == to_contact.end()
             ? pending_.erase(it)
             : std::next(it);
  }
  for (const std::string& address : to_contact) {
    std::shared_ptr<NodeClient>& c = pending_[address];
    if (c == nullptr) {
      for (int i = 0; i < n_nodes() && c == nullptr; ++i) {
        if (slots_[i].provisional && slots_[i].address == address) c = client(i);
      }
    }
    if (c == nullptr) {
      NodeClientOptions client_options = options_.client;
      client_options.address = address;
      absl::StatusOr<std::unique_ptr<NodeClient>> made =
          options_.client_factory ? options_.client_factory(client_options)
                                  : CreateGrpcNodeClient(client_options);
      if (!made.ok()) {
        if (pending_logged_.insert(address).second) {
          Log(absl::StrCat("cluster: cannot make a client for ", address, ": ",
                           made.status().message()));
        }
        continue;
      }
      c = std::shared_ptr<NodeClient>(*std::move(made));
    }
    v1::InventoryRequest request;
    request.set_model_fingerprint(fingerprint_);
    absl::StatusOr<v1::InventoryReply> inventory = c->Inventory(request);
    if (!inventory.ok()) {
      if (pending_logged_.insert(address).second) {
        Log(absl::StrCat("cluster: node ", address, " does not answer yet (",
                         inventory.status().message(), "); it joins once it does"));
      }
      continue;
    }
    if (AddNode(address, *std::move(inventory), c)) {
      pending_.erase(address);
      pending_logged_.erase(address);
    }
  }
  ReleaseRetiredClients();
}

bool Cluster::AddNode(const std::string& address, v1::InventoryReply inventory,
                      std::shared_ptr<NodeClient> client) {
  const std::string id = inventory.node_id().empty() ? address : inventory.node_id();
  int index;
  {
    absl::MutexLock lock(&mu_);
    const int n = n_nodes();
    for (int i = 0; i < n; ++i) {
      if (!retired_[i] && !slots_[i].provisional && slots_[i].node_id == id) {
        if (pending_logged_.insert(address).second) {
          Log(absl::StrCat("cluster: node ", address, " reports id '", id, "', which ",
                           slots_[i].address, " already has: not taking it in"));
        }
        return false;
      }
    }
    if (n == capacity_) {
      if (pending_logged_.insert(address).second) {
        Log(absl::StrCat("cluster: cannot take ", address, " in: all ", capacity_,
                         " node slots used (restart the coordinator)"));
      }
      return false;
    }
    for (int i = 0; i < n; ++i) {
      if (slots_[i].provisional && slots_[i].address == address) retired_[i] = true;
    }
    index = n;
    Node& node = slots_[index];
    node.address = address;
    node.node_id = id;
    node.inventory = std::move(inventory);
    healthy_.push_back(true);
    unhealthy_since_.push_back(absl::InfinitePast());
    outrun_.push_back(false);
    counters_.emplace_back();
    latency_.emplace_back(options_.latency);
    available_.push_back(false);
    wanted_available_.push_back(true);
    retired_.push_back(false);
    {
      absl::MutexLock clients_lock(&clients_mu_);
      clients_.push_back(std::move(client));
    }
    n_nodes_.store(index + 1, std::memory_order_release);
  }
  Log(absl::StrCat("cluster: node ", address, " (id ", id,
                   ") joins: its share of experts is placed on it before work is routed to it"));
  return true;
}

void Cluster::ReleaseRetiredClients() {
  std::vector<std::shared_ptr<NodeClient>> released;  // destroyed outside the locks
  {
    absl::MutexLock lock(&mu_);
    absl::MutexLock clients_lock(&clients_mu_);
    for (int i = 0; i < n_nodes(); ++i) {
      if (retired_[i] && !available_[i] && clients_[i] != nullptr) {
        released.push_back(std::move(clients_[i]));
        clients_[i] = nullptr;
      }
    }
  }
  for (const std::shared_ptr<NodeClient>& c : released) {
    Log(absl::StrCat("cluster: node ", c->address(), " released"));
  }
}

std::vector<PlacementNode> Cluster::PlacementNodesOfSlots(int n) const {
  std::vector<PlacementNode> out =
      PlacementNodesOf(std::vector<Node>(slots_.get(), slots_.get() + n), options_.assume_equal);
  for (int i = 0; i < n; ++i) {
    if (retired_[i]) out[i].id = absl::StrCat("\x01retired-", i);
  }
  return out;
}

void Cluster::UpdateWantedPlacement() {
  if (!rebalancer_) return;
  const absl::Time now = absl::Now();
  for (int i = 0; i < n_nodes(); ++i) {
    if (retired_[i] || slots_[i].provisional) {
      wanted_available_[i] = false;
    } else if (healthy_[i]) {
      wanted_available_[i] = true;
    } else if (wanted_available_[i] && now - unhealthy_since_[i] > options_.replace_after &&
               std::count(wanted_available_.begin(), wanted_available_.end(), true) > 1) {
      // The last node is never excluded: there would be nowhere to place onto,
      // and the coordinator's fallback serves its work meanwhile.
      wanted_available_[i] = false;
    }
  }
  if (std::count(wanted_available_.begin(), wanted_available_.end(), true) == 0) {
    // Every node in force was retired and none joined yet: keep them until one does.
    wanted_available_ = available_;
  }
}

}  // namespace colibri::coordinator
