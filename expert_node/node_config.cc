#include "expert_node/node_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace colibri::expert_node {

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  const std::string original(text);
  std::string s = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  absl::string_view rest(s);
  if (absl::EndsWith(rest, "IB")) {
    rest.remove_suffix(2);
  } else if (absl::EndsWith(rest, "B")) {
    rest.remove_suffix(1);
  }
  uint64_t multiplier = 1;
  if (!rest.empty()) {
    switch (rest.back()) {
      case 'K': multiplier = uint64_t{1} << 10; break;
      case 'M': multiplier = uint64_t{1} << 20; break;
      case 'G': multiplier = uint64_t{1} << 30; break;
      case 'T': multiplier = uint64_t{1} << 40; break;
      default: break;
    }
    if (multiplier != 1) rest.remove_suffix(1);
  }
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", original, "' is not a byte size (e.g. 4096, 512M, 4G)"));
  };
  if (rest.empty()) return bad();
  uint64_t whole = 0;
  if (absl::SimpleAtoi(rest, &whole)) {
    if (whole > UINT64_MAX / multiplier) return bad();
    return whole * multiplier;
  }
  double value = 0;
  if (rest.find_first_not_of("0123456789.") != absl::string_view::npos ||
      !absl::SimpleAtod(rest, &value) || !std::isfinite(value) || value < 0) {
    return bad();
  }
  const double bytes = value * static_cast<double>(multiplier);
  if (bytes >= 1.8e19) return bad();
  return static_cast<uint64_t>(bytes);
}

std::string ListenHost(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return std::string(close == absl::string_view::npos ? address : address.substr(0, close + 1));
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || address.find(':') != colon) {
    return std::string(address);  // no port, or a bare IPv6 address
  }
  return std::string(address.substr(0, colon));
}

bool IsLoopbackListenAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  absl::string_view rest = address;
  absl::ConsumePrefix(&rest, "ipv4:");
  absl::ConsumePrefix(&rest, "ipv6:");
  const std::string host = absl::AsciiStrToLower(ListenHost(rest));
  if (host == "localhost" || host == "[::1]" || host == "::1") return true;
  // 127.0.0.0/8: four decimal octets, the first 127.
  std::vector<std::string> octets;
  size_t start = 0;
  for (;;) {
    const size_t dot = host.find('.', start);
    octets.push_back(host.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (octets.size() != 4) return false;
  for (const std::string& o : octets) {
    int v = 0;
    if (o.empty() || o.size() > 3 || !absl::SimpleAtoi(o, &v) || v < 0 || v > 255) return false;
  }
  return octets[0] == "127";
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (!contents.ok()) return contents.status();
  std::string token(absl::StripAsciiWhitespace(*contents));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  return token;
}

}  // namespace colibri::expert_node
