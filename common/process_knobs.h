// The environment variables that tune a Colibri process, read and validated
// in one place. Only programs' main functions call ReadProcessKnobs; they pass
// each value on to the libraries (ThreadPool options, SetCpuCap and the
// kernel choice, cache directories), which read no environment themselves.
//
//   COLIBRI_CPU        portable | avx2 | neon: caps the CPU features the
//                      kernels may use (common/cpu_features.h) and skips the
//                      kernel calibration. Unset or empty: no cap.
//   COLIBRI_SPIN_US    0..1000000: replaces every spin of every thread pool
//                      (ThreadPool::WithSpinOverride). Unset or empty: the
//                      pools' own options.
//   COLIBRI_CACHE_DIR, XDG_CACHE_HOME, HOME
//                      the cache directory (CacheDirFrom, common/cache_dir.h).
//
// Thread-safety: ParseProcessKnobs is thread-compatible; ReadProcessKnobs
// reads the environment, which nothing may change meanwhile.
#ifndef COLIBRI_COMMON_PROCESS_KNOBS_H_
#define COLIBRI_COMMON_PROCESS_KNOBS_H_

#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/cpu_features.h"

namespace colibri {

struct ProcessKnobs {
  // From COLIBRI_CPU. Default: CpuCap::kNone.
  CpuCap cpu_cap = CpuCap::kNone;
  // From COLIBRI_SPIN_US: microseconds every pool thread spins before it
  // sleeps. Default: none (each pool's options).
  std::optional<int> spin_us;
  // From COLIBRI_CACHE_DIR, XDG_CACHE_HOME and HOME; "" means no cache.
  // Default: "".
  std::string cache_dir;
};

// The knobs from `lookup`, which returns a variable's value or null when it is
// unset (std::getenv's contract). InvalidArgument naming the variable and its
// value for a value outside those above.
absl::StatusOr<ProcessKnobs> ParseProcessKnobs(
    absl::FunctionRef<const char*(const char* name)> lookup);

// ParseProcessKnobs over this process's environment.
absl::StatusOr<ProcessKnobs> ReadProcessKnobs();

}  // namespace colibri

#endif  // COLIBRI_COMMON_PROCESS_KNOBS_H_
