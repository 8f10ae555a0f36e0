// Fake expert nodes for RemoteExpertBackend tests: random float32 experts,
// nodes that compute ComputeLayer with the same kernels as the local backend
// (and can be told to fail, to be late, to hold their replies or to report
// times), random batches,
// and a fixture that builds a Cluster over them with a fake clock.
#ifndef COLIBRI_TESTS_COORDINATOR_CLUSTER_FAKE_EXPERT_NODES_H_
#define COLIBRI_TESTS_COORDINATOR_CLUSTER_FAKE_EXPERT_NODES_H_

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/cluster/remote_expert_backend.h"
#include "gtest/gtest.h"
#include "model/moe/expert_ffn.h"
#include "model/moe/local_expert_backend.h"
#include "tests/coordinator/cluster/fake_node_client.h"

namespace colibri::coordinator::testing {

constexpr int kLayers = 2;
constexpr int kExperts = 8;
constexpr int64_t kEmbd = 16;
constexpr int64_t kFf = 24;

// Random float32 experts: experts[layer][expert].
class FakeModel {
 public:
  FakeModel() {
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 0.3f);
    experts_.resize(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      for (int e = 0; e < kExperts; ++e) {
        moe::ExpertWeights w;
        w.gate = Matrix(kFf, kEmbd, rng, dist);
        w.up = Matrix(kFf, kEmbd, rng, dist);
        w.down = Matrix(kEmbd, kFf, rng, dist);
        experts_[l].push_back(w);
      }
    }
  }
  const std::vector<std::vector<moe::ExpertWeights>>& experts() const { return experts_; }

 private:
  ops::WeightMatrix Matrix(int64_t rows, int64_t cols, std::mt19937& rng,
                           std::normal_distribution<float>& dist) {
    storage_.push_back(std::make_unique<std::vector<float>>(rows * cols));
    for (float& v : *storage_.back()) v = dist(rng);
    ops::WeightMatrix m;
    m.type = ops::TensorType::kF32;
    m.data = reinterpret_cast<const uint8_t*>(storage_.back()->data());
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = cols * sizeof(float);
    return m;
  }
  std::vector<std::unique_ptr<std::vector<float>>> storage_;
  std::vector<std::vector<moe::ExpertWeights>> experts_;
};

// A node computing ComputeLayer with ExpertFfn, one route at a time (batch
// invariance makes that equal to any grouping). Can be told to fail.
class FakeNode : public FakeNodeClient {
 public:
  FakeNode(std::string address, const FakeModel* model)
      : FakeNodeClient(std::move(address)), model_(model) {}

  absl::StatusOr<v1::ComputeLayerReply> ComputeLayer(
      const v1::ComputeLayerRequest& request) override {
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(request);
    }
    return Answer(request);
  }
  // The reply to `request` now (the failure the node is told to give, or the
  // experts' outputs).
  absl::StatusOr<v1::ComputeLayerReply> Answer(const v1::ComputeLayerRequest& request) {
    {
      absl::MutexLock lock(&mu_);
      if (down()) return absl::UnavailableError(address() + " is down");
      if (garbage_) return v1::ComputeLayerReply();
      if (!lose_.ok()) return lose_;
    }
    const ops::NumericPath path = request.path() == v1::NUMERIC_PATH_EXACT
                                      ? ops::NumericPath::kExact
                                      : ops::NumericPath::kFast;
    const float* hidden = reinterpret_cast<const float*>(request.hidden().data().data());
    v1::ComputeLayerReply reply;
    v1::Tensor* out = reply.mutable_outputs();
    out->set_dtype(v1::DTYPE_F32);
    out->add_shape(request.routes_size());
    out->add_shape(kEmbd);
    std::string* data = out->mutable_data();
    data->resize(request.routes_size() * kEmbd * sizeof(float));
    moe::ExpertFfnScratch scratch;
    for (int i = 0; i < request.routes_size(); ++i) {
      const v1::Route& r = request.routes(i);
      moe::ExpertFfn(model_->experts()[request.layer()][r.expert()], hidden + r.token() * kEmbd, 1,
                     reinterpret_cast<float*>(&(*data)[i * kEmbd * sizeof(float)]), path, nullptr,
                     &scratch);
    }
    absl::MutexLock lock(&mu_);
    if (report_after_.has_value()) {
      absl::SleepFor(*report_after_);
      reply.set_compute_micros(reported_compute_);
      reply.set_disk_wait_micros(reported_disk_);
    }
    return reply;
  }
  // Replies report these times, after sleeping `after` (so that the call
  // takes at least that long).
  void set_reported_micros(absl::Duration after, int64_t compute, int64_t disk) {
    absl::MutexLock lock(&mu_);
    report_after_ = after;
    reported_compute_ = compute;
    reported_disk_ = disk;
  }
  // Records the deadline; a late node answers DeadlineExceeded at once, as a
  // node that never answers would once `deadline` passed; a holding node
  // keeps the call until Release (or until it is cancelled: Cancelled).
  void StartComputeLayer(const v1::ComputeLayerRequest& request, absl::Duration deadline,
                         ComputeQueue* queue, void* tag) override {
    {
      absl::MutexLock lock(&mu_);
      deadlines_.push_back(deadline);
      if (late_) {
        requests_.push_back(request);
        queue->Complete(tag, absl::DeadlineExceededError("Deadline Exceeded"));
        return;
      }
      if (hold_) {
        requests_.push_back(request);
        held_.push_back(Held{request, queue, tag});
        queue->StartedElsewhere(tag, [this, queue, tag] {
          bool found = false;
          {
            absl::MutexLock lock(&mu_);
            for (auto it = held_.begin(); it != held_.end(); ++it) {
              if (it->tag != tag) continue;
              held_.erase(it);
              ++cancelled_;
              found = true;
              break;
            }
          }
          if (found) queue->Complete(tag, absl::CancelledError("Cancelled"));
        });
        return;
      }
    }
    NodeClient::StartComputeLayer(request, deadline, queue, tag);
  }
  // While set, ComputeLayer calls started are held (a slow or hung node).
  void set_hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  // Answers the calls held now, in order (from the caller's thread, as a
  // node whose replies come in late); returns how many.
  int Release() {
    std::vector<Held> held;
    {
      absl::MutexLock lock(&mu_);
      held = std::exchange(held_, {});
    }
    for (Held& h : held) h.queue->Complete(h.tag, Answer(h.request));
    return static_cast<int>(held.size());
  }
  // Blocks until at least `n` calls are held (true), or for at most 30 s
  // (false: what the test waited for never came).
  bool AwaitHeld(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int>(held_.size()) >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
  }
  // Held calls cancelled by their caller so far.
  int cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  void set_late(bool late) {
    absl::MutexLock lock(&mu_);
    late_ = late;
  }
  std::vector<absl::Duration> TakeDeadlines() {
    absl::MutexLock lock(&mu_);
    return std::exchange(deadlines_, {});
  }
  // Records the call; blocks while hold_prefetch is set.
  absl::StatusOr<v1::PrefetchReply> Prefetch(const v1::PrefetchRequest& request) override {
    absl::MutexLock lock(&mu_);
    prefetches_.push_back(request);
    auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !hold_prefetch_; };
    mu_.Await(absl::Condition(&released));
    return v1::PrefetchReply();
  }
  // Every ComputeLayer answers `status` (OK: computes again).
  void set_lose(absl::Status status) {
    absl::MutexLock lock(&mu_);
    lose_ = std::move(status);
  }
  void set_garbage(bool garbage) {
    absl::MutexLock lock(&mu_);
    garbage_ = garbage;
  }
  std::vector<v1::ComputeLayerRequest> TakeRequests() {
    absl::MutexLock lock(&mu_);
    return std::exchange(requests_, {});
  }
  void set_hold_prefetch(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_prefetch_ = hold;
  }
  std::vector<v1::PrefetchRequest> TakePrefetches() {
    absl::MutexLock lock(&mu_);
    return std::exchange(prefetches_, {});
  }

 private:
  struct Held {
    v1::ComputeLayerRequest request;
    ComputeQueue* queue;
    void* tag;
  };
  const FakeModel* const model_;
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  bool garbage_ ABSL_GUARDED_BY(mu_) = false;
  bool late_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::Duration> deadlines_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Duration> report_after_ ABSL_GUARDED_BY(mu_);
  int64_t reported_compute_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reported_disk_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status lose_ ABSL_GUARDED_BY(mu_);
  bool hold_prefetch_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::ComputeLayerRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::PrefetchRequest> prefetches_ ABSL_GUARDED_BY(mu_);
};

struct Batch {
  int n_tokens = 0;
  int k = 0;
  std::vector<float> x;          // [n_tokens][kEmbd]
  std::vector<int32_t> experts;  // [n_tokens][k]
  std::vector<float> weights;    // [n_tokens][k]
  moe::ExpertBatch view(int layer) const {
    moe::ExpertBatch b;
    b.layer = layer;
    b.n_tokens = n_tokens;
    b.n_embd = kEmbd;
    b.k = k;
    b.x = x.data();
    b.experts = experts.data();
    b.weights = weights.data();
    return b;
  }
};

inline Batch RandomBatch(int n_tokens, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  Batch b;
  b.n_tokens = n_tokens;
  b.k = k;
  b.x.resize(n_tokens * kEmbd);
  for (float& v : b.x) v = dist(rng);
  for (int t = 0; t < n_tokens; ++t) {
    std::vector<int> all(kExperts);
    for (int e = 0; e < kExperts; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    for (int r = 0; r < k; ++r) {
      b.experts.push_back(all[r]);
      b.weights.push_back(1.0f / k);
    }
  }
  return b;
}

class RemoteExpertBackendTest : public ::testing::Test {
 protected:
  // probe_interval: how soon an unhealthy node is probed back to healthy.
  // choice: ClusterOptions::replica_choice.
  void MakeCluster(int n_nodes, int replicas, absl::Duration probe_interval = absl::Milliseconds(5),
                   ReplicaChoice choice = ReplicaChoice::kBalance) {
    std::vector<std::unique_ptr<NodeClient>> clients;
    std::vector<Cluster::Node> nodes;
    nodes_.clear();
    for (int i = 0; i < n_nodes; ++i) {
      auto node = std::make_unique<FakeNode>("fake:" + std::to_string(i), &model_);
      nodes_.push_back(node.get());
      Cluster::Node n;
      n.address = node->address();
      n.node_id = node->address();
      nodes.push_back(n);
      clients.push_back(std::move(node));
    }
    ClusterOptions options = options_;
    options.replicas = replicas;
    options.replica_choice = choice;
    options.clock = [this] { return now_; };
    options.probe_interval = probe_interval;
    options.log = &log_;
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Create(
        options, "fp", std::vector<int>(kLayers, kExperts), std::move(clients), std::move(nodes));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // out of the local backend and of the remote one for the same batch.
  void RunBoth(const Batch& b, int layer, ops::NumericPath path, RemoteExpertBackend* remote,
               std::vector<float>* local_out, std::vector<float>* remote_out) {
    local_out->assign(b.n_tokens * b.k * kEmbd, -1.0f);
    remote_out->assign(b.n_tokens * b.k * kEmbd, -2.0f);
    moe::LocalExpertBackend local(&model_.experts(), kExperts, path, &pool_);
    local.Submit(b.view(layer), local_out->data());
    ASSERT_TRUE(local.Wait().ok());
    remote->Submit(b.view(layer), remote_out->data());
    ASSERT_TRUE(remote->Wait().ok());
  }

  // The other ClusterOptions of MakeCluster (hedging, deadlines).
  ClusterOptions options_;
  // ClusterOptions::clock of the cluster: moves only when a test moves it.
  absl::Time now_ = absl::UnixEpoch() + absl::Hours(1);
  FakeModel model_;
  ThreadPool pool_{2};
  std::ostringstream log_;
  std::vector<FakeNode*> nodes_;
  std::unique_ptr<Cluster> cluster_;
};

}  // namespace colibri::coordinator::testing

#endif  // COLIBRI_TESTS_COORDINATOR_CLUSTER_FAKE_EXPERT_NODES_H_
