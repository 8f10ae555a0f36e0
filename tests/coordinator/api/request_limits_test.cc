// Request size checks (coordinator/api/request_limits.h).
#include "coordinator/api/request_limits.h"

#include <climits>
#include <string>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

RequestLimits Limits() {
  RequestLimits limits;
  limits.n_ctx = 32;
  limits.n_vocab = 100;
  limits.max_tokens = 1000;
  limits.max_text_bytes = 64;
  limits.max_stop_strings = 2;
  limits.max_stop_bytes = 8;
  return limits;
}

v1::GenerateRequest TokenRequest(int n_tokens, int max_tokens) {
  v1::GenerateRequest request;
  for (int i = 0; i < n_tokens; ++i) request.mutable_tokens()->add_ids(i);
  request.set_max_tokens(max_tokens);
  return request;
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& part) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(part), std::string::npos) << s;
}

TEST(RequestLimitsTest, AcceptsRequestsWithinEveryLimit) {
  EXPECT_TRUE(ValidateRequestLimits(Limits()).ok());
  v1::GenerateRequest request = TokenRequest(32, 1000);
  request.add_stop("12345678");
  request.add_stop("x");
  EXPECT_TRUE(CheckGenerateRequest(request, Limits()).ok());
  v1::GenerateRequest text;
  text.set_text(std::string(64, 'a'));
  EXPECT_TRUE(CheckGenerateRequest(text, Limits()).ok());
  v1::TokenizeRequest tokenize;
  tokenize.set_text(std::string(64, 'a'));
  EXPECT_TRUE(CheckTokenizeRequest(tokenize, Limits()).ok());
}

TEST(RequestLimitsTest, MaxTokensAboveTheLimitIsOutOfRange) {
  ExpectError(CheckGenerateRequest(TokenRequest(4, 1001), Limits()), absl::StatusCode::kOutOfRange,
              "limit of 1000");
  ExpectError(CheckGenerateRequest(TokenRequest(4, INT_MAX), Limits()),
              absl::StatusCode::kOutOfRange, "max_tokens 2147483647");
  ExpectError(CheckGenerateRequest(TokenRequest(4, -1), Limits()),
              absl::StatusCode::kInvalidArgument, "max_tokens");
}

TEST(RequestLimitsTest, PromptsAreBoundedByTheContextAndTheTextLimit) {
  ExpectError(CheckGenerateRequest(TokenRequest(33, 1), Limits()),
              absl::StatusCode::kInvalidArgument, "context of 32");
  v1::GenerateRequest text;
  text.set_text(std::string(65, 'a'));
  ExpectError(CheckGenerateRequest(text, Limits()), absl::StatusCode::kOutOfRange, "limit of 64");
  v1::TokenizeRequest tokenize;
  tokenize.set_text(std::string(65, 'a'));
  ExpectError(CheckTokenizeRequest(tokenize, Limits()), absl::StatusCode::kOutOfRange,
              "limit of 64");
  v1::GenerateRequest outside = TokenRequest(2, 1);
  outside.mutable_tokens()->set_ids(1, 100);
  ExpectError(CheckGenerateRequest(outside, Limits()), absl::StatusCode::kInvalidArgument,
              "outside the vocabulary");
  ExpectError(CheckGenerateRequest(v1::GenerateRequest(), Limits()),
              absl::StatusCode::kInvalidArgument, "empty prompt");
}

TEST(RequestLimitsTest, StopStringsAreBoundedInNumberAndLength) {
  v1::GenerateRequest many = TokenRequest(1, 1);
  for (int i = 0; i < 3; ++i) many.add_stop("s");
  ExpectError(CheckGenerateRequest(many, Limits()), absl::StatusCode::kOutOfRange,
              "3 stop strings");
  v1::GenerateRequest long_stop = TokenRequest(1, 1);
  long_stop.add_stop("123456789");
  ExpectError(CheckGenerateRequest(long_stop, Limits()), absl::StatusCode::kOutOfRange,
              "limit of 8");
}

TEST(RequestLimitsTest, ChatPromptsNeedMessagesWithRolesWithinTheTextLimit) {
  v1::GenerateRequest chat;
  chat.set_max_tokens(4);
  v1::ChatMessage* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content(std::string(60, 'a'));  // 4 + 60 bytes: at the limit of 64
  EXPECT_TRUE(CheckGenerateRequest(chat, Limits()).ok());
  m->set_content(std::string(61, 'a'));
  ExpectError(CheckGenerateRequest(chat, Limits()), absl::StatusCode::kOutOfRange, "limit of 64");
  m->set_content("hi");
  m->set_role("");
  ExpectError(CheckGenerateRequest(chat, Limits()), absl::StatusCode::kInvalidArgument,
              "message 0 has no role");
  chat.mutable_chat()->clear_messages();
  ExpectError(CheckGenerateRequest(chat, Limits()), absl::StatusCode::kInvalidArgument,
              "no messages");
}

// The message count is bounded apart from the bytes: 200,000 empty messages
// are few bytes but as many values to render.
TEST(RequestLimitsTest, ChatMessagesAreBoundedInNumber) {
  RequestLimits limits = Limits();
  limits.max_messages = 3;
  v1::GenerateRequest chat;
  chat.set_max_tokens(4);
  for (int i = 0; i < 3; ++i) chat.mutable_chat()->add_messages()->set_role("u");
  EXPECT_TRUE(CheckGenerateRequest(chat, limits).ok());
  chat.mutable_chat()->add_messages()->set_role("u");
  ExpectError(CheckGenerateRequest(chat, limits), absl::StatusCode::kOutOfRange,
              "the chat has 4 messages, more than the limit of 3");
  // The same checks, as the HTTP API calls them.
  ExpectError(CheckChat(200000, 1000, RequestLimits()), absl::StatusCode::kOutOfRange,
              "more than the limit of 4096");
  ExpectError(CheckChat(1, (1 << 20) + 1, RequestLimits()), absl::StatusCode::kOutOfRange,
              "bytes, more than the limit of 1048576");
  ExpectError(CheckPromptText("the prompt text", 7 << 20, RequestLimits()),
              absl::StatusCode::kOutOfRange, "the prompt text has 7340032 bytes");
  ExpectError(CheckStopStrings({"a", "b", "c"}, limits), absl::StatusCode::kOutOfRange,
              "3 stop strings");
  limits.max_messages = 0;
  EXPECT_FALSE(ValidateRequestLimits(limits).ok());
}

TEST(RequestLimitsTest, UnusableLimitsAreInvalid) {
  RequestLimits no_ctx = Limits();
  no_ctx.n_ctx = 0;
  EXPECT_EQ(ValidateRequestLimits(no_ctx).code(), absl::StatusCode::kInvalidArgument);
  RequestLimits no_tokens = Limits();
  no_tokens.max_tokens = 0;
  EXPECT_EQ(ValidateRequestLimits(no_tokens).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri::coordinator
