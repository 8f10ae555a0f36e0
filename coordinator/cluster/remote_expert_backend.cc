#include "coordinator/cluster/remote_expert_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "rpc/wire_tensor.h"

namespace colibri::coordinator {

// A thread that runs closures in order: the separate Prefetch calls to one
// node.
class RemoteExpertBackend::Worker {
 public:
  Worker() : thread_([this] { Loop(); }) {}
  ~Worker() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void Post(std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;  // stop_ with nothing left
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

namespace {

v1::NumericPath ToProto(ops::NumericPath path) {
  return path == ops::NumericPath::kExact ? v1::NUMERIC_PATH_EXACT : v1::NUMERIC_PATH_FAST;
}

}  // namespace

RemoteExpertBackend::RemoteExpertBackend(
    Cluster* cluster, const std::vector<std::vector<moe::ExpertWeights>>* local_experts,
    int n_expert, ops::NumericPath path, ThreadPool* pool, const WireOptions& wire)
    : cluster_(cluster),
      local_experts_(local_experts),
      n_expert_(n_expert),
      path_(path),
      pool_(pool),
      wire_(wire),
      fallback_(n_expert, path, pool) {
  AddWorkers(cluster_->n_nodes());
}

void RemoteExpertBackend::AddWorkers(int n_nodes) {
  while (static_cast<int>(prefetch_workers_.size()) < n_nodes) {
    prefetch_workers_.push_back(std::make_unique<Worker>());
  }
  absl::MutexLock lock(&mu_);
  prefetch_outstanding_.resize(prefetch_workers_.size(), false);
}

RemoteExpertBackend::~RemoteExpertBackend() {
  // Drains queued calls before the members they use go.
  prefetch_workers_.clear();
}

RemoteBackendStats& RemoteBackendStats::operator+=(const RemoteBackendStats& o) {
  // A counter added to the struct must be added here too.
  static_assert(sizeof(RemoteBackendStats) == 19 * sizeof(int64_t),
                "RemoteBackendStats changed: update operator+=");
  layers += o.layers;
  round_trips += o.round_trips;
  involved_nodes += o.involved_nodes;
  fallback_routes += o.fallback_routes;
  failovers += o.failovers;
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  payload_sent += o.payload_sent;
  payload_received += o.payload_received;
  floor_bytes += o.floor_bytes;
  hints_riding += o.hints_riding;
  hints_separate += o.hints_separate;
  hints_dropped += o.hints_dropped;
  prefetch_calls += o.prefetch_calls;
  slowest_compute_micros += o.slowest_compute_micros;
  slowest_disk_micros += o.slowest_disk_micros;
  hedges += o.hedges;
  hedge_wins += o.hedge_wins;
  hedge_wasted_bytes += o.hedge_wasted_bytes;
  return *this;
}

LayerNodeStats& LayerNodeStats::operator+=(const LayerNodeStats& o) {
  calls += o.calls;
  wait_micros += o.wait_micros;
  compute_micros += o.compute_micros;
  disk_wait_micros += o.disk_wait_micros;
  ram_hits += o.ram_hits;
  ram_misses += o.ram_misses;
  return *this;
}

std::vector<LayerNodeStats> RemoteExpertBackend::layer_stats() const {
  absl::MutexLock lock(&mu_);
  std::vector<LayerNodeStats> s = layer_stats_;
  if (second_ != nullptr) {
    const std::vector<LayerNodeStats> o = second_->layer_stats();
    if (o.size() > s.size()) s.resize(o.size());
    for (size_t l = 0; l < o.size(); ++l) s[l] += o[l];
  }
  return s;
}

RemoteBackendStats RemoteExpertBackend::stats() const {
  absl::MutexLock lock(&mu_);
  RemoteBackendStats s = stats_;
  if (second_ != nullptr) s += second_->stats();
  return s;
}

moe::ExpertBackend* RemoteExpertBackend::SecondChannel() {
  absl::MutexLock lock(&mu_);
  if (second_ == nullptr) {
    second_ = std::make_unique<RemoteExpertBackend>(cluster_, local_experts_, n_expert_, path_,
                                                    pool_, wire_);
  }
  return second_.get();
}

void RemoteExpertBackend::Submit(const moe::ExpertBatch& batch, float* out) {
  batch_ = batch;
  out_ = out;
  calls_.clear();
  attempt_.assign(n_expert_, 0);
  fallback_experts_.assign(n_expert_, false);
  expert_done_.assign(n_expert_, false);
  expert_live_.assign(n_expert_, 0);
  submit_status_ = absl::OkStatus();
  placement_hold_ = cluster_->HoldPlacement();
  placement_ = placement_hold_.get();
  const Placement& placement = *placement_;
  AddWorkers(placement.n_nodes());  // nodes that joined the cluster since
  const int64_t n_routes = batch.n_tokens * batch.k;
  for (int64_t i = 0; i < n_routes; ++i) {
    const int32_t e = batch.experts[i];
    if (e < 0 || e >= n_expert_) {
      submit_status_ = absl::InvalidArgumentError(absl::StrCat(
          "layer ", batch.layer, ": expert id ", e, " out of range [0, ", n_expert_, ")"));
      return;
    }
  }
  if (rpc::WireElementBytes(wire_.dtype) == 0) {
    submit_status_ = absl::InvalidArgumentError(
        absl::StrCat("wire dtype ", rpc::WireDTypeName(wire_.dtype), " is not one of f32, bf16"));
    return;
  }
  if (wire_.reduce && batch.weights == nullptr && n_routes > 0) {
    submit_status_ = absl::InvalidArgumentError(
        absl::StrCat("layer ", batch.layer, ": node-side reduction needs the routes' weights"));
    return;
  }
  if (batch.layer < 0 || batch.layer >= placement.n_layer() ||
      placement.n_expert(batch.layer) != n_expert_) {
    submit_status_ = absl::InternalError(
        absl::StrCat("layer ", batch.layer, " has no placement for ", n_expert_, " experts"));
    return;
  }
  std::vector<int64_t> tokens(n_expert_, 0);
  for (int64_t i = 0; i < n_routes; ++i) ++tokens[batch.experts[i]];
  std::vector<int64_t> work(n_expert_);
  for (int e = 0; e < n_expert_; ++e) work[e] = ExpertWork(tokens[e]);
  first_ = ChooseReplicas(placement, batch.layer, work, Healthy(placement.n_nodes()));
  std::vector<int64_t> routes(n_routes);
  for (int64_t i = 0; i < n_routes; ++i) routes[i] = i;
  Dispatch(routes, /*send_hints=*/true);
  absl::MutexLock lock(&mu_);
  ++stats_.layers;
  stats_.involved_nodes += static_cast<int64_t>(calls_.size());
}

std::vector<int> RemoteExpertBackend::ChooseReplicas(const Placement& placement, int layer,
                                                     const std::vector<int64_t>& work,
                                                     const std::vector<bool>& healthy) const {
  if (placement.max_copies() == 1) return std::vector<int>(placement.n_expert(layer), 0);
  // Outrun nodes take no first-choice work while another healthy copy exists.
  std::vector<bool> usable = healthy;
  for (size_t i = 0; i < usable.size(); ++i) usable[i] = usable[i] && !cluster_->outrun(i);
  std::vector<int> chosen;
  switch (cluster_->replica_choice()) {
    case ReplicaChoice::kFastest:
      chosen = ChooseFastestReplicas(placement, layer, work, cluster_->Speeds(placement.n_nodes()),
                                     usable, cluster_->WorkUnits(placement.n_nodes()));
      break;
    case ReplicaChoice::kBalance:
      chosen = BalanceReplicas(placement, layer, work, usable);
      break;
    case ReplicaChoice::kPrimary:
      chosen.assign(placement.n_expert(layer), 0);
      break;
  }
  for (int e = 0; e < static_cast<int>(chosen.size()); ++e) {
    absl::Span<const int> owners = placement.Owners(layer, e);
    if (usable[owners[chosen[e]]]) continue;
    for (size_t i = 0; i < owners.size(); ++i) {
      if (usable[owners[i]]) {
        chosen[e] = static_cast<int>(i);
        break;
      }
    }
  }
  return chosen;
}

int RemoteExpertBackend::OwnerAt(const Placement& placement, int32_t e, int attempt) const {
  absl::Span<const int> owners = placement.Owners(batch_.layer, e);
  return owners[(first_[e] + attempt) % owners.size()];
}

std::vector<bool> RemoteExpertBackend::Healthy(int n_nodes) const {
  std::vector<bool> healthy(n_nodes);
  for (int i = 0; i < n_nodes; ++i) healthy[i] = cluster_->healthy(i);
  return healthy;
}

void RemoteExpertBackend::Dispatch(const std::vector<int64_t>& routes, bool send_hints,
                                   Call* hedge_of) {
  const Placement& placement = *placement_;
  const int n_nodes = placement.n_nodes();
  const std::vector<bool> healthy = Healthy(n_nodes);

  const size_t first_new = calls_.size();
  node_slot_.assign(n_nodes, -1);
  for (int64_t route : routes) {
    const int32_t e = batch_.experts[route];
    const int replicas = Copies(placement, e);
    while (attempt_[e] < replicas && !healthy[OwnerAt(placement, e, attempt_[e])]) ++attempt_[e];
    if (attempt_[e] >= replicas) {
      fallback_experts_[e] = true;
      continue;
    }
    const int node = OwnerAt(placement, e, attempt_[e]);
    if (node_slot_[node] < 0) {
      node_slot_[node] = static_cast<int>(calls_.size());
      calls_.push_back(std::make_unique<Call>());
      calls_.back()->node = node;
    }
    calls_[node_slot_[node]]->routes.push_back(route);
  }
  if (send_hints) SendHints(placement, healthy, batch_.layer, /*ride=*/true);

  token_slot_.assign(batch_.n_tokens, -1);
  for (size_t c = first_new; c < calls_.size(); ++c) {
    Call* call = calls_[c].get();
    // Each token once, in order of first use; routes refer to rows by index.
    for (int64_t route : call->routes) {
      const int64_t t = route / batch_.k;
      if (token_slot_[t] < 0) {
        token_slot_[t] = static_cast<int32_t>(call->tokens.size());
        call->tokens.push_back(t);
      }
      call->route_row.push_back(token_slot_[t]);
    }
    for (int64_t t : call->tokens) token_slot_[t] = -1;
    // Its ExpertWork: each expert's tokens in this call.
    expert_tokens_.assign(n_expert_, 0);
    for (int64_t route : call->routes) ++expert_tokens_[batch_.experts[route]];
    call->work = 0;
    for (int32_t e = 0; e < n_expert_; ++e) {
      if (expert_tokens_[e] == 0) continue;
      call->work += ExpertWork(expert_tokens_[e]);
      call->experts.push_back(e);
      ++expert_live_[e];
    }
    call->live = true;
    call->hedge_of = hedge_of;
    EncodeRequest(call);
    const int64_t request_bytes = static_cast<int64_t>(call->request.ByteSizeLong());
    call->request_bytes = request_bytes;
    const int64_t floor =
        2 * static_cast<int64_t>(call->tokens.size()) * batch_.n_embd * sizeof(float);
    cluster_->RecordWireFloor(call->node, floor);
    {
      absl::MutexLock lock(&mu_);
      ++stats_.round_trips;
      stats_.bytes_sent += request_bytes;
      stats_.payload_sent += static_cast<int64_t>(call->request.hidden().data().size());
      stats_.floor_bytes += floor;
    }
    call->deadline = cluster_->CallDeadline(call->node, call->work);
    call->start = std::chrono::steady_clock::now();
    // Null once the node was retired; its experts have moved by then.
    std::shared_ptr<NodeClient> client = cluster_->client(call->node);
    call->retired = client == nullptr;
    // Hedges are not hedged again; a call with no other copy to go to finds
    // that out when it is due.
    const absl::Duration hedge_delay =
        hedge_of == nullptr && !call->retired && placement.max_copies() > 1
            ? cluster_->HedgeDelay(call->node, call->work)
            : absl::InfiniteDuration();
    if (hedge_delay < absl::Hours(24)) {
      call->hedge_at = call->start + absl::ToChronoMicroseconds(hedge_delay);
    }
    if (client != nullptr) {
      client->StartComputeLayer(call->request, call->deadline, &queue_, call);
    } else {
      queue_.Complete(call, absl::UnavailableError("node retired from the cluster"));
    }
  }
}

void RemoteExpertBackend::EncodeRequest(Call* call) const {
  v1::ComputeLayerRequest& req = call->request;
  req.set_model_fingerprint(cluster_->fingerprint());
  req.set_layer(batch_.layer);
  req.set_path(ToProto(path_));
  req.set_reduce_per_token(wire_.reduce);
  // Left unset for F32, as senders before the field did.
  if (wire_.dtype != v1::DTYPE_F32) req.set_reply_dtype(wire_.dtype);
  for (size_t j = 0; j < call->routes.size(); ++j) {
    const int64_t route = call->routes[j];
    v1::Route* r = req.add_routes();
    r->set_token(call->route_row[j]);
    r->set_expert(batch_.experts[route]);
    r->set_weight(batch_.weights != nullptr ? batch_.weights[route] : 0.0f);
  }
  const int64_t n_embd = batch_.n_embd;
  const int element = rpc::WireElementBytes(wire_.dtype);
  v1::Tensor* hidden = req.mutable_hidden();  // [tokens][n_embd]
  hidden->set_dtype(wire_.dtype);
  hidden->add_shape(static_cast<int64_t>(call->tokens.size()));
  hidden->add_shape(n_embd);
  std::string* data = hidden->mutable_data();
  data->resize(call->tokens.size() * n_embd * element);
  for (size_t j = 0; j < call->tokens.size(); ++j) {
    rpc::EncodeFloats(batch_.x + call->tokens[j] * n_embd, n_embd, wire_.dtype,
                      &(*data)[j * n_embd * element]);
  }
}

absl::Status RemoteExpertBackend::Scatter(const Call& call) {
  const v1::Tensor& outputs = call.reply->outputs();
  const int64_t n_embd = batch_.n_embd;
  const int64_t rows = static_cast<int64_t>(wire_.reduce ? call.tokens.size() : call.routes.size());
  if (absl::Status s = rpc::CheckWireMatrix(outputs, "reply outputs", rows, n_embd); !s.ok()) {
    return absl::DataLossError(
        absl::StrCat(cluster_->node(call.node).address, " ComputeLayer: ", s.message()));
  }
  const v1::DType dtype = outputs.dtype();
  const int element = rpc::WireElementBytes(dtype);
  const char* data = outputs.data().data();
  if (!wire_.reduce) {
    for (size_t j = 0; j < call.routes.size(); ++j) {
      if (expert_done_[batch_.experts[call.routes[j]]]) continue;  // answered by another call
      rpc::DecodeFloats(data + j * n_embd * element, n_embd, dtype, out_ + call.routes[j] * n_embd);
    }
    return absl::OkStatus();
  }
  // Row i of the reply is the weighted sum of this call's ranks of token i:
  // into the first of them; the others are zero.
  std::vector<bool> written(call.tokens.size(), false);
  for (size_t j = 0; j < call.routes.size(); ++j) {
    float* dst = out_ + call.routes[j] * n_embd;
    const int32_t row = call.route_row[j];
    if (written[row]) {
      std::fill(dst, dst + n_embd, 0.0f);
    } else {
      rpc::DecodeFloats(data + row * n_embd * element, n_embd, dtype, dst);
      written[row] = true;
    }
  }
  return absl::OkStatus();
}

void RemoteExpertBackend::WeighFallbackRoutes() {
  const int64_t n_routes = batch_.n_tokens * batch_.k;
  for (int64_t i = 0; i < n_routes; ++i) {
    if (!fallback_experts_[batch_.experts[i]]) continue;
    float* row = out_ + i * batch_.n_embd;
    const float w = batch_.weights[i];
    for (int64_t c = 0; c < batch_.n_embd; ++c) row[c] *= w;
  }
}

RemoteExpertBackend::Call* RemoteExpertBackend::NextHedge() const {
  Call* first = nullptr;
  for (const std::unique_ptr<Call>& c : calls_) {
    if (!c->live || c->cancelled || c->hedge_at == std::chrono::steady_clock::time_point::max()) {
      continue;
    }
    if (first == nullptr || c->hedge_at < first->hedge_at) first = c.get();
  }
  return first;
}

void RemoteExpertBackend::Hedge(Call* call) {
  call->hedge_at = std::chrono::steady_clock::time_point::max();
  const Placement& placement = *placement_;
  const std::vector<bool> healthy = Healthy(placement.n_nodes());
  // Each unanswered expert's next healthy copy on another node, if any.
  std::vector<std::pair<int32_t, int>> targets;  // (expert, attempt)
  bool every = true;
  for (int32_t e : call->experts) {
    if (expert_done_[e]) continue;
    const int replicas = Copies(placement, e);
    int target = -1;
    for (int a = attempt_[e] + 1; a < replicas && target < 0; ++a) {
      const int node = OwnerAt(placement, e, a);
      if (healthy[node] && node != call->node) target = a;
    }
    if (target < 0) {
      every = false;
    } else {
      targets.emplace_back(e, target);
    }
  }
  if (targets.empty() || (wire_.reduce && !every) || !cluster_->TakeHedge()) return;
  std::vector<bool> hedged(n_expert_, false);
  for (const auto& [e, a] : targets) {
    attempt_[e] = a;
    hedged[e] = true;
  }
  std::vector<int64_t> routes;
  for (int64_t route : call->routes) {
    if (hedged[batch_.experts[route]]) routes.push_back(route);
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.hedges;
  }
  cluster_->RecordHedges(HedgeCounters{1, 0, 0});
  Dispatch(routes, /*send_hints=*/false, call);
}

void RemoteExpertBackend::CancelAnswered() {
  for (const std::unique_ptr<Call>& c : calls_) {
    if (!c->live || c->cancelled) continue;
    const bool answered = std::all_of(c->experts.begin(), c->experts.end(),
                                      [this](int32_t e) { return expert_done_[e]; });
    if (!answered) continue;
    c->cancelled = true;
    queue_.Cancel(c.get());
  }
}

void RemoteExpertBackend::CountWasted(const Call& call, int64_t reply_bytes) {
  const int64_t bytes = call.request_bytes + reply_bytes;
  {
    absl::MutexLock lock(&mu_);
    stats_.hedge_wasted_bytes += bytes;
  }
  cluster_->RecordHedges(HedgeCounters{0, 0, bytes});
}

void RemoteExpertBackend::Take(Call* call, absl::StatusOr<v1::ComputeLayerReply> reply) {
  call->live = false;
  call->reply = std::move(reply);
  call->wait_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - call->start).count();
  for (int32_t e : call->experts) --expert_live_[e];
  const int64_t reply_bytes =
      call->reply.ok() ? static_cast<int64_t>(call->reply->ByteSizeLong()) : 0;
  if (call->reply.ok()) {
    // Untrusted figures: each kept within [0, the call's own wait].
    const double wait_micros = 1e6 * call->wait_seconds;
    auto clamp = [wait_micros](double v) {
      return static_cast<int64_t>(std::min(wait_micros, std::max(0.0, v)));
    };
    absl::MutexLock lock(&mu_);
    stats_.bytes_received += reply_bytes;
    stats_.payload_received += static_cast<int64_t>(call->reply->outputs().data().size());
    if (layer_stats_.size() <= static_cast<size_t>(batch_.layer)) {
      layer_stats_.resize(batch_.layer + 1);
    }
    LayerNodeStats& l = layer_stats_[batch_.layer];
    ++l.calls;
    l.wait_micros += static_cast<int64_t>(wait_micros);
    l.compute_micros += clamp(static_cast<double>(call->reply->compute_micros()));
    l.disk_wait_micros += clamp(static_cast<double>(call->reply->disk_wait_micros()));
    l.ram_hits += std::max(0, call->reply->ram_hits());
    l.ram_misses += std::max(0, call->reply->ram_misses());
  }
  // What the node says it spent on the call (clamped: a reply is untrusted;
  // summed as doubles, so that no reported value can overflow).
  const double node_seconds =
      call->reply.ok()
          ? std::min(call->wait_seconds,
                     1e-6 * (std::max(0.0, static_cast<double>(call->reply->compute_micros())) +
                             std::max(0.0, static_cast<double>(call->reply->disk_wait_micros()))))
          : 0.0;
  if (call->cancelled) {
    // Its experts were answered by other calls; it is not at fault.
    if (call->reply.ok()) {
      cluster_->RecordCall(call->node, call->request_bytes, reply_bytes, call->wait_seconds,
                           node_seconds, call->work, absl::OkStatus());
    } else {
      cluster_->RecordCancelledCall(call->node, call->request_bytes, call->wait_seconds,
                                    call->work, /*outrun=*/call->hedge_of == nullptr);
    }
    CountWasted(*call, reply_bytes);
    return;
  }
  // A reply of per-token sums is taken whole or not at all.
  const bool usable =
      call->reply.ok() &&
      (!wire_.reduce || std::none_of(call->experts.begin(), call->experts.end(),
                                     [this](int32_t e) { return expert_done_[e]; }));
  absl::Status status = !call->reply.ok() ? call->reply.status()
                        : usable          ? Scatter(*call)
                                          : absl::OkStatus();
  if (absl::IsDeadlineExceeded(status)) {
    status = absl::DeadlineExceededError(
        absl::StrCat(cluster_->node(call->node).address, " ComputeLayer: no reply within ",
                     absl::FormatDuration(call->deadline), " (", status.message(), ")"));
  }
  cluster_->RecordCall(call->node, call->request_bytes, reply_bytes, call->wait_seconds,
                       node_seconds, call->work, status);
  if (status.ok() && usable) {
    if (call->wait_seconds > slowest_wait_) {
      // Untrusted figures: each kept within the call's own wait.
      const double wait_micros = 1e6 * call->wait_seconds;
      slowest_wait_ = call->wait_seconds;
      slowest_compute_ = static_cast<int64_t>(std::min(
          wait_micros, std::max(0.0, static_cast<double>(call->reply->compute_micros()))));
      slowest_disk_ = static_cast<int64_t>(std::min(
          wait_micros, std::max(0.0, static_cast<double>(call->reply->disk_wait_micros()))));
    }
    for (int32_t e : call->experts) expert_done_[e] = true;
    Call* original = call->hedge_of;
    if (original != nullptr && !original->hedge_won) {
      original->hedge_won = true;
      {
        absl::MutexLock lock(&mu_);
        ++stats_.hedge_wins;
      }
      cluster_->RecordHedges(HedgeCounters{0, 1, 0});
    }
    CancelAnswered();
    return;
  }
  if (status.ok()) CountWasted(*call, reply_bytes);  // a hedge's sums came first
  // The routes no other call carries any more.
  std::vector<int64_t> retry;
  for (int64_t route : call->routes) {
    const int32_t e = batch_.experts[route];
    if (!expert_done_[e] && expert_live_[e] == 0) retry.push_back(route);
  }
  if (!status.ok()) {
    // A node retired while this layer was under way: the placement that
    // retired it is installed, so its experts have moved. Route the call's
    // experts again by that placement; the node is not at fault.
    if (call->retired && &cluster_->placement() != placement_) {
      placement_hold_ = cluster_->HoldPlacement();
      placement_ = placement_hold_.get();
      AddWorkers(placement_->n_nodes());  // nodes that joined since Submit
      for (int64_t route : retry) {
        // Owners order of the new placement, from its primary.
        first_[batch_.experts[route]] = 0;
        attempt_[batch_.experts[route]] = 0;
      }
      if (!retry.empty()) Dispatch(retry, /*send_hints=*/false);
      return;
    }
    // DataLoss / NotFound answered by the node: it lost (a stored value
    // failed its checksum and was dropped) or misses an expert of this
    // call. That is the expert's loss, not the node's: have it re-sent and
    // keep the node. A reply that does not parse (Scatter) is the node's.
    if (!call->reply.ok() &&
        (absl::IsDataLoss(call->reply.status()) || absl::IsNotFound(call->reply.status()))) {
      cluster_->ReportExpertLoss(call->node, status);
    } else {
      cluster_->MarkUnhealthy(call->node, status);
    }
  }
  if (retry.empty()) return;
  // Every copy tried so far for these experts has failed them (or, after a
  // hedge's sums came first, cannot be taken in part): move each past the
  // furthest one tried (attempt_), once.
  bool moved = false;
  std::vector<bool> stepped(n_expert_, false);
  for (int64_t route : retry) {
    const int32_t e = batch_.experts[route];
    if (stepped[e]) continue;
    stepped[e] = true;
    const int replicas = Copies(*placement_, e);
    if (attempt_[e] < replicas) ++attempt_[e];
    moved = moved || attempt_[e] < replicas;
  }
  if (moved && !status.ok()) {
    cluster_->RecordFailover(call->node);
    absl::MutexLock lock(&mu_);
    ++stats_.failovers;
  }
  Dispatch(retry, /*send_hints=*/false);
}

absl::Status RemoteExpertBackend::Wait() {
  if (!submit_status_.ok()) return std::exchange(submit_status_, absl::OkStatus());
  // The slowest call whose answer is used, and what its node reported (Take).
  slowest_wait_ = -1;
  slowest_compute_ = 0;
  slowest_disk_ = 0;
  while (queue_.outstanding() > 0) {
    Call* due = NextHedge();
    std::optional<ComputeQueue::Completion> done =
        due != nullptr ? queue_.NextUntil(due->hedge_at) : queue_.Next();
    if (!done.has_value()) {
      Hedge(due);
      continue;
    }
    Take(static_cast<Call*>(done->tag), std::move(done->reply));
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.slowest_compute_micros += slowest_compute_;
    stats_.slowest_disk_micros += slowest_disk_;
  }

  int64_t n_fallback = 0;
  const int64_t n_routes = batch_.n_tokens * batch_.k;
  for (int64_t i = 0; i < n_routes; ++i) n_fallback += fallback_experts_[batch_.experts[i]];
  if (n_fallback == 0) return absl::OkStatus();
  auto lookup = [this](int layer, int expert) -> absl::StatusOr<moe::ExpertWeights> {
    if (layer < 0 || layer >= static_cast<int>(local_experts_->size()) ||
        expert >= static_cast<int>((*local_experts_)[layer].size())) {
      return absl::NotFoundError(
          absl::StrCat("layer ", layer, " expert ", expert, " is not available locally"));
    }
    return (*local_experts_)[layer][expert];
  };
  auto owned = [this](int expert) { return static_cast<bool>(fallback_experts_[expert]); };
  absl::Status status = fallback_.Run(batch_, lookup, owned, out_);
  if (status.ok() && wire_.reduce) WeighFallbackRoutes();
  cluster_->RecordFallbackRoutes(n_fallback);
  {
    absl::MutexLock lock(&mu_);
    stats_.fallback_routes += n_fallback;
  }
  return status;
}

void RemoteExpertBackend::Prefetch(int layer, absl::Span<const int32_t> experts) {
  for (int32_t e : experts) hints_.emplace_back(layer, e);
  // A Submit carries the hints for later layers: the next Submit is this
  // step's next layer or the next step's first, both before any later layer.
  // A hint for the first layer with experts has no Submit before it and
  // goes now.
  const std::shared_ptr<const Placement> hold = cluster_->HoldPlacement();
  for (int l = 0; l < std::min(layer, hold->n_layer()); ++l) {
    if (hold->n_expert(l) > 0) return;
  }
  AddWorkers(hold->n_nodes());
  SendHints(*hold, Healthy(hold->n_nodes()), /*after_layer=*/-1, /*ride=*/false);
}

void RemoteExpertBackend::SendHints(const Placement& placement, const std::vector<bool>& healthy,
                                    int after_layer, bool ride) {
  if (hints_.empty()) return;
  const int n_nodes = placement.n_nodes();
  std::vector<std::unique_ptr<v1::PrefetchRequest>> separate(n_nodes);
  int64_t riding = 0;
  int64_t dropped = 0;
  auto valid = [&](int layer, int32_t e) {
    return layer > after_layer && layer < placement.n_layer() && e >= 0 &&
           e < placement.n_expert(layer);
  };
  // [layer] of the hinted layers: the replica each hinted expert starts from,
  // chosen as Submit would choose for a batch of those experts.
  absl::flat_hash_map<int, std::vector<int>> start;
  if (placement.max_copies() > 1) {
    absl::flat_hash_map<int, std::vector<int64_t>> cost;
    for (const auto& [layer, e] : hints_) {
      if (!valid(layer, e)) continue;
      std::vector<int64_t>& c = cost[layer];
      c.resize(placement.n_expert(layer), 0);
      c[e] = ExpertWork(1);
    }
    for (const auto& [layer, c] : cost) {
      start[layer] = ChooseReplicas(placement, layer, c, healthy);
    }
  }
  for (const auto& [layer, e] : hints_) {
    if (!valid(layer, e)) {
      ++dropped;
      continue;
    }
    absl::Span<const int> owners = placement.Owners(layer, e);
    const auto it = start.find(layer);
    const int first = it == start.end() ? 0 : it->second[e];
    int owner = -1;
    for (size_t a = 0; a < owners.size(); ++a) {
      const int node = owners[(first + a) % owners.size()];
      if (healthy[node]) {
        owner = node;
        break;
      }
    }
    if (owner < 0) {
      ++dropped;
      continue;
    }
    v1::ExpertKey* key = nullptr;
    const int slot = ride ? node_slot_[owner] : -1;
    if (slot >= 0) {
      key = calls_[slot]->request.add_prefetch();
      ++riding;
    } else {
      if (separate[owner] == nullptr) separate[owner] = std::make_unique<v1::PrefetchRequest>();
      key = separate[owner]->add_experts();
    }
    key->set_model_fingerprint(cluster_->fingerprint());
    key->set_layer(layer);
    key->set_expert(e);
  }
  hints_.clear();

  int64_t sent = 0;
  int64_t calls = 0;
  for (int node = 0; node < n_nodes; ++node) {
    if (separate[node] == nullptr) continue;
    const int64_t n_keys = separate[node]->experts_size();
    {
      absl::MutexLock lock(&mu_);
      if (prefetch_outstanding_[node]) {
        dropped += n_keys;
        continue;
      }
      prefetch_outstanding_[node] = true;
    }
    sent += n_keys;
    ++calls;
    std::shared_ptr<v1::PrefetchRequest> request(std::move(separate[node]));
    // Advice: a failure is ignored here and shows up on the next real call.
    prefetch_workers_[node]->Post([this, node, request] {
      if (std::shared_ptr<NodeClient> client = cluster_->client(node)) {
        client->Prefetch(*request).status().IgnoreError();
      }
      absl::MutexLock lock(&mu_);
      prefetch_outstanding_[node] = false;
    });
  }
  absl::MutexLock lock(&mu_);
  stats_.hints_riding += riding;
  stats_.hints_separate += sent;
  stats_.hints_dropped += dropped;
  stats_.prefetch_calls += calls;
}

}  // namespace colibri::coordinator
