// The token rule (rpc/auth_token.h): empty, placeholder and short tokens are
// refused with a message saying why and, for files, naming the file; the
// message never contains the token. The placeholder the repository ships
// (k8s/base/token.example) is refused as read from the file itself.
#include "rpc/auth_token.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "gtest/gtest.h"

#ifndef COLIBRI_SOURCE_DIR
#define COLIBRI_SOURCE_DIR "."
#endif

namespace colibri::rpc {
namespace {

const char kGoodToken[] = "4f1c9e0a7b2d58e3c6a91f0d2b7e4c83";  // 32 hex digits

std::string WriteTokenFile(const std::string& name, const std::string& contents) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

// The status of reading `contents` from a file: InvalidArgument whose message
// names the file, contains `why` and not the token.
void ExpectRefused(const std::string& contents, const std::string& why) {
  SCOPED_TRACE(why);
  const std::string path = WriteTokenFile("auth_token_refused", contents);
  const absl::StatusOr<std::string> token = ReadTokenFile(path);
  ASSERT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument) << token.status();
  const std::string message(token.status().message());
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(why), std::string::npos) << message;
  EXPECT_NE(message.find("openssl rand -hex 32"), std::string::npos) << message;
  const std::string stripped(absl::StripAsciiWhitespace(contents));
  if (stripped.size() > 3) {
    EXPECT_EQ(message.find(stripped), std::string::npos) << message;
  }
}

TEST(AuthTokenTest, ReadsTokenFilesWithoutSurroundingWhitespace) {
  const std::string path = WriteTokenFile("auth_token_good", std::string("  ") + kGoodToken + "\n");
  const absl::StatusOr<std::string> token = ReadTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kGoodToken);
  std::remove(path.c_str());
  const absl::StatusOr<std::string> missing = ReadTokenFile(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), absl::string_view::npos) << missing.status();
}

TEST(AuthTokenTest, RefusesEmptyShortAndPlaceholderTokenFiles) {
  ExpectRefused("", "empty");
  ExpectRefused(" \n\t\n", "empty");
  ExpectRefused("s3cret\n", "6 characters, fewer than the 32 required");
  ExpectRefused(std::string(kGoodToken).substr(1) + "\n", "31 characters, fewer than the 32");
  ExpectRefused(std::string(kPlaceholderToken) + "\n", "placeholder");
  ExpectRefused("please-CHANGE-ME-0123456789abcdef0123456789", "placeholder");
  ExpectRefused("changeme-changeme-changeme-changeme", "placeholder");
}

TEST(AuthTokenTest, KeyFilesHoldSeveralKeysOnePerLine) {
  const std::string second = std::string(kGoodToken) + "ff";
  const std::string path = WriteTokenFile(
      "api_keys_good", std::string("# the web UI\n") + kGoodToken + "\n\n  " + second + "  \n");
  const absl::StatusOr<std::vector<std::string>> keys = ReadKeyFile(path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (std::vector<std::string>{kGoodToken, second}));

  struct Case {
    std::string contents;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {std::string(kGoodToken) + "\nshort-key\n", ":2: the token has 9 characters"},
           {std::string(kGoodToken) + "\n" + kGoodToken + "\n", ":2: the same key as an earlier line"},
           {"# only a comment\n\n", ": no key in it"}}) {
    const std::string bad = WriteTokenFile("api_keys_bad", c.contents);
    const absl::StatusOr<std::vector<std::string>> refused = ReadKeyFile(bad);
    ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << c.why;
    const std::string message(refused.status().message());
    EXPECT_NE(message.find(bad + c.why), std::string::npos) << message;
    EXPECT_EQ(message.find(kGoodToken), std::string::npos) << message;
  }
}

TEST(AuthTokenTest, TheRepositorysExampleTokenIsRefused) {
  const std::string path = std::string(COLIBRI_SOURCE_DIR) + "/k8s/base/token.example";
  ASSERT_TRUE(std::ifstream(path).good()) << path;
  const absl::StatusOr<std::string> token = ReadTokenFile(path);
  EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument) << token.status();
  EXPECT_NE(token.status().message().find("placeholder"), absl::string_view::npos)
      << token.status();
}

TEST(AuthTokenTest, CheckAuthTokenAcceptsRandomTokensOfAtLeast32Characters) {
  EXPECT_TRUE(CheckAuthToken(kGoodToken).ok());
  // `head -c 32 /dev/urandom | base64`.
  EXPECT_TRUE(CheckAuthToken("q2V0b3Jl+YWxsLXRoZS10b2tlbnMtaGVyZS0wMTIzNA==").ok());
  EXPECT_EQ(CheckAuthToken("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAuthToken(std::string(31, 'a')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAuthToken(kPlaceholderToken).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(CheckAuthToken("s3cret").message()).find("s3cret"), std::string::npos);
}

}  // namespace
}  // namespace colibri::rpc
