#include "expert_node/prefetch_queue.h"

#include <algorithm>
#include <utility>

#include "expert_node/expert_key.h"

namespace colibri::expert_node {

PrefetchQueue::PrefetchQueue(const Options& options, ExpertStore* store, RamTier* tier,
                             const ModelRegistry* registry)
    : store_(store),
      tier_(tier),
      registry_(registry),
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
  if (tier_->Contains(id)) {
    resident_.fetch_add(1);
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!pending_.insert(id).second) {
      coalesced_.fetch_add(1);
      return false;
    }
  }
  // Counted before Post so that issued >= what the pool has seen.
  issued_.fetch_add(1);
  if (!loads_->Post([this, id] { Load(id); })) {
    issued_.fetch_sub(1);
    queue_full_.fetch_add(1);
    absl::MutexLock lock(&mu_);
    pending_.erase(id);
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

void PrefetchQueue::Load(const ExpertId& id) {
  absl::StatusOr<uint64_t> bytes = store_->RamBytes(id);
  bool ignored = absl::IsNotFound(bytes.status());
  if (bytes.ok()) {
    // The tier counts resident / coalesced / no-room outcomes itself; a hint
    // is advice, so a failure is simply not acted on.
    const absl::Status s = tier_->Prefetch(id, *bytes);
    ignored = absl::IsNotFound(s);  // deleted meanwhile
  }
  {
    absl::MutexLock lock(&mu_);
    pending_.erase(id);
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
  return c;
}

}  // namespace colibri::expert_node
