#include "expert_node/node_config.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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

absl::Status ValidateAdvertiseAddress(absl::string_view address) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise '", address, "': ", why, " (expected HOST:PORT)"));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return bad("no port");
  absl::string_view host = address.substr(0, colon);
  if (absl::StartsWith(host, "[")) {
    if (!absl::EndsWith(host, "]") || host.size() < 3) return bad("bad IPv6 brackets");
  } else if (host.find(':') != absl::string_view::npos) {
    return bad("an IPv6 address needs brackets");
  }
  if (host.empty()) return bad("no host");
  if (host == "0.0.0.0" || host == "[::]") return bad("a wildcard cannot be dialled");
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return bad("port must be 1-65535");
  }
  return absl::OkStatus();
}

}  // namespace colibri::expert_node
