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

}  // namespace colibri::expert_node
