// Running the project's binaries from tests.
#ifndef COLIBRI_TESTS_SUPPORT_SUBPROCESS_H_
#define COLIBRI_TESTS_SUPPORT_SUBPROCESS_H_

#include <string>
#include <vector>

#include "tests/support/paths.h"

namespace colibri::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv (no shell) and captures both streams.
CommandResult RunCommand(const std::vector<std::string>& argv);

// "1,2,3"
std::string JoinIds(const std::vector<int>& ids);

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_SUBPROCESS_H_
