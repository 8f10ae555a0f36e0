// The main of every colibri_test binary: GoogleTest's, after the process knobs
// (common/process_knobs.h) of the test's environment are read as a program's
// main reads them. COLIBRI_CPU caps the CPU features (ctest runs kernel tests
// again under each cap); a bad value of any knob fails the binary.
#include <cstdio>

#include "absl/status/statusor.h"
#include "common/cpu_features.h"
#include "common/process_knobs.h"
#include "gtest/gtest.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const absl::StatusOr<colibri::ProcessKnobs> knobs = colibri::ReadProcessKnobs();
  absl::Status status = knobs.status();
  if (status.ok()) status = colibri::SetCpuCap(knobs->cpu_cap);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  return RUN_ALL_TESTS();
}
