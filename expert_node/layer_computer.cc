#include "expert_node/layer_computer.h"

#include <utility>
#include <vector>

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
            ThreadPool::WithSpinOverride(ThreadPool::ForIntermittentJobs(), options.spin_us)) {}

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

  std::vector<PinnedExpert> pinned;  // held until the outputs are computed
  int64_t disk_wait_micros = 0;
  int32_t hits = 0;
  int32_t misses = 0;
  const absl::Time now = absl::Now();
  auto lookup = [&](int layer, int expert) -> absl::StatusOr<moe::ExpertWeights> {
    ExpertId id{request.model_fingerprint(), layer, expert};
    COLIBRI_ASSIGN_OR_RETURN(PinnedExpert handle, tier_->Acquire(id));
    if (usage_ != nullptr) usage_->Record(id, now);
    if (handle.hit()) {
      ++hits;
    } else {
      ++misses;
    }
    disk_wait_micros += handle.disk_wait_micros();
    pinned.push_back(std::move(handle));
    return pinned.back().weights();
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

LayerComputer::Counters LayerComputer::counters() const {
  Counters c;
  c.requests = requests_.load();
  c.routes = routes_.load();
  c.in_flight = in_flight_.load();
  return c;
}

}  // namespace colibri::expert_node
