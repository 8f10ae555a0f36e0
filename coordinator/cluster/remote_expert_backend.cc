#include "coordinator/cluster/remote_expert_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
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
  static_assert(sizeof(RemoteBackendStats) == 16 * sizeof(int64_t),
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
  return *this;
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
  submit_status_ = absl::OkStatus();
  placement_ = &cluster_->placement();
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
  if (placement.replicas() == 1) return std::vector<int>(placement.n_expert(layer), 0);
  switch (cluster_->replica_choice()) {
    case ReplicaChoice::kFastest:
      return ChooseFastestReplicas(placement, layer, work, cluster_->Speeds(placement.n_nodes()),
                                   healthy);
    case ReplicaChoice::kBalance:
      return BalanceReplicas(placement, layer, work, healthy);
    case ReplicaChoice::kPrimary:
      break;
  }
  return std::vector<int>(placement.n_expert(layer), 0);
}

int RemoteExpertBackend::OwnerAt(const Placement& placement, int32_t e, int attempt) const {
  const int replicas = placement.replicas();
  return placement.Owners(batch_.layer, e)[(first_[e] + attempt) % replicas];
}

std::vector<bool> RemoteExpertBackend::Healthy(int n_nodes) const {
  std::vector<bool> healthy(n_nodes);
  for (int i = 0; i < n_nodes; ++i) healthy[i] = cluster_->healthy(i);
  return healthy;
}

void RemoteExpertBackend::Dispatch(const std::vector<int64_t>& routes, bool send_hints) {
  const Placement& placement = *placement_;
  const int replicas = placement.replicas();
  const int n_nodes = placement.n_nodes();
  const std::vector<bool> healthy = Healthy(n_nodes);

  const size_t first_new = calls_.size();
  node_slot_.assign(n_nodes, -1);
  for (int64_t route : routes) {
    const int32_t e = batch_.experts[route];
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
  if (send_hints) SendHints(placement, healthy);

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
    for (int64_t n : expert_tokens_) call->work += ExpertWork(n);
    EncodeRequest(call);
    const int64_t request_bytes = static_cast<int64_t>(call->request.ByteSizeLong());
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

absl::Status RemoteExpertBackend::Wait() {
  if (!submit_status_.ok()) return std::exchange(submit_status_, absl::OkStatus());
  int replicas = placement_->replicas();
  // The slowest successful call's wait, and what its node reported.
  double slowest_wait = -1;
  int64_t slowest_compute = 0;
  int64_t slowest_disk = 0;
  size_t first = 0;
  while (first < calls_.size()) {
    // Every call of [first, end) is outstanding: take them all.
    while (queue_.outstanding() > 0) {
      ComputeQueue::Completion done = queue_.Next();
      Call* call = static_cast<Call*>(done.tag);
      call->reply = std::move(done.reply);
      call->wait_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - call->start).count();
    }
    std::vector<int64_t> retry;
    const size_t end = calls_.size();
    for (size_t c = first; c < end; ++c) {
      const Call& call = *calls_[c];
      absl::Status status = call.reply.ok() ? Scatter(call) : call.reply.status();
      if (absl::IsDeadlineExceeded(status)) {
        status = absl::DeadlineExceededError(
            absl::StrCat(cluster_->node(call.node).address, " ComputeLayer: no reply within ",
                         absl::FormatDuration(call.deadline), " (", status.message(), ")"));
      }
      const int64_t reply_bytes =
          call.reply.ok() ? static_cast<int64_t>(call.reply->ByteSizeLong()) : 0;
      // What the node says it spent on the call (clamped: a reply is untrusted;
      // summed as doubles, so that no reported value can overflow).
      const double node_seconds =
          call.reply.ok()
              ? 1e-6 * (std::max(0.0, static_cast<double>(call.reply->compute_micros())) +
                        std::max(0.0, static_cast<double>(call.reply->disk_wait_micros())))
              : 0.0;
      cluster_->RecordCall(call.node, static_cast<int64_t>(call.request.ByteSizeLong()),
                           reply_bytes, call.wait_seconds,
                           std::min(node_seconds, call.wait_seconds), call.work, status);
      if (call.reply.ok() && call.wait_seconds > slowest_wait) {
        // Untrusted figures: each kept within the call's own wait.
        const double wait_micros = 1e6 * call.wait_seconds;
        slowest_wait = call.wait_seconds;
        slowest_compute = static_cast<int64_t>(
            std::min(wait_micros, std::max(0.0, static_cast<double>(call.reply->compute_micros()))));
        slowest_disk = static_cast<int64_t>(std::min(
            wait_micros, std::max(0.0, static_cast<double>(call.reply->disk_wait_micros()))));
      }
      if (call.reply.ok()) {
        absl::MutexLock lock(&mu_);
        stats_.bytes_received += reply_bytes;
        stats_.payload_received += static_cast<int64_t>(call.reply->outputs().data().size());
      }
      if (status.ok()) continue;
      // A node retired while this layer was under way: the placement that
      // retired it is installed, so its experts have moved. Route the call's
      // experts again by that placement; the node is not at fault.
      if (call.retired && &cluster_->placement() != placement_) {
        placement_ = &cluster_->placement();
        replicas = placement_->replicas();
        AddWorkers(placement_->n_nodes());  // nodes that joined since Submit
        for (int64_t route : call.routes) {
          // Owners order of the new placement, from its primary.
          first_[batch_.experts[route]] = 0;
          attempt_[batch_.experts[route]] = 0;
        }
        retry.insert(retry.end(), call.routes.begin(), call.routes.end());
        continue;
      }
      // DataLoss / NotFound answered by the node: it lost (a stored value
      // failed its checksum and was dropped) or misses an expert of this
      // call. That is the expert's loss, not the node's: have it re-sent and
      // keep the node. A reply that does not parse (Scatter) is the node's.
      if (!call.reply.ok() &&
          (absl::IsDataLoss(call.reply.status()) || absl::IsNotFound(call.reply.status()))) {
        cluster_->ReportExpertLoss(call.node, status);
      } else {
        cluster_->MarkUnhealthy(call.node, status);
      }
      // Move each expert of the call past this node; all its routes in this
      // layer went here, so one step per expert.
      bool moved = false;
      for (int64_t route : call.routes) {
        const int32_t e = batch_.experts[route];
        if (attempt_[e] < replicas && OwnerAt(*placement_, e, attempt_[e]) == call.node) {
          ++attempt_[e];
        }
        moved = moved || attempt_[e] < replicas;
      }
      if (moved) {
        cluster_->RecordFailover(call.node);
        absl::MutexLock lock(&mu_);
        ++stats_.failovers;
      }
      retry.insert(retry.end(), call.routes.begin(), call.routes.end());
    }
    first = end;
    if (!retry.empty()) Dispatch(retry, /*send_hints=*/false);
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.slowest_compute_micros += slowest_compute;
    stats_.slowest_disk_micros += slowest_disk;
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
}

void RemoteExpertBackend::SendHints(const Placement& placement, const std::vector<bool>& healthy) {
  if (hints_.empty()) return;
  const int n_nodes = placement.n_nodes();
  std::vector<std::unique_ptr<v1::PrefetchRequest>> separate(n_nodes);
  int64_t riding = 0;
  int64_t dropped = 0;
  auto valid = [&](int layer, int32_t e) {
    return layer > batch_.layer && layer < placement.n_layer() && e >= 0 &&
           e < placement.n_expert(layer);
  };
  // [layer] of the hinted layers: the replica each hinted expert starts from,
  // chosen as Submit would choose for a batch of those experts.
  absl::flat_hash_map<int, std::vector<int>> start;
  if (placement.replicas() > 1) {
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
    for (int a = 0; a < placement.replicas(); ++a) {
      const int node = owners[(first + a) % placement.replicas()];
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
    const int slot = node_slot_[owner];
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
