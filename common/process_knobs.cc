#include "common/process_knobs.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/cache_dir.h"

namespace colibri {
namespace {

constexpr int kMaxSpinUs = 1000000;

absl::Status BadValue(absl::string_view name, absl::string_view value, absl::string_view allowed) {
  return absl::InvalidArgumentError(
      absl::StrCat("environment variable ", name, "=\"", value, "\" is not ", allowed));
}

}  // namespace

absl::StatusOr<ProcessKnobs> ParseProcessKnobs(
    absl::FunctionRef<const char*(const char* name)> lookup) {
  ProcessKnobs knobs;
  if (const char* cpu = lookup("COLIBRI_CPU"); cpu != nullptr && cpu[0] != '\0') {
    const absl::string_view value = cpu;
    if (value == "portable") {
      knobs.cpu_cap = CpuCap::kPortable;
    } else if (value == "avx2") {
      knobs.cpu_cap = CpuCap::kAvx2;
    } else if (value == "neon") {
      knobs.cpu_cap = CpuCap::kNeon;
    } else {
      return BadValue("COLIBRI_CPU", value, "one of portable, avx2, neon");
    }
  }
  if (const char* spin = lookup("COLIBRI_SPIN_US"); spin != nullptr && spin[0] != '\0') {
    int us = 0;
    // SimpleAtoi accepts surrounding whitespace and a '+'; only digits are meant.
    const bool digits =
        absl::string_view(spin).find_first_not_of("0123456789") == absl::string_view::npos;
    if (!digits || !absl::SimpleAtoi(spin, &us) || us > kMaxSpinUs) {
      return BadValue("COLIBRI_SPIN_US", spin,
                      absl::StrCat("a number of microseconds from 0 to ", kMaxSpinUs));
    }
    knobs.spin_us = us;
  }
  knobs.cache_dir =
      CacheDirFrom(lookup("COLIBRI_CACHE_DIR"), lookup("XDG_CACHE_HOME"), lookup("HOME"));
  return knobs;
}

absl::StatusOr<ProcessKnobs> ReadProcessKnobs() {
  return ParseProcessKnobs([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace colibri
