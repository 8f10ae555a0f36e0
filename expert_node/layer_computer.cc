#include "expert_node/layer_computer.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/synchronization/blocking_counter.h"

#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "expert_node/layer_compute.h"

namespace colibri::expert_node {

LayerComputer::LayerComputer(const Options& options, const ModelRegistry* registry, RamTier* tier,
                             UsageCounts* usage)
    : options_(options),
      registry_(registry),
      tier_(tier),
      usage_(usage),
      pool_(options.threads,
            ThreadPool::WithSpinOverride(ThreadPool::ForIntermittentJobs(), options.spin_us)),
      miss_loaders_(options.miss_loaders > 0
                        ? std::make_unique<TaskQueue>(options.miss_loaders, 0)
                        : nullptr) {}

absl::Status LayerComputer::Compute(const v1::ComputeLayerRequest& request,
                                    v1::ComputeLayerReply* reply) {
  in_flight_.fetch_add(1);
  const absl::Time start = absl::Now();
  const absl::Status s = ComputeUncounted(request, reply);
  seconds_.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  in_flight_.fetch_sub(1);
  return s;
}

absl::Status LayerComputer::ComputeUncounted(const v1::ComputeLayerRequest& request,
                                             v1::ComputeLayerReply* reply) {
  const absl::Time start = absl::Now();
  COLIBRI_ASSIGN_OR_RETURN(const ModelInfo model, registry_->Find(request.model_fingerprint()));
  COLIBRI_ASSIGN_OR_RETURN(const LayerWork work,
                           ParseLayerRequest(request, model, options_.max_reply_bytes));

  // Held until the outputs are computed.
  absl::flat_hash_map<int32_t, PinnedExpert> pinned;
  const absl::Time acquire_start = absl::Now();
  if (miss_loaders_ != nullptr) {
    std::vector<int32_t> experts(work.route_expert.begin(), work.route_expert.end());
    std::sort(experts.begin(), experts.end());
    experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
    COLIBRI_RETURN_IF_ERROR(AcquireAll(request.model_fingerprint(), work.layer, experts, &pinned));
  }
  int64_t disk_wait_micros = 0;
  int32_t hits = 0;
  int32_t misses = 0;
  bool any_miss = false;
  const absl::Time now = absl::Now();
  auto count = [&](const PinnedExpert& handle) {
    if (handle.hit()) {
      ++hits;
    } else {
      ++misses;
      any_miss = true;
    }
    disk_wait_micros += handle.disk_wait_micros();
  };
  for (const auto& [expert, handle] : pinned) {
    count(handle);
    if (usage_ != nullptr) usage_->Record(ExpertId{request.model_fingerprint(), work.layer, expert}, now);
  }
  // Loaded together, the misses' waits overlap: the request waited for the
  // disk as long as the acquisition took, not the sum of the waits.
  if (miss_loaders_ != nullptr) {
    disk_wait_micros = any_miss ? absl::ToInt64Microseconds(now - acquire_start) : 0;
  }
  auto lookup = [&](int layer, int expert) -> absl::StatusOr<moe::ExpertWeights> {
    if (auto it = pinned.find(expert); it != pinned.end() && layer == work.layer) {
      return it->second.weights();
    }
    ExpertId id{request.model_fingerprint(), layer, expert};
    COLIBRI_ASSIGN_OR_RETURN(PinnedExpert handle, tier_->Acquire(id));
    if (usage_ != nullptr) usage_->Record(id, now);
    count(handle);
    auto [it, inserted] = pinned.insert_or_assign(expert, std::move(handle));
    return it->second.weights();
  };
  std::vector<float> out;  // [n_routes or n_tokens][n_embd]
  COLIBRI_RETURN_IF_ERROR(ComputeLayerWork(work, lookup, &pool_, &out));
  pinned.clear();

  EncodeLayerOutputs(work, out, reply->mutable_outputs());
  reply->set_compute_micros(absl::ToInt64Microseconds(absl::Now() - start) - disk_wait_micros);
  reply->set_disk_wait_micros(disk_wait_micros);
  reply->set_ram_hits(hits);
  reply->set_ram_misses(misses);
  requests_.fetch_add(1);
  routes_.fetch_add(static_cast<uint64_t>(work.n_routes()));
  return absl::OkStatus();
}

absl::Status LayerComputer::AcquireAll(const std::string& fingerprint, int32_t layer,
                                       const std::vector<int32_t>& experts,
                                       absl::flat_hash_map<int32_t, PinnedExpert>* pinned) {
  std::vector<int32_t> missing;
  for (const int32_t expert : experts) {
    ExpertId id{fingerprint, layer, expert};
    if (!tier_->Contains(id)) {
      missing.push_back(expert);
      continue;
    }
    COLIBRI_ASSIGN_OR_RETURN(PinnedExpert handle, tier_->Acquire(id));
    pinned->insert_or_assign(expert, std::move(handle));
  }
  if (missing.empty()) return absl::OkStatus();
  // Each loader blocks in the store's read queue, so the reads are in
  // flight together. Each writes its own result before counting down.
  std::vector<absl::StatusOr<PinnedExpert>> results;
  results.reserve(missing.size());
  for (size_t i = 0; i < missing.size(); ++i) results.emplace_back(absl::UnknownError("not loaded"));
  absl::BlockingCounter remaining(static_cast<int>(missing.size()));
  for (size_t i = 0; i < missing.size(); ++i) {
    auto load = [this, &results, &remaining, &fingerprint, layer, expert = missing[i], i] {
      results[i] = tier_->Acquire(ExpertId{fingerprint, layer, expert});
      remaining.DecrementCount();
    };
    if (!miss_loaders_->Post(load)) load();  // shutting down: load here
  }
  remaining.Wait();
  for (size_t i = 0; i < missing.size(); ++i) {
    COLIBRI_RETURN_IF_ERROR(results[i].status());
    pinned->insert_or_assign(missing[i], std::move(*results[i]));
  }
  return absl::OkStatus();
}

LayerComputer::Counters LayerComputer::counters() const {
  Counters c;
  c.requests = requests_.load();
  c.routes = routes_.load();
  c.in_flight = in_flight_.load();
  return c;
}

}  // namespace colibri::expert_node
