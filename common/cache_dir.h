// Where Colibri keeps its caches (the kernel set chosen per CPU model, the
// coordinator's expert hashes): files that only save work and may be deleted
// at any time.
//
// Thread-safety: every function may be called from any thread.
#ifndef COLIBRI_COMMON_CACHE_DIR_H_
#define COLIBRI_COMMON_CACHE_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace colibri {

// The cache directory from the values of the environment variables
// COLIBRI_CACHE_DIR, XDG_CACHE_HOME and HOME (each null when unset; programs
// read them in main: common/process_knobs.h): colibri_cache_dir when set (set
// but empty: "", no cache), else xdg_cache_home + "/colibri" when that is an
// absolute path, else home + "/.cache/colibri" when home is absolute, else "".
std::string CacheDirFrom(const char* colibri_cache_dir, const char* xdg_cache_home,
                         const char* home);

// mkdir -p `dir` (new directories mode 0700); true when it is a directory
// afterwards.
bool MakeCacheDirs(const std::string& dir);

// Writes `contents` to `path` through a temporary file of this process
// renamed into place, so a concurrent reader sees a whole file or none (no
// fsync: a cache lost in a crash only costs the work again). The file is
// 0600; its directory must exist (MakeCacheDirs). Unavailable naming the
// path on failure, the temporary file removed.
absl::Status WriteCacheFile(const std::string& path, absl::string_view contents);

}  // namespace colibri

#endif  // COLIBRI_COMMON_CACHE_DIR_H_
