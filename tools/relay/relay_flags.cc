#include "tools/relay/relay_flags.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace colibri::relay {
namespace {

struct Unit {
  const char* name;
  double bytes;  // per unit
};

// Longest names first so that "kbit" is not read as "bit" after a "k".
constexpr Unit kUnits[] = {
    {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8},  {"gbit", 1e9 / 8},     {"tbit", 1e12 / 8},
    {"kib", 1024.0},   {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
    {"bit", 1.0 / 8},  {"kb", 1e3},        {"mb", 1e6},           {"gb", 1e9},
    {"tb", 1e12},      {"b", 1.0},
};

}  // namespace

absl::StatusOr<uint64_t> ParseBandwidth(absl::string_view text) {
  std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  absl::string_view rest = lower;
  absl::ConsumeSuffix(&rest, "/s");
  double scale = 1.0;
  for (const Unit& unit : kUnits) {
    if (absl::ConsumeSuffix(&rest, unit.name)) {
      scale = unit.bytes;
      break;
    }
  }
  double value = 0;
  if (rest.empty() || !absl::SimpleAtod(rest, &value) || !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bandwidth '", text, "': expected a number and a unit such as 1Gbit or 125MB"));
  }
  if (value == 0) return 0;
  const double bytes = std::round(value * scale);
  if (bytes < 1 || bytes > 1e18) {
    return absl::InvalidArgumentError(absl::StrCat("bandwidth '", text, "' is out of range"));
  }
  return static_cast<uint64_t>(bytes);
}

absl::Status SplitHostPort(absl::string_view address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not HOST:PORT"));
  }
  absl::string_view h = address.substr(0, colon);
  if (absl::ConsumePrefix(&h, "[") && !absl::ConsumeSuffix(&h, "]")) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "': unbalanced '['"));
  }
  int port_number = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port_number) || port_number < 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "': bad port"));
  }
  *host = std::string(h);
  *port = std::string(address.substr(colon + 1));
  return absl::OkStatus();
}

absl::StatusOr<RouteSpec> ParseRoute(absl::string_view text) {
  const size_t eq = text.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("route '", text, "' is not LISTEN=TARGET"));
  }
  RouteSpec route{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
  std::string host, port;
  for (const std::string* address : {&route.listen, &route.target}) {
    absl::Status s = SplitHostPort(*address, &host, &port);
    if (!s.ok())
      return absl::InvalidArgumentError(absl::StrCat("route '", text, "': ", s.message()));
  }
  return route;
}

}  // namespace colibri::relay
