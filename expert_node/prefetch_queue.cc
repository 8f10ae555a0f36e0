#include "expert_node/prefetch_queue.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "expert_node/expert_key.h"

namespace colibri::expert_node {

PrefetchQueue::PrefetchQueue(const Options& options, ExpertStore* store, RamTier* tier,
                             const ModelRegistry* registry)
    : store_(store),
      tier_(tier),
      registry_(registry),
      track_limit_(4 * std::max<size_t>(options.queue_limit, 16)),
      loads_(std::make_unique<TaskQueue>(std::max(options.io_threads, 1), options.queue_limit)) {}

PrefetchQueue::~PrefetchQueue() { loads_.reset(); }

bool PrefetchQueue::Hint(const v1::ExpertKey& key) {
  hints_.fetch_add(1);
  absl::StatusOr<ExpertId> parsed = ParseExpertKey(key);
  if (!parsed.ok() || !registry_->Covers(*parsed)) {
    ignored_.fetch_add(1);
    return false;
  }
  ExpertId id = std::move(*parsed);
  // A resident's hint still tells the policy: the expert is wanted soon.
  if (tier_->HintResident(id)) {
    resident_.fetch_add(1);
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = tracked_.try_emplace(id);
    if (!inserted && it->second.stage != Stage::kLoaded) {
      it->second.stale = false;  // hinted again: wanted after all
      coalesced_.fetch_add(1);
      return false;
    }
    it->second = Tracked{};  // loaded earlier, evicted since: a new prefetch
  }
  // Counted before Post so that issued >= what the pool has seen.
  issued_.fetch_add(1);
  if (!loads_->Post([this, id] { Load(id); })) {
    issued_.fetch_sub(1);
    queue_full_.fetch_add(1);
    absl::MutexLock lock(&mu_);
    tracked_.erase(id);
    return false;
  }
  return true;
}

int32_t PrefetchQueue::HintAll(const google::protobuf::RepeatedPtrField<v1::ExpertKey>& keys) {
  int32_t queued = 0;
  for (const v1::ExpertKey& key : keys) {
    if (Hint(key)) ++queued;
  }
  return queued;
}

void PrefetchQueue::LayerRequested(const v1::ComputeLayerRequest& request) {
  absl::flat_hash_set<int32_t> routed;
  for (const v1::Route& route : request.routes()) routed.insert(route.expert());
  std::vector<ExpertId> tell_tier;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = tracked_.begin(); it != tracked_.end();) {
      const ExpertId& id = it->first;
      Tracked& t = it->second;
      const bool decided =
          id.fingerprint == request.model_fingerprint() && id.layer <= request.layer();
      const bool wrong = decided && (id.layer < request.layer() || !routed.contains(id.expert));
      if (wrong && t.stage == Stage::kQueued) t.stale = true;
      if (wrong && t.stage != Stage::kQueued) tell_tier.push_back(id);
      if (decided && t.stage == Stage::kLoaded) {
        tracked_.erase(it++);  // absl::flat_hash_map: erase does not move the others
      } else {
        ++it;
      }
    }
  }
  for (const ExpertId& id : tell_tier) tier_->PrefetchStale(id);
}

void PrefetchQueue::Load(const ExpertId& id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = tracked_.find(id);
    if (it != tracked_.end() && it->second.stale) {
      tracked_.erase(it);
      stale_.fetch_add(1);
      return;
    }
    if (it != tracked_.end()) it->second.stage = Stage::kLoading;
  }
  absl::StatusOr<uint64_t> bytes = store_->RamBytes(id);
  bool ignored = absl::IsNotFound(bytes.status());
  bool loaded = false;
  if (bytes.ok()) {
    // The tier counts resident / coalesced / no-room / cancelled outcomes
    // itself; a hint is advice, so a failure is simply not acted on.
    const absl::Status s = tier_->Prefetch(id, *bytes);
    ignored = absl::IsNotFound(s);  // deleted meanwhile
    loaded = s.ok();
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = tracked_.find(id);
    if (it != tracked_.end() && loaded) {
      it->second.stage = Stage::kLoaded;
    } else if (it != tracked_.end()) {
      tracked_.erase(it);
    }
    if (tracked_.size() > track_limit_) {
      absl::erase_if(tracked_, [](const auto& t) { return t.second.stage == Stage::kLoaded; });
    }
  }
  // Counted once the hint no longer pends: whoever sees the count and hints
  // the same expert again gets a new prefetch, not a coalesced one.
  if (ignored) ignored_.fetch_add(1);
}

PrefetchQueue::Counters PrefetchQueue::counters() const {
  Counters c;
  c.hints = hints_.load();
  c.issued = issued_.load();
  c.ignored = ignored_.load();
  c.resident = resident_.load();
  c.coalesced = coalesced_.load();
  c.queue_full = queue_full_.load();
  c.stale = stale_.load();
  return c;
}

}  // namespace colibri::expert_node
