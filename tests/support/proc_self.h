// What /proc/self says about this process's mappings, for tests of how
// memory is mapped. Header-only.
#ifndef COLIBRI_TESTS_SUPPORT_PROC_SELF_H_
#define COLIBRI_TESTS_SUPPORT_PROC_SELF_H_

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace colibri::testing {

// The line starting with `key` ("Rss:", "VmFlags:", ...) of the mapping that
// starts exactly at `start` in /proc/self/smaps; "" when no mapping starts
// there.
inline std::string SmapsLine(const void* start, const std::string& key) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    if (dash != std::string::npos && dash > 0 && line.find(' ') > dash) {
      in_mapping =
          std::stoull(line.substr(0, dash), nullptr, 16) == reinterpret_cast<uintptr_t>(start);
      continue;
    }
    if (in_mapping && line.rfind(key, 0) == 0) return line;
  }
  return "";
}

// Whether the mapping that holds `p` is backed by a file (else anonymous);
// *found says whether any mapping holds it.
inline bool FileBacked(const void* p, bool* found) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long begin = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {};
    char dev[16] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %15s %llu", &begin, &end, perms, &offset, dev,
                    &inode) != 6) {
      continue;
    }
    if (at >= begin && at < end) {
      *found = true;
      return inode != 0;
    }
  }
  *found = false;
  return false;
}

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_PROC_SELF_H_
