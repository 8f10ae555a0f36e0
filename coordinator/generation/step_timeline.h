// The newest forward steps of the generation scheduler, each split into
// where its time went: the dashboard's token timeline (GET /v1/cluster).
//
// Thread-safety: Add and Recent may be called concurrently.
#ifndef COLIBRI_COORDINATOR_GENERATION_STEP_TIMELINE_H_
#define COLIBRI_COORDINATOR_GENERATION_STEP_TIMELINE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace colibri::coordinator {

// One forward step (one EvaluateBatch of every active generation). Seconds.
struct StepRecord {
  absl::Time end;             // when the step finished
  double seconds = 0;         // the whole step, wall clock
  int tokens = 0;             // rows evaluated (decode tokens, drafts, prompt)
  int generations = 0;        // generations in the step
  bool prompt = false;        // a prompt chunk was part of it
  // Blocked waiting for the experts (network, nodes' work and disk, or the
  // local expert computation); the rest of `seconds` is the coordinator's.
  double expert_wait_seconds = 0;
  // Of the slowest node call of each layer, summed over the step's layers:
  // what that node reported computing and waiting for its disk. Zero
  // without nodes.
  double node_compute_seconds = 0;
  double node_disk_seconds = 0;
};

class StepTimeline {
 public:
  // Keeps the newest `capacity` steps (at least 1). Default: 256.
  explicit StepTimeline(size_t capacity = 256);

  void Add(const StepRecord& step);
  // Oldest first.
  std::vector<StepRecord> Recent() const;
  // Steps added since creation.
  int64_t total() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<StepRecord> ring_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // where the next Add writes once full
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_STEP_TIMELINE_H_
