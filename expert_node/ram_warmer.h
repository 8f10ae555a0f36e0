// Fills the RAM tier's free room from the disk tier in the background, so
// that the first requests after a node starts (or after experts are ingested
// or imported) find their experts in RAM instead of reading them one miss at
// a time.
//
// A thread at the lowest CPU priority (nice 19: compute threads take the
// cores first) and the idle I/O class runs a full pass when it starts: it
// loads, through RamTier::Warm, the experts it finds not resident, the most
// used first (UsageCounts), then every stored expert by model fingerprint,
// layer and expert. After that the store's write observer hands it every
// expert written (an ingest, an import, a re-sent expert), and a pass loads
// just those, in the order written (what is written during a pass goes to
// the next). Warm evicts nothing, so a pass only fills free room; it ends
// when the room left is smaller than every expert it has seen, or when its
// list is done. Read errors are logged and
// skipped (a damaged expert is dropped by the store, as on any read). One log
// line per burst of passes (an ingest wakes it once per expert).
//
// Thread-safety: counters() from any thread; Stop and the destructor from
// the owner.
#ifndef COLIBRI_EXPERT_NODE_RAM_WARMER_H_
#define COLIBRI_EXPERT_NODE_RAM_WARMER_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "expert_node/expert_record.h"

namespace colibri::expert_node {

class ExpertStore;
class RamTier;
class UsageCounts;

class RamWarmer {
 public:
  struct Counters {
    uint64_t passes = 0;   // passes run
    uint64_t experts = 0;  // experts loaded into the tier
    uint64_t bytes = 0;    // their RAM bytes
    uint64_t errors = 0;   // reads that failed (logged, skipped)
  };

  // store, tier and usage (may be null) are borrowed and must outlive this.
  // Starts the thread.
  RamWarmer(ExpertStore* store, RamTier* tier, const UsageCounts* usage);
  // Stop().
  ~RamWarmer();
  RamWarmer(const RamWarmer&) = delete;
  RamWarmer& operator=(const RamWarmer&) = delete;

  // Ends a pass in progress after the expert being loaded and joins the
  // thread. Idempotent.
  void Stop();
  Counters counters() const;

 private:
  void Loop();
  // Every stored expert, the most used first (a full pass's order).
  std::vector<ExpertId> AllStored() const;
  // One pass over `order` (added to counters_); returns early when stopped.
  Counters Pass(const std::vector<ExpertId>& order);
  bool stopping() const;

  ExpertStore* const store_;
  RamTier* const tier_;
  const UsageCounts* const usage_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool full_pass_due_ ABSL_GUARDED_BY(mu_) = true;      // the first pass, at once
  std::vector<ExpertId> written_ ABSL_GUARDED_BY(mu_);  // since the last pass
  int observer_id_ = -1;                                // of the store's write observer
  Counters counters_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_RAM_WARMER_H_
