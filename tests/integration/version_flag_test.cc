// `--version` on every binary: exit 0 and one line on stdout, "PROGRAM
// VERSION", VERSION being `git describe --always --dirty` at configure time
// or the project version (cmake/ColibriVersion.cmake).
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

TEST(VersionFlagTest, EveryBinaryPrintsOneVersionLine) {
  const std::vector<std::pair<std::string, std::string>> binaries = {
      {"coordinator/colibri-coordinator", "colibri-coordinator"},
      {"expert_node/colibri-expert-node", "colibri-expert-node"},
      {"client/colibri-client", "colibri-client"},
      {"tools/relay/colibri-relay", "colibri-relay"},
      {"tools/quantize/colibri-quantize", "colibri-quantize"},
      {"tools/colibri-make-model", "colibri-make-model"},
  };
  // "0.1.0", "0.1.0-g1a2b3c4", "v0.2.0-12-g1a2b3c4-dirty", ...
  const std::regex version(R"(v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9]+)?(-g[0-9a-f]{4,})?(-dirty)?)");
  for (const auto& [path, program] : binaries) {
    SCOPED_TRACE(path);
    const testing::CommandResult r = testing::RunCommand({testing::BinaryPath(path), "--version"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(r.out.rfind(program + " ", 0), 0u) << r.out;
    ASSERT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.back(), '\n') << r.out;
    const std::string rest = r.out.substr(program.size() + 1, r.out.size() - program.size() - 2);
    EXPECT_TRUE(std::regex_match(rest, version)) << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "more than one line: " << r.out;
  }
}

}  // namespace
}  // namespace colibri
