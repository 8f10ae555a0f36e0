// Parsers for the values of colibri-relay's flags, kept out of main.cc so that
// they can be tested.
#ifndef COLIBRI_TOOLS_RELAY_RELAY_FLAGS_H_
#define COLIBRI_TOOLS_RELAY_RELAY_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::relay {

// "1Gbit", "100Mbit", "2.5gbit", "125MB", "64KiB", "1000" (bytes) into bytes
// per second. Units, case-insensitive, optionally followed by "/s": bit, Kbit,
// Mbit, Gbit, Tbit (decimal, bits); B, KB, MB, GB, TB (decimal, bytes); KiB,
// MiB, GiB, TiB (binary, bytes). "bit" must be spelled out: "Mb" is megabytes.
// "0" means unlimited. InvalidArgument for anything else or below 1 byte/s.
absl::StatusOr<uint64_t> ParseBandwidth(absl::string_view text);

// "LISTEN=TARGET", each HOST:PORT. InvalidArgument when either is missing.
struct RouteSpec {
  std::string listen;
  std::string target;
};
absl::StatusOr<RouteSpec> ParseRoute(absl::string_view text);

// "HOST:PORT" or "[V6HOST]:PORT" into its parts (brackets removed).
absl::Status SplitHostPort(absl::string_view address, std::string* host, std::string* port);

}  // namespace colibri::relay

#endif  // COLIBRI_TOOLS_RELAY_RELAY_FLAGS_H_
