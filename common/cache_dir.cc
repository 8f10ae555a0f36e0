#include "common/cache_dir.h"

#include <sys/stat.h>

#include <cstdlib>

namespace colibri {

std::string CacheDir() {
  if (const char* own = std::getenv("COLIBRI_CACHE_DIR"); own != nullptr) return own;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/colibri";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    return std::string(home) + "/.cache/colibri";
  }
  return "";
}

bool MakeCacheDirs(const std::string& dir) {
  if (dir.empty()) return false;
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') {
      ::mkdir(dir.substr(0, pos).c_str(), 0700);  // EEXIST is fine
    }
  }
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace colibri
