#include "common/mutex_mode.h"

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace colibri {
namespace {

// Two mutexes taken in both orders: a lock-order inversion, which abseil's
// deadlock detection (on by default with Debian's abseil) reports and aborts
// on. After UseReleaseMutexMode in a release build it is not tracked.
void InvertLockOrder() {
  absl::Mutex a;
  absl::Mutex b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
}

TEST(MutexModeTest, ReleaseBuildsDoNotTrackLockOrder) {
#ifndef NDEBUG
  GTEST_SKIP() << "debug builds keep deadlock detection";
#else
  UseReleaseMutexMode();
  InvertLockOrder();  // would abort with the detector on
  SUCCEED();
#endif
}

}  // namespace
}  // namespace colibri
