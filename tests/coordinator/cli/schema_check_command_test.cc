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

TEST(SchemaCheckCommandTest, ExplainSaysWhereAValidInstanceWasRefused) {
  const std::string fixtures = testing::FixturesDir();
  if (fixtures.empty()) GTEST_SKIP() << "fixtures not found";
  // Labelled valid, but the schema refuses the "b" key's value: the first
  // refused token starts at byte 12 (after {"a":1,"b":[).
  const std::string path = ::testing::TempDir() + "/explain_case.json";
  {
    std::ofstream out(path);
    out << R"({"schema":{"type":"object","properties":{"b":{"type":"array","items":{"type":"string"}}}},)"
        << R"("tests":[{"valid":true,"data":{"a":1,"b":[2]}},{"valid":true,"data":{"b":["x"]}},)"
        << R"({"valid":false,"data":{"b":[3]}}]})";
  }
  const std::string command_path = testing::BinaryPath("coordinator/colibri-coordinator");
  const std::string vocab = fixtures + "/vocab/ggml-vocab-qwen3.gguf";
  const testing::CommandResult plain =
      testing::RunCommand({command_path, "schema-check", "--vocab", vocab, path});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.out, ::testing::Not(::testing::HasSubstr("refused_at")));
  const testing::CommandResult explained =
      testing::RunCommand({command_path, "schema-check", "--vocab", vocab, "--explain", path});
  ASSERT_EQ(explained.exit_code, 0) << explained.err;
  const Json line = Json::parse(explained.out, nullptr, false);
  ASSERT_TRUE(line.is_object()) << explained.out;
  const Json& tests = line["tests"];
  ASSERT_EQ(tests.size(), 3u);
  EXPECT_EQ(tests[0]["accepted"], false);
  EXPECT_EQ(tests[0]["refused_at"], 12);
  EXPECT_EQ(tests[0]["near"], R"({"a":1,"b":[|2]})");
  EXPECT_EQ(tests[1]["accepted"], true);
  EXPECT_FALSE(tests[1].contains("refused_at"));
  EXPECT_FALSE(tests[2].contains("refused_at"));  // invalid: refused as it should be
}

}  // namespace
}  // namespace colibri
