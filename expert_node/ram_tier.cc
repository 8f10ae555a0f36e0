#include "expert_node/ram_tier.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace colibri::expert_node {

PinnedExpert::PinnedExpert(PinnedExpert&& other) noexcept { *this = std::move(other); }

PinnedExpert& PinnedExpert::operator=(PinnedExpert&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = other.tier_;
    id_ = std::move(other.id_);
    blob_ = std::move(other.blob_);
    hit_ = other.hit_;
    disk_wait_micros_ = other.disk_wait_micros_;
    other.tier_ = nullptr;
  }
  return *this;
}

PinnedExpert::~PinnedExpert() { Release(); }

void PinnedExpert::Release() {
  if (tier_ != nullptr) tier_->Unpin(id_);
  tier_ = nullptr;
  blob_.reset();
}

RamTier::RamTier(const Options& options, Loader loader)
    : budget_bytes_(options.budget_bytes), loader_(std::move(loader)) {}

RamTier::~RamTier() = default;

absl::StatusOr<std::unique_ptr<ExpertBlob>> RamTier::Load(const ExpertId& id,
                                                          int64_t* wait_micros) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = loader_(id);
  *wait_micros = absl::ToInt64Microseconds(absl::Now() - start);
  absl::MutexLock lock(&mu_);
  counters_.disk_wait_micros += static_cast<uint64_t>(*wait_micros);
  if (blob.ok()) counters_.disk_bytes_read += (*blob)->layout().payload_bytes();
  return blob;
}

absl::StatusOr<PinnedExpert> RamTier::Acquire(const ExpertId& id) {
  PinnedExpert handle;
  handle.id_ = id;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it != entries_.end()) {
      Entry& e = it->second;
      ++e.pins;
      lru_.splice(lru_.begin(), lru_, e.lru_pos);
      if (e.prefetched_unused) {
        e.prefetched_unused = false;
        ++counters_.prefetch_used;
      }
      ++counters_.hits;
      handle.tier_ = this;
      handle.blob_ = e.blob;
      handle.hit_ = true;
      return handle;
    }
    ++counters_.misses;
  }

  absl::StatusOr<std::unique_ptr<ExpertBlob>> loaded = Load(id, &handle.disk_wait_micros_);
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const ExpertBlob> blob(std::move(*loaded));

  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) {  // another miss admitted it meanwhile
    Entry& e = it->second;
    ++e.pins;
    lru_.splice(lru_.begin(), lru_, e.lru_pos);
    handle.tier_ = this;
    handle.blob_ = e.blob;
    return handle;
  }
  if (!MakeRoom(blob->size_bytes())) {
    ++counters_.uncached;
    handle.blob_ = std::move(blob);
    return handle;
  }
  lru_.push_front(id);
  Entry& e = entries_[id];
  e.blob = blob;
  e.pins = 1;
  e.lru_pos = lru_.begin();
  used_bytes_ += blob->size_bytes();
  handle.tier_ = this;
  handle.blob_ = std::move(blob);
  return handle;
}

absl::Status RamTier::Prefetch(const ExpertId& id) {
  if (Contains(id)) return absl::OkStatus();
  int64_t wait_micros = 0;
  absl::StatusOr<std::unique_ptr<ExpertBlob>> loaded = Load(id, &wait_micros);
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const ExpertBlob> blob(std::move(*loaded));
  absl::MutexLock lock(&mu_);
  if (entries_.contains(id)) return absl::OkStatus();
  if (!MakeRoom(blob->size_bytes())) {
    return absl::ResourceExhaustedError(
        absl::StrCat(ToString(id), ": no room in the RAM tier for a prefetch"));
  }
  lru_.push_front(id);
  Entry& e = entries_[id];
  e.blob = blob;
  e.prefetched_unused = true;
  e.lru_pos = lru_.begin();
  used_bytes_ += blob->size_bytes();
  ++counters_.prefetch_loaded;
  return absl::OkStatus();
}

bool RamTier::MakeRoom(uint64_t bytes) {
  if (bytes > budget_bytes_) return false;
  // First check that evicting every unpinned entry would be enough, so that a
  // failed admission does not empty the cache for nothing.
  uint64_t evictable = 0;
  for (const auto& [id, e] : entries_) {
    if (e.pins == 0) evictable += e.blob->size_bytes();
  }
  if (used_bytes_ - evictable + bytes > budget_bytes_) return false;
  auto it = lru_.end();
  while (used_bytes_ + bytes > budget_bytes_ && it != lru_.begin()) {
    --it;
    auto entry = entries_.find(*it);
    if (entry->second.pins > 0) continue;
    used_bytes_ -= entry->second.blob->size_bytes();
    if (entry->second.prefetched_unused) ++counters_.prefetch_wasted;
    ++counters_.evictions;
    entries_.erase(entry);
    it = lru_.erase(it);
  }
  return used_bytes_ + bytes <= budget_bytes_;
}

void RamTier::Unpin(const ExpertId& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.pins > 0) --it->second.pins;
}

bool RamTier::Contains(const ExpertId& id) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(id);
}

uint64_t RamTier::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_bytes_;
}

uint64_t RamTier::resident_count() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

RamTier::Counters RamTier::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace colibri::expert_node
