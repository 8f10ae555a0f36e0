// Running colibri-coordinator from tests and reading what it prints and writes.
#ifndef COLIBRI_TESTS_SUPPORT_COORDINATOR_RUN_H_
#define COLIBRI_TESTS_SUPPORT_COORDINATOR_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/golden.h"

namespace colibri::testing {

// <build dir>/coordinator/colibri-coordinator.
std::string Coordinator();

// `colibri-coordinator run` of c's model on c's prompt tokens: n_predict greedy
// tokens (--temp 0, --ignore-eos), 2 threads, printed as ids. Element 5 is the
// --prompt-tokens value.
std::vector<std::string> GreedyRunArgs(const GoldenCase& c, int n_predict);

// The whole file as bytes; "" when it cannot be read.
std::string ReadAll(const std::string& path);

// The integer after " key=" on the first line of `text` starting with
// `prefix` (the coordinator's statistics lines); -1 if absent.
int64_t Counter(const std::string& text, const std::string& prefix, const std::string& key);

// `text` split at whitespace (e.g. printed token ids).
std::vector<std::string> Words(const std::string& text);

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_COORDINATOR_RUN_H_
