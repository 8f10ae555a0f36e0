#include "common/config_file.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colibri {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ConfigFileTest, ReadsScalarsListsSectionsAndComments) {
  const std::string text =
      "# node settings\n"
      "\n"
      "listen = \"0.0.0.0:7070\"   # all interfaces\n"
      "io-threads = 4\n"
      "temp=0.75\n"
      "insecure = false\n"
      "nodes = [\"a:7070\", \"b:7070\" ]\n"
      "empty = []\n"
      "note = \"say \\\"hi\\\" # not a comment\"\r\n"
      "[generate]\n"
      "seed = 1_000\n";
  absl::StatusOr<std::vector<ConfigEntry>> entries = ParseConfigText(text, "t.toml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 8u);
  const std::vector<ConfigEntry>& e = *entries;
  EXPECT_EQ(e[0].key, "listen");
  EXPECT_THAT(e[0].values, ElementsAre("0.0.0.0:7070"));
  EXPECT_EQ(e[0].line, 3);
  EXPECT_FALSE(e[0].is_list);
  EXPECT_THAT(e[1].values, ElementsAre("4"));
  EXPECT_EQ(e[2].key, "temp");
  EXPECT_THAT(e[2].values, ElementsAre("0.75"));
  EXPECT_THAT(e[3].values, ElementsAre("false"));
  EXPECT_TRUE(e[4].is_list);
  EXPECT_THAT(e[4].values, ElementsAre("a:7070", "b:7070"));
  EXPECT_TRUE(e[5].is_list);
  EXPECT_TRUE(e[5].values.empty());
  EXPECT_THAT(e[6].values, ElementsAre("say \"hi\" # not a comment"));
  EXPECT_EQ(e[6].section, "");
  EXPECT_EQ(e[7].section, "generate");
  EXPECT_EQ(e[7].key, "seed");
  EXPECT_THAT(e[7].values, ElementsAre("1000"));
  EXPECT_EQ(e[7].line, 11);
}

TEST(ConfigFileTest, SyntaxErrorsNameFileLineAndProblem) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"a = 1\nlisten = 0.0.0.0:7070\n", "t.toml:2: key 'listen': '0.0.0.0:7070' is not a value"},
      {"listen = \"x\n", "t.toml:1: key 'listen': unterminated string"},
      {"\n\nnodes = [\"a\", \"b\"\n", "t.toml:3: key 'nodes': the list has no closing ']'"},
      {"nodes = [\n  \"a\"\n  \"b\",\n]\n", "t.toml:3: key 'nodes': expected ',' or ']'"},
      {"nodes = [\"a\",\n  b,\n]\n", "t.toml:2: key 'nodes': 'b' is not a value"},
      {"just words\n", "t.toml:1: expected 'key = value'"},
      {"= 3\n", "t.toml:1: expected 'key = value'"},
      {"a = \n", "t.toml:1: key 'a': missing value"},
      {"a = 1 2\n", "t.toml:1: key 'a': unexpected text after the value"},
      {"[serve\n", "t.toml:1: unterminated section header"},
      {"[a.b]\n", "t.toml:1: bad section name 'a.b'"},
      {"a = 1\n\na = 2\n", "t.toml:3: key 'a' given twice"},
      {"a = \"\\q\"\n", "t.toml:1: key 'a': unsupported escape"},
      {"a = yes\n", "t.toml:1: key 'a': 'yes' is not a value"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<ConfigEntry>> entries = ParseConfigText(c.text, "t.toml");
    ASSERT_FALSE(entries.ok()) << c.text;
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(entries.status().message()), HasSubstr(c.expected)) << c.text;
  }
}

TEST(ConfigFileTest, ListsGoOnOverLinesWithCommentsAndATrailingComma) {
  absl::StatusOr<std::vector<ConfigEntry>> entries = ParseConfigText(
      "nodes = [\n"
      "  \"a:7070\",  # the first\n"
      "\n"
      "  \"b:7070\", \"c:7070\",\n"
      "]  # done\n"
      "replicas = 2\n"
      "empty = [\n]\n",
      "t.toml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_TRUE((*entries)[0].is_list);
  EXPECT_EQ((*entries)[0].values, (std::vector<std::string>{"a:7070", "b:7070", "c:7070"}));
  EXPECT_EQ((*entries)[1].key, "replicas");
  EXPECT_EQ((*entries)[1].line, 6);
  EXPECT_TRUE((*entries)[2].values.empty());
}

TEST(ConfigFileTest, SameKeyInTwoSectionsIsFine) {
  absl::StatusOr<std::vector<ConfigEntry>> entries =
      ParseConfigText("seed = 1\n[generate]\nseed = 2\n", "t.toml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ(entries->size(), 2u);
}

TEST(ConfigFileTest, MissingFileIsNotFound) {
  absl::StatusOr<std::vector<ConfigEntry>> entries =
      ReadConfigFile("/nonexistent/colibri/config.toml");
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(entries.status().message()),
              HasSubstr("/nonexistent/colibri/config.toml"));
}

}  // namespace
}  // namespace colibri
