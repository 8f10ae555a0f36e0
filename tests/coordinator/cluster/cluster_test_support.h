// Helpers of the Cluster tests: a rebalancer that records its calls and can be
// told to fail, and a poll for events of the cluster's threads.
#ifndef COLIBRI_TESTS_COORDINATOR_CLUSTER_CLUSTER_TEST_SUPPORT_H_
#define COLIBRI_TESTS_COORDINATOR_CLUSTER_CLUSTER_TEST_SUPPORT_H_

#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster/cluster.h"

namespace colibri::coordinator::testing {

// Counts the placements it is asked to realise; fails while told to (a node
// lost mid-transfer). Thread-safe.
class RecordingRebalancer {
 public:
  absl::Status operator()(const Placement&) {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (fail_) return absl::UnavailableError("no room anywhere");
    return absl::OkStatus();
  }
  void set_fail(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_ = fail;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Polls `done` for up to 20 s (the events come from the cluster's threads).
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 4000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace colibri::coordinator::testing

#endif  // COLIBRI_TESTS_COORDINATOR_CLUSTER_CLUSTER_TEST_SUPPORT_H_
