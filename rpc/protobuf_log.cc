#include "rpc/protobuf_log.h"

#include <cstdio>

#include "absl/time/clock.h"
#include "google/protobuf/stubs/logging.h"
#include "rpc/untrusted_text.h"

namespace colibri::rpc {
namespace {

// The installed handler's state: set once before any server thread runs.
LogRateLimiter* g_limiter = nullptr;
std::string* g_program = nullptr;

void RateLimitedHandler(google::protobuf::LogLevel level, const char* filename, int line,
                        const std::string& message) {
  int64_t suppressed = 0;
  const bool fatal = level == google::protobuf::LOGLEVEL_FATAL;
  if (!g_limiter->Admit(absl::Now(), &suppressed) && !fatal) return;
  if (suppressed > 0) {
    std::fprintf(stderr, "%s: libprotobuf: %lld similar lines suppressed\n", g_program->c_str(),
                 static_cast<long long>(suppressed));
  }
  // The message may quote bytes of the offending input.
  std::fprintf(stderr, "%s: libprotobuf %s:%d: %s\n", g_program->c_str(), filename, line,
               EscapeUntrusted(message, 512).c_str());
}

}  // namespace

bool LogRateLimiter::Admit(absl::Time now, int64_t* suppressed_before) {
  absl::MutexLock lock(&mu_);
  *suppressed_before = 0;
  if (now - window_start_ >= window_) {
    window_start_ = now;
    lines_ = 0;
    *suppressed_before = suppressed_;
    suppressed_ = 0;
  }
  if (lines_ < max_lines_) {
    ++lines_;
    return true;
  }
  ++suppressed_;
  return false;
}

void InstallRateLimitedProtobufLog(const std::string& program, int max_lines) {
  if (g_limiter != nullptr) return;
  g_limiter = new LogRateLimiter(max_lines, absl::Minutes(1));  // lives as long as the process
  g_program = new std::string(program);
  google::protobuf::SetLogHandler(&RateLimitedHandler);
}

}  // namespace colibri::rpc
