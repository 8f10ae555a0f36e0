// HTTP requests from integration tests through the curl binary (Debian's
// curl, installed by scripts/install-deps.sh): what a user's client sends,
// with no HTTP code of ours on the client side.
#ifndef COLIBRI_TESTS_SUPPORT_CURL_H_
#define COLIBRI_TESTS_SUPPORT_CURL_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace colibri::testing {

inline constexpr char kCurl[] = "/usr/bin/curl";

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
};

// curl -sS against http://address/path; `args` go before the URL.
HttpReply Curl(const std::string& address, const std::string& path,
               std::vector<std::string> args = {});
// POST of `body` as JSON.
HttpReply PostJson(const std::string& address, const std::string& path, const nlohmann::json& body,
                   std::vector<std::string> args = {});

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_CURL_H_
