#include "expert_node/ram_tier.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

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

RamTier::RamTier(const Options& options, Loader loader, BackgroundLoader background_loader)
    : options_(options),
      loader_(std::move(loader)),
      background_loader_(std::move(background_loader)),
      policy_(MakeCachePolicy(options.policy, options.policy_options)) {}

RamTier::~RamTier() = default;

void RamTier::LoadAndFinish(const ExpertId& id, const std::shared_ptr<Flight>& flight) {
  mu_.Unlock();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<ExpertBlob>> loaded =
      flight->control != nullptr ? background_loader_(id, flight->control.get()) : loader_(id);
  const absl::Time end = absl::Now();
  mu_.Lock();
  counters_.disk_read_micros += static_cast<uint64_t>(absl::ToInt64Microseconds(end - start));
  if (loaded.ok()) {
    counters_.disk_bytes_read += (*loaded)->layout().payload_bytes();
    std::shared_ptr<const ExpertBlob> blob(std::move(*loaded));
    flight->blob = blob;
    // Someone waits for it: it is demand now, and admitted as such.
    const bool pure_prefetch = flight->prefetch && flight->waiters == 0;
    const bool pure_warm = flight->warm && flight->waiters == 0;
    const Admission admission = pure_prefetch ? Admission::kPrefetch
                                : pure_warm   ? Admission::kWarm
                                              : Admission::kDemand;
    if (!entries_.contains(id) && MakeRoom(blob->size_bytes(), admission, end)) {
      Entry& e = Admit(id, std::move(blob), end,
                       pure_warm       ? AdmitKind::kWarm
                       : pure_prefetch ? AdmitKind::kPrefetch
                                       : AdmitKind::kDemand);
      if (flight->prefetch) ++counters_.prefetch_loaded;
      if (flight->warm) ++counters_.warm_loaded;
      if (pure_prefetch) {
        e.prefetched_unused = true;
        e.protected_until = end + options_.prefetch_protection;
      }
    } else if (pure_prefetch && !entries_.contains(id)) {
      ++counters_.prefetch_no_room;
    }
  } else {
    flight->status = loaded.status();
    if (flight->control != nullptr && absl::IsCancelled(loaded.status())) {
      ++counters_.prefetch_cancelled;
    }
  }
  flight->done = true;
  loading_.erase(id);
  load_done_.SignalAll();
}

absl::StatusOr<PinnedExpert> RamTier::Acquire(const ExpertId& id) {
  absl::MutexLock lock(&mu_);
  const absl::Time start = absl::Now();
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    ++counters_.hits;
    policy_->Used(id, /*hit=*/true);
    PinnedExpert handle = PinEntry(id, it->second, start);
    handle.hit_ = true;
    return handle;
  }
  ++counters_.misses;
  policy_->Used(id, /*hit=*/false);
  std::shared_ptr<Flight> flight;
  while (true) {
    auto in_flight = loading_.find(id);
    if (in_flight != loading_.end()) {
      flight = in_flight->second;
      ++counters_.load_waits;
      const bool first_use = flight->prefetch && flight->waiters == 0;
      if (first_use) ++counters_.prefetch_used;
      if (flight->control != nullptr) flight->control->Promote();
      ++flight->waiters;
      while (!flight->done) load_done_.Wait(&mu_);
      // A prefetch cancelled before this call promoted it: read it here.
      if (flight->control != nullptr && absl::IsCancelled(flight->status) &&
          !entries_.contains(id)) {
        if (first_use) --counters_.prefetch_used;
        continue;
      }
    } else {
      flight = std::make_shared<Flight>();
      loading_[id] = flight;
      LoadAndFinish(id, flight);
    }
    break;
  }
  const absl::Time end = absl::Now();
  const int64_t waited = absl::ToInt64Microseconds(end - start);
  counters_.disk_wait_micros += static_cast<uint64_t>(waited);
  if (!flight->status.ok()) return flight->status;
  PinnedExpert handle;
  it = entries_.find(id);
  if (it != entries_.end()) {
    handle = PinEntry(id, it->second, end);
  } else {
    ++counters_.uncached;
    handle.id_ = id;
    handle.blob_ = flight->blob;
  }
  handle.disk_wait_micros_ = waited;
  return handle;
}

absl::Status RamTier::Prefetch(const ExpertId& id, uint64_t expected_bytes) {
  absl::MutexLock lock(&mu_);
  policy_->Hinted(id);
  if (entries_.contains(id)) {
    ++counters_.prefetch_resident;
    return absl::OkStatus();
  }
  if (loading_.contains(id)) {
    ++counters_.prefetch_coalesced;
    return absl::OkStatus();
  }
  const absl::Time now = absl::Now();
  if (expected_bytes > 0 && !CanMakeRoom(expected_bytes, Admission::kPrefetch, now)) {
    ++counters_.prefetch_no_room;
    return absl::ResourceExhaustedError(
        absl::StrCat(ToString(id), ": no room in the RAM tier for a prefetch"));
  }
  if (!PrefetchPaysNow(id, expected_bytes, now)) {
    ++counters_.prefetch_declined;
    return absl::ResourceExhaustedError(
        absl::StrCat(ToString(id), ": a prefetch would not pay (its hint is less likely to be "
                                   "used than what it would evict)"));
  }
  auto flight = std::make_shared<Flight>();
  flight->prefetch = true;
  if (background_loader_) flight->control = std::make_shared<ReadControl>();
  loading_[id] = flight;
  LoadAndFinish(id, flight);
  if (!flight->status.ok()) return flight->status;
  if (!entries_.contains(id)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(ToString(id), ": no room in the RAM tier for a prefetch"));
  }
  return absl::OkStatus();
}

absl::Status RamTier::Warm(const ExpertId& id, uint64_t expected_bytes) {
  absl::MutexLock lock(&mu_);
  if (entries_.contains(id) || loading_.contains(id)) return absl::OkStatus();
  const auto no_room = [&id] {
    return absl::ResourceExhaustedError(
        absl::StrCat(ToString(id), ": no free room in the RAM tier to warm it"));
  };
  if (expected_bytes > 0 && !CanMakeRoom(expected_bytes, Admission::kWarm, absl::Now())) {
    return no_room();
  }
  auto flight = std::make_shared<Flight>();
  flight->warm = true;
  loading_[id] = flight;
  LoadAndFinish(id, flight);
  if (!flight->status.ok()) return flight->status;
  if (!entries_.contains(id)) return no_room();
  return absl::OkStatus();
}

absl::Status RamTier::PinResident(const ExpertId& id) {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto it = entries_.find(id);
    if (it != entries_.end()) {
      Entry& e = it->second;
      if (!e.resident) {
        e.resident = true;
        e.prefetched_unused = false;
        ++counters_.pinned_experts;
        counters_.pinned_bytes += e.blob->size_bytes();
      }
      return absl::OkStatus();
    }
    auto in_flight = loading_.find(id);
    if (in_flight != loading_.end()) {
      std::shared_ptr<Flight> flight = in_flight->second;
      ++flight->waiters;
      if (flight->control != nullptr) flight->control->Promote();
      while (!flight->done) load_done_.Wait(&mu_);
      if (flight->control != nullptr && absl::IsCancelled(flight->status)) continue;
      if (!flight->status.ok()) return flight->status;
      if (!entries_.contains(id)) break;
      continue;
    }
    auto flight = std::make_shared<Flight>();
    loading_[id] = flight;
    LoadAndFinish(id, flight);
    if (!flight->status.ok()) return flight->status;
    if (!entries_.contains(id)) break;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(ToString(id), ": no room in the RAM tier to pin it"));
}

void RamTier::PrefetchStale(const ExpertId& id) {
  absl::MutexLock lock(&mu_);
  auto in_flight = loading_.find(id);
  if (in_flight != loading_.end()) {
    Flight& flight = *in_flight->second;
    if (flight.control != nullptr && flight.waiters == 0) flight.control->Cancel();
    return;
  }
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.prefetched_unused) {
    it->second.protected_until = absl::InfinitePast();
  }
}

bool RamTier::Evictable(const Entry& e, Admission admission, absl::Time now) const {
  if (admission == Admission::kWarm || e.pins > 0 || e.resident) return false;
  if (e.prefetched_unused && now < e.protected_until) return false;
  return admission == Admission::kDemand || now - e.last_use >= options_.prefetch_victim_min_idle;
}

bool RamTier::CanMakeRoom(uint64_t bytes, Admission admission, absl::Time now) const {
  if (bytes > options_.budget_bytes) return false;
  if (used_bytes_ + bytes <= options_.budget_bytes) return true;
  uint64_t evictable = 0;
  for (const auto& [id, e] : entries_) {
    if (Evictable(e, admission, now)) evictable += e.blob->size_bytes();
  }
  return used_bytes_ - evictable + bytes <= options_.budget_bytes;
}

bool RamTier::MakeRoom(uint64_t bytes, Admission admission, absl::Time now) {
  // Check first, so that a failed admission does not empty the cache for nothing.
  if (!CanMakeRoom(bytes, admission, now)) return false;
  for (const ExpertId& id : policy_->VictimOrder()) {
    if (used_bytes_ + bytes <= options_.budget_bytes) break;
    auto entry = entries_.find(id);
    if (entry == entries_.end() || !Evictable(entry->second, admission, now)) continue;
    used_bytes_ -= entry->second.blob->size_bytes();
    if (entry->second.prefetched_unused) ++counters_.prefetch_wasted;
    ++counters_.evictions;
    entries_.erase(entry);
    policy_->Evicted(id);
  }
  return used_bytes_ + bytes <= options_.budget_bytes;
}

bool RamTier::PrefetchPaysNow(const ExpertId& id, uint64_t bytes, absl::Time now) const {
  if (options_.prefetch_cost < 0) return true;
  // The use probability of the likeliest-used resident the load would evict.
  double p_victim = 0;
  uint64_t freed = 0;
  if (bytes > 0) {
    for (const ExpertId& id : policy_->VictimOrder()) {
      if (used_bytes_ - freed + bytes <= options_.budget_bytes) break;
      auto entry = entries_.find(id);
      if (entry == entries_.end() ||
          !Evictable(entry->second, Admission::kPrefetch, now)) {
        continue;
      }
      freed += entry->second.blob->size_bytes();
      p_victim = std::max(p_victim, policy_->UseProbability(id));
    }
  }
  return PrefetchPays(policy_->HintPrecision(id), options_.prefetch_cost, p_victim);
}

RamTier::Entry& RamTier::Admit(const ExpertId& id, std::shared_ptr<const ExpertBlob> blob,
                               absl::Time now, AdmitKind kind) {
  Entry& e = entries_[id];
  used_bytes_ += blob->size_bytes();
  counters_.peak_used_bytes = std::max(counters_.peak_used_bytes, used_bytes_);
  e.blob = std::move(blob);
  e.last_use = now;
  policy_->Admitted(id, kind);
  return e;
}

PinnedExpert RamTier::PinEntry(const ExpertId& id, Entry& e, absl::Time now) {
  ++e.pins;
  e.last_use = now;
  if (e.prefetched_unused) {
    e.prefetched_unused = false;
    ++counters_.prefetch_used;
  }
  PinnedExpert handle;
  handle.tier_ = this;
  handle.id_ = id;
  handle.blob_ = e.blob;
  return handle;
}

void RamTier::Unpin(const ExpertId& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.pins > 0) --it->second.pins;
}

bool RamTier::HintResident(const ExpertId& id) {
  absl::MutexLock lock(&mu_);
  if (!entries_.contains(id)) return false;
  policy_->Hinted(id);
  return true;
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
  Counters c = counters_;
  c.used_bytes = used_bytes_;
  return c;
}

}  // namespace colibri::expert_node
