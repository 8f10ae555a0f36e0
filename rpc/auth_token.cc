#include "rpc/auth_token.h"

#include <algorithm>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rpc/server_support.h"

namespace colibri::rpc {
namespace {

constexpr absl::string_view kHowToMakeOne =
    "make one with `openssl rand -hex 32` (or `head -c 32 /dev/urandom | base64`)";

bool IsPlaceholder(absl::string_view token) {
  if (token == kPlaceholderToken) return true;
  const std::string lower = absl::AsciiStrToLower(token);
  for (absl::string_view marker : {"replace-me", "change-me", "changeme"}) {
    if (absl::StrContains(lower, marker)) return true;
  }
  return false;
}

}  // namespace

absl::Status CheckAuthToken(absl::string_view token) {
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("the token is empty; ", kHowToMakeOne));
  if (IsPlaceholder(token)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the token is the public placeholder of the example deployment (k8s/base/token.example), "
        "not a secret; ",
        kHowToMakeOne));
  }
  if (token.size() < kMinAuthTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the token has ", token.size(), " characters, fewer than the ",
                     kMinAuthTokenBytes, " required; ", kHowToMakeOne));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (!contents.ok()) {
    return absl::NotFoundError(absl::StrCat("token file: ", contents.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(*contents));
  if (absl::Status valid = CheckAuthToken(token); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": ", valid.message()));
  }
  return token;
}

absl::StatusOr<std::vector<std::string>> ReadKeyFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (!contents.ok()) {
    return absl::NotFoundError(absl::StrCat("key file: ", contents.status().message()));
  }
  std::vector<std::string> keys;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*contents, '\n')) {
    ++line_number;
    const absl::string_view key = absl::StripAsciiWhitespace(line);
    if (key.empty() || key[0] == '#') continue;
    if (absl::Status valid = CheckAuthToken(key); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key file ", path, ":", line_number, ": ", valid.message()));
    }
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key file ", path, ":", line_number, ": the same key as an earlier line"));
    }
    keys.emplace_back(key);
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("key file ", path, ": no key in it"));
  }
  return keys;
}

}  // namespace colibri::rpc
