// How often each expert was used, decayed so that old use fades, kept in
// memory and persisted in the node's RocksDB ("u/" keys, expert_record.h), so
// that a restarted node can pin its hottest experts (PinHottestExperts).
//
// Score: every Record adds 1 after decaying the previous score exponentially
// in wall-clock time, score * 2^(-elapsed / half_life). One ComputeLayer call
// records each expert it uses once. Persisted value (16 bytes, little-endian):
// f64 score, i64 unix micros of the last update; loading decays from there.
//
// Writes: the dirty records go to RocksDB in one batch every flush_interval
// (a background thread) and on destruction, never per request. A failed write
// is logged and retried at the next flush; it is never fatal.
//
// Thread-safety: all methods may be called concurrently.
#ifndef COLIBRI_EXPERT_NODE_USAGE_COUNTS_H_
#define COLIBRI_EXPERT_NODE_USAGE_COUNTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "expert_node/expert_record.h"
#include "expert_node/expert_store.h"
#include "expert_node/ram_tier.h"

namespace colibri::expert_node {

class UsageCounts {
 public:
  struct Options {
    // Time for a score to halve without use. Default: 24 h.
    absl::Duration half_life = absl::Hours(24);
    // How often dirty scores are written; <= 0: only on destruction.
    // Default: 10 s.
    absl::Duration flush_interval = absl::Seconds(10);
  };

  // Loads the persisted scores from `store` (borrowed; must outlive this;
  // malformed values are skipped) and starts the flush thread. Store scan
  // errors pass through.
  static absl::StatusOr<std::unique_ptr<UsageCounts>> Open(const Options& options,
                                                           ExpertStore* store);
  // Stops the flush thread and flushes (logging a failure).
  ~UsageCounts();
  UsageCounts(const UsageCounts&) = delete;
  UsageCounts& operator=(const UsageCounts&) = delete;

  void Record(const ExpertId& id, absl::Time now = absl::Now());
  // Decayed score at `now`; 0 when never used.
  double Score(const ExpertId& id, absl::Time now = absl::Now()) const;
  // Every known expert with its score at `now`, highest first (ties by id).
  std::vector<std::pair<ExpertId, double>> Hottest(absl::Time now = absl::Now()) const;
  // Writes the dirty scores in one batch. Store errors pass through (the
  // scores stay dirty).
  absl::Status Flush();
  uint64_t flush_failures() const;

 private:
  struct DecayedCount {
    double score = 0;
    absl::Time updated;
  };
  UsageCounts(const Options& options, ExpertStore* store);
  double Decayed(const DecayedCount& s, absl::Time now) const;
  void FlushLoop();

  const Options options_;
  ExpertStore* const store_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<ExpertId, DecayedCount> scores_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<ExpertId> dirty_ ABSL_GUARDED_BY(mu_);
  uint64_t flush_failures_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Serialises flushes (held across one RocksDB batch write).
  absl::Mutex flush_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::thread flusher_;
};

// What PinHottestExperts pinned.
struct PinReport {
  uint64_t experts = 0;
  uint64_t bytes = 0;
  std::vector<ExpertId> pinned;  // hottest first
};

// Pins into `tier` the hottest experts by `counts` whose RAM size fits what
// is left of `pin_budget_bytes`, hottest first (an expert too large for the
// rest is skipped for smaller colder ones). Experts the store no longer holds
// (which includes every expert of a fingerprint the node holds nothing of)
// and experts with a score below 2^-20 are ignored. Best effort: an expert
// that fails to load is logged and skipped.
PinReport PinHottestExperts(const UsageCounts& counts, ExpertStore* store, RamTier* tier,
                            uint64_t pin_budget_bytes);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_USAGE_COUNTS_H_
