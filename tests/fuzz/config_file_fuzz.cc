// libFuzzer harness for the config files (common/config_file.h, toml++
// underneath): any bytes must parse into entries or fail with
// InvalidArgument naming the source, never crash, hang or read out of
// bounds; each entry has a line inside the file (its key may be "": "" = 1
// is TOML).
//
//   scripts/fuzz.sh [--seconds N] config_file_fuzz
// tests/fuzz/config_file_fuzz.dict steers the mutations toward TOML.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/config_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<std::vector<colibri::ConfigEntry>> entries =
      colibri::ParseConfigText(text, "fuzz.toml");
  if (!entries.ok()) {
    if (!absl::IsInvalidArgument(entries.status()) ||
        !absl::StartsWith(entries.status().message(), "fuzz.toml")) {
      std::abort();
    }
    return 0;
  }
  const int lines = 1 + static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  for (const colibri::ConfigEntry& entry : *entries) {
    if (entry.line < 1 || entry.line > lines) std::abort();
    if (!entry.is_list && entry.values.size() != 1) std::abort();
  }
  return 0;
}
