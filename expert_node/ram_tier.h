// The expert node's RAM tier: decoded experts within a byte budget, evicted
// in the order of a replacement policy (cache_policy.h: adaptive by default,
// or LRU).
//
// Experts come from a Loader (the disk tier, in production). Acquire returns a
// PinnedExpert handle; while any handle of an expert is alive the expert is
// pinned and never evicted.
//
// Budget: resident bytes never exceed Options::budget_bytes, at any instant
// (every change of used_bytes() happens under the tier's lock after the room
// was made; peak_used_bytes records the maximum). To admit an expert the tier
// evicts victims in the policy's order; when that cannot make room
// the expert is served uncached: the handle owns its bytes, which are freed
// when the handle goes and are not counted against the budget. So memory
// beyond the budget is bounded by what in-flight requests hold.
//
// Which resident experts may be evicted:
//   never          experts held by a handle; experts pinned by PinResident;
//   not by demand  a prefetched expert not yet acquired, for
//   loads          Options::prefetch_protection after its admission;
//   not by         additionally, experts acquired within the last
//   prefetches     Options::prefetch_victim_min_idle (a hint for a later
//                  layer must not push out what the current layer uses).
// A prefetch that cannot make room under its rule is dropped ("memory
// pressure"); with an expected size it is dropped before reading the disk.
// Warm (the background warm-up, ram_warmer.h) evicts nothing: it only fills
// free room, and admits what it loads as the first to evict, so that the
// first demand load that needs room evicts warmed, never-used experts before
// anything a request has used.
//
// Prefetch that pays: a prefetch is also dropped ("declined") unless the
// policy's prefetch rule (PrefetchPays in cache_policy.h) says its expected
// benefit beats its cost: the hints' measured precision must exceed
// Options::prefetch_cost plus the use probability of the most likely to be
// used resident it would evict (0 when it fits in free room).
//
// Loads coalesce: while an expert's load is in flight (demand or prefetch), a
// second Acquire of it waits for that load instead of reading again (counted
// as a miss and as load_waits; when the load is a prefetch, it counts as
// prefetch_used too), and a Prefetch of it returns at once (prefetch_coalesced).
//
// Read priority: with a BackgroundLoader, a prefetch reads as a background
// read (disk_read_queue.h: demand reads go first). An Acquire that joins it
// promotes it to a demand read; PrefetchStale cancels it while nobody waits
// for it and it has not started. An Acquire whose joined read was cancelled
// before it could promote it reads the expert itself.
//
// Thread-safety: all methods may be called concurrently. The loader runs
// without the tier's lock held. Handles must not outlive the tier.
#ifndef COLIBRI_EXPERT_NODE_RAM_TIER_H_
#define COLIBRI_EXPERT_NODE_RAM_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "expert_node/cache_policy.h"
#include "expert_node/disk_read_queue.h"
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
  bool hit() const { return hit_; }  // was resident when acquired
  // Time this Acquire waited for the disk (its own load or one in flight).
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
  // A Loader whose read is a background read steered by `control` (Cancelled
  // when the control cancelled it before it started).
  using BackgroundLoader = std::function<absl::StatusOr<std::unique_ptr<ExpertBlob>>(
      const ExpertId&, const ReadControl* control)>;

  struct Options {
    // Bytes of expert data the tier may hold resident. Default: 1 GiB.
    uint64_t budget_bytes = uint64_t{1} << 30;
    // A prefetched expert not yet acquired is not evicted by demand loads for
    // this long after its admission. Default: 500 ms.
    absl::Duration prefetch_protection = absl::Milliseconds(500);
    // A prefetch evicts only experts not acquired for at least this long.
    // Default: 0 (at hundreds of tokens a second every resident was acquired
    // within milliseconds; the prefetch rule weighs victims instead).
    absl::Duration prefetch_victim_min_idle = absl::ZeroDuration();
    // Which resident to evict first. Default: kAdaptive.
    CachePolicyKind policy = CachePolicyKind::kAdaptive;
    // The policy's tuning (cache_policy.h). Default: its defaults.
    CachePolicy::Options policy_options;
    // A background read's cost relative to a demand miss, in the prefetch
    // rule; negative: every prefetch that finds room is issued. Default:
    // kDefaultPrefetchCost (0.5).
    double prefetch_cost = kDefaultPrefetchCost;
  };

  // Cumulative since construction, except used_bytes, pinned_experts and
  // pinned_bytes (now) and peak_used_bytes (maximum so far).
  struct Counters {
    uint64_t hits = 0;             // Acquires that found the expert resident
    uint64_t misses = 0;           // Acquires that did not (read or waited)
    uint64_t load_waits = 0;       // misses that waited for a load in flight
    uint64_t disk_bytes_read = 0;  // payload bytes the loader returned (all loads)
    uint64_t disk_read_micros = 0;  // time spent in the loader (all loads)
    uint64_t disk_wait_micros = 0;  // time Acquires waited for the disk
    uint64_t uncached = 0;         // misses served without admission
    uint64_t evictions = 0;
    uint64_t prefetch_loaded = 0;     // experts a prefetch read and admitted
    uint64_t prefetch_used = 0;       // of those (or in flight), later acquired
    uint64_t prefetch_wasted = 0;     // of those, evicted before any Acquire
    uint64_t prefetch_resident = 0;   // Prefetch of a resident expert: no-op
    uint64_t prefetch_coalesced = 0;  // Prefetch of an expert whose load is in flight
    uint64_t prefetch_no_room = 0;    // prefetches dropped under memory pressure
    uint64_t prefetch_declined = 0;   // prefetches the prefetch rule found not worth it
    uint64_t prefetch_cancelled = 0;  // prefetch reads PrefetchStale dropped unread
    uint64_t warm_loaded = 0;         // experts Warm read and admitted
    uint64_t peak_used_bytes = 0;     // most bytes ever resident (<= budget)
    uint64_t used_bytes = 0;          // bytes resident now
    uint64_t pinned_experts = 0;      // experts pinned by PinResident
    uint64_t pinned_bytes = 0;        // their bytes (part of used_bytes)
  };

  // Prefetches read through background_loader when it is set, else through
  // loader.
  RamTier(const Options& options, Loader loader, BackgroundLoader background_loader = nullptr);
  ~RamTier();
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // Pins the expert, loading it on a miss. Loader errors pass through.
  absl::StatusOr<PinnedExpert> Acquire(const ExpertId& id);
  // Loads the expert (unpinned, protected) unless resident or in flight. OK
  // when resident afterwards, already, or being loaded; ResourceExhausted
  // when it was dropped under memory pressure — before reading when
  // expected_bytes (its ExpertBlob::SizeFor, 0: unknown) cannot be made room
  // for; loader errors pass through.
  absl::Status Prefetch(const ExpertId& id, uint64_t expected_bytes = 0);
  // Loads the expert into free room unless resident or in flight, evicting
  // nothing. OK when resident afterwards, already, or being loaded;
  // ResourceExhausted when it does not fit in the free room — before reading
  // when expected_bytes (as for Prefetch) says so; loader errors pass through.
  absl::Status Warm(const ExpertId& id, uint64_t expected_bytes = 0);
  // Loads the expert unless resident and keeps it resident for the tier's
  // lifetime. ResourceExhausted when it does not fit (evicting only what a
  // demand load may); loader errors pass through.
  absl::Status PinResident(const ExpertId& id);

  // The expert's hint was wrong: its layer's request came without it. A
  // prefetch read of it nobody waits for is cancelled if it has not started
  // (the Prefetch call then returns Cancelled), and an expert a prefetch
  // admitted that was not acquired since loses its protection from demand
  // loads (it stays cached, evicted in the policy's order). No-op otherwise.
  void PrefetchStale(const ExpertId& id);

  // A prediction hint for `id`: when the expert is resident, tells the
  // policy (CachePolicy::Hinted: the adaptive policy keeps it last until it
  // is used or the hint expires) and returns true; otherwise returns false
  // and changes nothing (loading it is Prefetch's part). Prefetch tells the
  // policy of the hints it is given itself.
  bool HintResident(const ExpertId& id);

  bool Contains(const ExpertId& id) const;
  uint64_t budget_bytes() const { return options_.budget_bytes; }
  uint64_t used_bytes() const;
  uint64_t resident_count() const;
  Counters counters() const;

 private:
  friend class PinnedExpert;
  // What an admission may evict (Evictable); kWarm evicts nothing.
  enum class Admission { kDemand, kPrefetch, kWarm };

  struct Entry {
    std::shared_ptr<const ExpertBlob> blob;
    int pins = 0;                    // live handles
    bool resident = false;           // PinResident: never evicted
    bool prefetched_unused = false;  // admitted by a prefetch, not yet acquired
    absl::Time protected_until;      // while prefetched_unused
    absl::Time last_use;             // admission or last Acquire
  };
  // A load in flight; waiters block on load_done_ until `done`.
  struct Flight {
    bool prefetch = false;  // started by Prefetch
    bool warm = false;      // started by Warm
    int waiters = 0;        // Acquires waiting for it
    bool done = false;
    absl::Status status;
    std::shared_ptr<const ExpertBlob> blob;
    // Steers a prefetch's background read; null for other loads and without
    // a BackgroundLoader.
    std::shared_ptr<ReadControl> control;
  };

  // Runs the loader for `flight` (registered in loading_ under `id`) with the
  // lock released, then admits the blob (by the demand rule unless it is a
  // prefetch nobody waits for), unregisters the flight and wakes its waiters.
  void LoadAndFinish(const ExpertId& id, const std::shared_ptr<Flight>& flight)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `bytes` more could fit after evicting what `admission` may evict.
  bool CanMakeRoom(uint64_t bytes, Admission admission, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts victims `admission` may evict, in the policy's order, until
  // `bytes` more fit; false (evicting nothing) when impossible.
  bool MakeRoom(uint64_t bytes, Admission admission, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Evictable(const Entry& e, Admission admission, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts a new entry (room already made) and tells the policy.
  Entry& Admit(const ExpertId& id, std::shared_ptr<const ExpertBlob> blob, absl::Time now,
               AdmitKind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the prefetch rule issues a prefetch of `id`, `bytes` large (0:
  // unknown, as if it fit in free room).
  bool PrefetchPaysNow(const ExpertId& id, uint64_t bytes, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A cached handle of the resident entry `e`, pinned.
  PinnedExpert PinEntry(const ExpertId& id, Entry& e, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unpin(const ExpertId& id);

  const Options options_;
  const Loader loader_;
  const BackgroundLoader background_loader_;  // may be null

  mutable absl::Mutex mu_;
  absl::CondVar load_done_;
  absl::flat_hash_map<ExpertId, Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ExpertId, std::shared_ptr<Flight>> loading_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<CachePolicy> policy_ ABSL_GUARDED_BY(mu_);
  uint64_t used_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_RAM_TIER_H_
