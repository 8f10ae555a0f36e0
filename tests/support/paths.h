// Where tests find the shared fixtures and the build's binaries. Header-only so
// that every test binary gets its own compile-time defaults (see colibri_test in
// cmake/ColibriHelpers.cmake); the environment variables COLIBRI_FIXTURES_DIR
// and COLIBRI_BINARY_DIR override them.
#ifndef COLIBRI_TESTS_SUPPORT_PATHS_H_
#define COLIBRI_TESTS_SUPPORT_PATHS_H_

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#ifndef COLIBRI_TEST_FIXTURES_DIR
#define COLIBRI_TEST_FIXTURES_DIR "../shared/fixtures"
#endif
#ifndef COLIBRI_TEST_BINARY_DIR
#define COLIBRI_TEST_BINARY_DIR "."
#endif

namespace colibri::testing {

// The fixtures folder, or "" when it does not exist (tests then skip).
inline std::string FixturesDir() {
  const char* env = std::getenv("COLIBRI_FIXTURES_DIR");
  std::string dir = env != nullptr && *env != '\0' ? env : COLIBRI_TEST_FIXTURES_DIR;
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? dir : "";
}

// <build dir>/<relative>.
inline std::string BinaryPath(const std::string& relative) {
  const char* env = std::getenv("COLIBRI_BINARY_DIR");
  return std::string(env != nullptr && *env != '\0' ? env : COLIBRI_TEST_BINARY_DIR) + "/" +
         relative;
}

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_PATHS_H_
