#include "expert_node/event_log.h"

#include <cstdio>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace colibri::expert_node {

void LogEvent(absl::string_view line) {
  static absl::Mutex mu(absl::kConstInit);
  const std::string stamp =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  absl::MutexLock lock(&mu);
  std::fprintf(stderr, "%s colibri-expert-node: %.*s\n", stamp.c_str(),
               static_cast<int>(line.size()), line.data());
  std::fflush(stderr);
}

}  // namespace colibri::expert_node
