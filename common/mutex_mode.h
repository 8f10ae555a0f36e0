// absl::Mutex lock-order tracking in the shipped binaries.
//
// Debian's abseil is built without NDEBUG, so by default every absl::Mutex
// acquisition in the process (gRPC's own locks included) records lock order
// in one global graph and checks it for cycles: a process-wide spin lock and a
// hash lookup per lock, which showed in profiles of an expert node's request
// path. Release builds of the binaries turn it off at start-up; tests and the
// Debug (sanitizer) build keep it, so a lock-order inversion still fails
// there.
#ifndef COLIBRI_COMMON_MUTEX_MODE_H_
#define COLIBRI_COMMON_MUTEX_MODE_H_

#include "absl/synchronization/mutex.h"

namespace colibri {

// Call first thing in main().
inline void UseReleaseMutexMode() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace colibri

#endif  // COLIBRI_COMMON_MUTEX_MODE_H_
