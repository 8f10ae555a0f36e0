#include "common/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace colibri {
namespace {

// The number in a limit file; 0 for "max", a missing file or anything else
// (no limit there).
uint64_t ReadLimit(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) return 0;
  // cgroup v1 reports "no limit" as a huge page-rounded number.
  return value >= (uint64_t{1} << 62) ? 0 : value;
}

bool IsMemoryController(absl::string_view controllers) {
  for (absl::string_view c : absl::StrSplit(controllers, ',')) {
    if (c == "memory") return true;
  }
  return false;
}

uint64_t Smaller(uint64_t a, uint64_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return std::min(a, b);
}

}  // namespace

uint64_t MemoryLimitBytesFor(const std::string& cgroup_root, const std::string& proc_self_cgroup,
                             uint64_t physical) {
  uint64_t limit = physical;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n')) {
    // hierarchy-id:controllers:path
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    std::string dir;
    std::string file;
    if (parts[0] == "0" && parts[1].empty()) {
      dir = cgroup_root;
      file = "memory.max";
    } else if (IsMemoryController(parts[1])) {
      dir = cgroup_root + "/memory";
      file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    // The group and every ancestor up to the root: each limit applies.
    limit = Smaller(limit, ReadLimit(dir + "/" + file));
    std::string path;
    for (absl::string_view part : absl::StrSplit(parts[2], '/', absl::SkipEmpty())) {
      if (part == "..") break;  // never above the mount point
      path += "/" + std::string(part);
      limit = Smaller(limit, ReadLimit(dir + path + "/" + file));
    }
  }
  return limit;
}

uint64_t MemoryLimitBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  const uint64_t physical = pages > 0 && page_size > 0
                                ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
                                : 0;
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  return MemoryLimitBytesFor("/sys/fs/cgroup", text.str(), physical);
}

}  // namespace colibri
