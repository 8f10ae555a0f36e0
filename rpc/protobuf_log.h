// libprotobuf writes one log line per malformed message it meets (e.g. a
// string field with invalid UTF-8), so a client sending garbage could flood a
// server's log. InstallRateLimitedProtobufLog routes those lines through a
// LogRateLimiter: at most `max_lines` per window, then one line saying how
// many were suppressed.
//
// Thread-safety: LogRateLimiter is thread-safe. InstallRateLimitedProtobufLog
// must be called once, at start-up, before any server thread runs (protobuf's
// SetLogHandler is not thread-safe).
#ifndef COLIBRI_RPC_PROTOBUF_LOG_H_
#define COLIBRI_RPC_PROTOBUF_LOG_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace colibri::rpc {

class LogRateLimiter {
 public:
  LogRateLimiter(int max_lines, absl::Duration window) : max_lines_(max_lines), window_(window) {}

  // Whether a line arriving at `now` may be written. When a new window
  // starts, *suppressed_before gets how many lines the previous window
  // suppressed (else 0).
  bool Admit(absl::Time now, int64_t* suppressed_before);

 private:
  const int max_lines_;
  const absl::Duration window_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int lines_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sends libprotobuf's log lines to stderr, prefixed with `program`, at most
// `max_lines` per minute (fatal ones always).
void InstallRateLimitedProtobufLog(const std::string& program, int max_lines = 10);

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_PROTOBUF_LOG_H_
