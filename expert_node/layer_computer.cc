#include "expert_node/layer_computer.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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
      miss_loaders_(options.miss_loaders > 0 ? std::make_unique<TaskQueue>(options.miss_loaders, 0)
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

// A request's missing experts, each read by a miss loader (in flight
// together); the request takes them as they land. The destructor waits for
// every read still in flight (their tasks refer to this object), so an early
// return leaves nothing behind: the handles of reads never taken are released
// with it.
//
// Thread-safety: the constructor, Next, AllLanded and the destructor on the
// request's thread; the loaders only land results.
class LayerComputer::MissReads {
 public:
  struct Landed {
    int32_t expert;
    absl::StatusOr<PinnedExpert> handle;
  };

  // Posts a read of each of `experts` (of `fingerprint`'s `layer`) to
  // `loaders` (read here when it is shutting down).
  MissReads(TaskQueue* loaders, RamTier* tier, const std::string& fingerprint, int32_t layer,
            const std::vector<int32_t>& experts)
      : total_(experts.size()) {
    for (const int32_t expert : experts) {
      auto read = [this, tier, id = ExpertId{fingerprint, layer, expert}] {
        absl::StatusOr<PinnedExpert> handle = tier->Acquire(id);
        absl::MutexLock lock(&mu_);
        landed_.push_back(Landed{id.expert, std::move(handle)});
        ++finished_;
      };
      if (!loaders->Post(read)) read();
    }
  }
  MissReads(const MissReads&) = delete;
  MissReads& operator=(const MissReads&) = delete;
  ~MissReads() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](MissReads* r)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return r->finished_ == r->total_; },
        this));
  }

  // Whether some read has not been taken by Next yet.
  bool pending() const { return taken_ < total_; }
  // Whether every read has landed (taken or not).
  bool AllLanded() {
    absl::MutexLock lock(&mu_);
    return finished_ == total_;
  }
  // Blocks until a read not yet taken has landed, then takes every such one,
  // in landing order; adds the time it blocked to *blocked_micros. Only while
  // pending().
  std::vector<Landed> Next(int64_t* blocked_micros) {
    absl::MutexLock lock(&mu_);
    if (landed_.empty()) {
      const absl::Time start = absl::Now();
      mu_.Await(absl::Condition(
          +[](MissReads* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return !r->landed_.empty(); },
          this));
      *blocked_micros += absl::ToInt64Microseconds(absl::Now() - start);
    }
    std::vector<Landed> out = std::move(landed_);
    landed_.clear();
    taken_ += out.size();
    return out;
  }

 private:
  const size_t total_;
  size_t taken_ = 0;  // request thread only
  absl::Mutex mu_;
  std::vector<Landed> landed_ ABSL_GUARDED_BY(mu_);  // landed, not yet taken
  size_t finished_ ABSL_GUARDED_BY(mu_) = 0;         // landed, taken or not
};

absl::Status LayerComputer::ComputeUncounted(const v1::ComputeLayerRequest& request,
                                             v1::ComputeLayerReply* reply) {
  const absl::Time start = absl::Now();
  const std::string& fingerprint = request.model_fingerprint();
  COLIBRI_ASSIGN_OR_RETURN(const ModelInfo model, registry_->Find(fingerprint));
  COLIBRI_ASSIGN_OR_RETURN(const LayerWork work,
                           ParseLayerRequest(request, model, options_.max_reply_bytes));
  std::vector<int32_t> experts(work.route_expert.begin(), work.route_expert.end());
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());

  // Held until the outputs are computed.
  absl::flat_hash_map<int32_t, PinnedExpert> pinned;
  // Time the request's compute waited for the disk.
  int64_t disk_wait_micros = 0;
  int32_t hits = 0;
  int32_t misses = 0;
  auto hold = [&](int32_t expert, PinnedExpert handle) {
    if (handle.hit()) {
      ++hits;
    } else {
      ++misses;
    }
    if (usage_ != nullptr) usage_->Record(ExpertId{fingerprint, work.layer, expert}, absl::Now());
    pinned.insert_or_assign(expert, std::move(handle));
  };
  // Acquires on the request's thread, waiting for the disk on a miss.
  auto acquire_here = [&](int32_t expert) -> absl::Status {
    COLIBRI_ASSIGN_OR_RETURN(PinnedExpert handle,
                             tier_->Acquire(ExpertId{fingerprint, work.layer, expert}));
    disk_wait_micros += handle.disk_wait_micros();
    hold(expert, std::move(handle));
    return absl::OkStatus();
  };
  auto lookup = [&](int layer, int expert) -> absl::StatusOr<moe::ExpertWeights> {
    if (layer != work.layer) {
      return absl::InternalError(absl::StrCat("layer ", work.layer, ": asked for layer ", layer));
    }
    if (pinned.find(expert) == pinned.end()) COLIBRI_RETURN_IF_ERROR(acquire_here(expert));
    return pinned.find(expert)->second.weights();
  };
  LayerRows rows(work, &pool_);
  if (miss_loaders_ == nullptr) {
    COLIBRI_RETURN_IF_ERROR(rows.Compute(experts, lookup));
    if (options_.on_part_computed) options_.on_part_computed(work.layer, experts);
  } else {
    std::vector<int32_t> resident, missing;
    for (const int32_t expert : experts) {
      (tier_->Contains(ExpertId{fingerprint, work.layer, expert}) ? resident : missing)
          .push_back(expert);
    }
    MissReads reads(miss_loaders_.get(), tier_, fingerprint, work.layer, missing);
    // A resident evicted since Contains is read here, while the others fly.
    for (const int32_t expert : resident) COLIBRI_RETURN_IF_ERROR(acquire_here(expert));
    auto compute_part = [&](const std::vector<int32_t>& part) -> absl::Status {
      COLIBRI_RETURN_IF_ERROR(rows.Compute(part, lookup));
      if (!reads.AllLanded()) overlapped_experts_.fetch_add(part.size());
      if (options_.on_part_computed) options_.on_part_computed(work.layer, part);
      return absl::OkStatus();
    };
    if (!resident.empty()) COLIBRI_RETURN_IF_ERROR(compute_part(resident));
    while (reads.pending()) {
      std::vector<int32_t> part;
      for (MissReads::Landed& landed : reads.Next(&disk_wait_micros)) {
        // The first failed read to land fails the request (the store's
        // errors name the expert); nothing is in the reply yet.
        COLIBRI_RETURN_IF_ERROR(landed.handle.status());
        hold(landed.expert, std::move(*landed.handle));
        part.push_back(landed.expert);
      }
      COLIBRI_RETURN_IF_ERROR(compute_part(part));
    }
  }
  std::vector<float> out;  // [n_routes or n_tokens][n_embd]
  COLIBRI_RETURN_IF_ERROR(rows.Finish(&out));
  pinned.clear();

  EncodeLayerOutputs(work, out, reply->mutable_outputs());
  reply->set_compute_micros(absl::ToInt64Microseconds(absl::Now() - start) - disk_wait_micros);
  reply->set_disk_wait_micros(disk_wait_micros);
  reply->set_ram_hits(hits);
  reply->set_ram_misses(misses);
  requests_.fetch_add(1);
  routes_.fetch_add(static_cast<uint64_t>(work.n_routes()));
  disk_wait_micros_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(disk_wait_micros, 0)));
  return absl::OkStatus();
}

LayerComputer::Counters LayerComputer::counters() const {
  Counters c;
  c.requests = requests_.load();
  c.routes = routes_.load();
  c.in_flight = in_flight_.load();
  c.overlapped_experts = overlapped_experts_.load();
  c.disk_wait_micros = disk_wait_micros_.load();
  return c;
}

}  // namespace colibri::expert_node
