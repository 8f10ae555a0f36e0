// The expert node's RAM tier: an LRU of decoded experts within a byte budget.
//
// Experts come from a Loader (the disk tier, in production). Acquire returns a
// PinnedExpert handle; while any handle of an expert is alive the expert is
// pinned and never evicted. Resident bytes never exceed the budget: to admit an
// expert the tier evicts unpinned experts from the least recently used end,
// and when that cannot make room (the expert alone is larger than the budget,
// or everything resident is pinned) the expert is served uncached — the handle
// owns its bytes, which are freed when the handle goes, and are not counted
// against the budget. So memory beyond the budget is bounded by what in-flight
// requests hold.
//
// Two concurrent misses of the same expert may both read it; the second to
// finish uses the copy the first admitted.
//
// Prefetched experts are admitted like any other but are not pinned; the
// counters say whether a prefetch was used (acquired before eviction) or wasted.
//
// Thread-safety: all methods may be called concurrently. The loader runs
// without the tier's lock held. Handles must not outlive the tier.
#ifndef COLIBRI_EXPERT_NODE_RAM_TIER_H_
#define COLIBRI_EXPERT_NODE_RAM_TIER_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "expert_node/expert_record.h"

namespace colibri::expert_node {

class RamTier;

// Keeps one expert's weights alive and (when cached) pinned in the tier.
// Movable, not copyable.
class PinnedExpert {
 public:
  PinnedExpert() = default;
  PinnedExpert(PinnedExpert&& other) noexcept;
  PinnedExpert& operator=(PinnedExpert&& other) noexcept;
  PinnedExpert(const PinnedExpert&) = delete;
  PinnedExpert& operator=(const PinnedExpert&) = delete;
  ~PinnedExpert();

  const moe::ExpertWeights& weights() const { return blob_->weights(); }
  const ExpertBlob& blob() const { return *blob_; }
  bool hit() const { return hit_; }                  // was resident when acquired
  int64_t disk_wait_micros() const { return disk_wait_micros_; }
  bool cached() const { return tier_ != nullptr; }  // false: served uncached

 private:
  friend class RamTier;
  void Release();

  RamTier* tier_ = nullptr;  // null for uncached handles
  ExpertId id_;
  std::shared_ptr<const ExpertBlob> blob_;
  bool hit_ = false;
  int64_t disk_wait_micros_ = 0;
};

class RamTier {
 public:
  using Loader = std::function<absl::StatusOr<std::unique_ptr<ExpertBlob>>(const ExpertId&)>;

  struct Options {
    // Bytes of expert data the tier may hold resident. Default: 1 GiB.
    uint64_t budget_bytes = uint64_t{1} << 30;
  };

  struct Counters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t disk_bytes_read = 0;   // payload bytes the loader returned
    uint64_t disk_wait_micros = 0;  // time spent in the loader
    uint64_t uncached = 0;          // misses served without admission
    uint64_t evictions = 0;
    uint64_t prefetch_loaded = 0;   // experts a prefetch brought in
    uint64_t prefetch_used = 0;
    uint64_t prefetch_wasted = 0;   // evicted before any use
  };

  RamTier(const Options& options, Loader loader);
  ~RamTier();
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // Pins the expert, loading it on a miss. Loader errors pass through.
  absl::StatusOr<PinnedExpert> Acquire(const ExpertId& id);
  // Loads the expert (unpinned) unless resident. OK when resident afterwards or
  // already; ResourceExhausted when it does not fit; loader errors pass through.
  absl::Status Prefetch(const ExpertId& id);

  bool Contains(const ExpertId& id) const;
  uint64_t budget_bytes() const { return budget_bytes_; }
  uint64_t used_bytes() const;
  uint64_t resident_count() const;
  Counters counters() const;

 private:
  friend class PinnedExpert;
  struct Entry {
    std::shared_ptr<const ExpertBlob> blob;
    int pins = 0;
    bool prefetched_unused = false;
    std::list<ExpertId>::iterator lru_pos;  // in lru_ (front: most recent)
  };

  // Calls the loader and charges its time and bytes to the counters.
  absl::StatusOr<std::unique_ptr<ExpertBlob>> Load(const ExpertId& id, int64_t* wait_micros);
  // Evicts unpinned LRU entries until `bytes` more fit; false if impossible.
  bool MakeRoom(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unpin(const ExpertId& id);

  const uint64_t budget_bytes_;
  const Loader loader_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<ExpertId, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<ExpertId> lru_ ABSL_GUARDED_BY(mu_);
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_RAM_TIER_H_
