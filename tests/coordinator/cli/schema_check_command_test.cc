// `schema-check` on hand-written cases: each case file carries, under
// "expected" (ignored by the command), what the command must print, worked
// out from the schema by hand.
#include <dirent.h>

#include <fstream>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using Json = nlohmann::ordered_json;

std::string CasesDir() {
  return std::string(COLIBRI_SOURCE_DIR) + "/tests/coordinator/cli/schema_cases";
}

std::vector<std::string> CaseFiles() {
  std::vector<std::string> files;
  DIR* dir = opendir(CasesDir().c_str());
  if (dir == nullptr) return files;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".json") {
      files.push_back(CasesDir() + "/" + name);
    }
  }
  closedir(dir);
  std::sort(files.begin(), files.end());
  return files;
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in, nullptr, /*allow_exceptions=*/false);
}

TEST(SchemaCheckCommandTest, HandWrittenCases) {
  const std::string fixtures = testing::FixturesDir();
  if (fixtures.empty()) GTEST_SKIP() << "fixtures not found";
  const std::vector<std::string> files = CaseFiles();
  ASSERT_GE(files.size(), 5u);
  std::vector<std::string> command = {testing::BinaryPath("coordinator/colibri-coordinator"),
                                      "schema-check", "--vocab",
                                      fixtures + "/vocab/ggml-vocab-qwen3.gguf"};
  command.insert(command.end(), files.begin(), files.end());
  const testing::CommandResult result = testing::RunCommand(command);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.err, ::testing::HasSubstr("schema-check: 5 cases, 3 compiled"));
  std::vector<std::string> lines = absl::StrSplit(result.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i]);
    const Json line = Json::parse(lines[i], nullptr, false);
    ASSERT_TRUE(line.is_object()) << lines[i];
    std::vector<std::string> keys;
    for (auto it = line.begin(); it != line.end(); ++it) keys.push_back(it.key());
    EXPECT_THAT(keys, ::testing::ElementsAre("case", "compiled", "error", "tests", "compile_ms",
                                             "mask_us_mean", "mask_us_p99"));
    EXPECT_EQ(line["case"], files[i].substr(files[i].find_last_of('/') + 1));
    const Json doc = ReadJson(files[i]);
    if (doc.is_discarded()) {  // the malformed case file
      EXPECT_EQ(line["compiled"], false);
      EXPECT_THAT(line["error"].get<std::string>(), ::testing::HasSubstr("case file"));
      continue;
    }
    const Json& expected = doc["expected"];
    EXPECT_EQ(line["compiled"], expected["compiled"]);
    if (expected.contains("error")) {
      EXPECT_THAT(line["error"].get<std::string>(),
                  ::testing::HasSubstr(expected["error"].get<std::string>()));
    } else {
      EXPECT_TRUE(line["error"].is_null()) << line["error"];
    }
    ASSERT_EQ(line["tests"].size(), expected["accepted"].size());
    for (size_t t = 0; t < line["tests"].size(); ++t) {
      EXPECT_EQ(line["tests"][t]["valid"], doc["tests"][t]["valid"]) << t;
      EXPECT_EQ(line["tests"][t]["accepted"], expected["accepted"][t]) << "test " << t;
    }
    if (line["compiled"] == true && !line["tests"].empty()) {
      EXPECT_TRUE(line["mask_us_mean"].is_number());
      EXPECT_TRUE(line["mask_us_p99"].is_number());
    }
  }
}

}  // namespace
}  // namespace colibri
