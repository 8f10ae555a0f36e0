#include "rpc/protobuf_log.h"

#include <string>

#include "colibri/v1/expert.pb.h"
#include "gtest/gtest.h"

namespace colibri::rpc {
namespace {

TEST(LogRateLimiterTest, AdmitsAtMostMaxLinesPerWindowThenReportsTheRest) {
  LogRateLimiter limiter(3, absl::Minutes(1));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  int64_t suppressed = -1;
  int admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += limiter.Admit(t0 + absl::Seconds(i), &suppressed);
  EXPECT_EQ(admitted, 3);
  EXPECT_TRUE(limiter.Admit(t0 + absl::Minutes(1), &suppressed));
  EXPECT_EQ(suppressed, 7);
  EXPECT_TRUE(limiter.Admit(t0 + absl::Minutes(1), &suppressed));
  EXPECT_EQ(suppressed, 0);
}

// Each unparseable request wrote a libprotobuf line.
TEST(ProtobufLogTest, AFloodOfBadMessagesWritesABoundedLog) {
  InstallRateLimitedProtobufLog("protobuf_log_test", 5);
  v1::ExpertKey key;
  key.set_model_fingerprint("x");
  std::string bytes = key.SerializeAsString();
  bytes.back() = '\xff';  // invalid UTF-8 in a string field: libprotobuf logs it
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 200; ++i) {
    v1::ExpertKey parsed;
    EXPECT_FALSE(parsed.ParseFromString(bytes));
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  int lines = 0;
  for (char c : log) lines += c == '\n';
  EXPECT_GE(lines, 1) << log;
  EXPECT_LE(lines, 5) << log;
  EXPECT_EQ(log.find('\xff'), std::string::npos);
}

}  // namespace
}  // namespace colibri::rpc
