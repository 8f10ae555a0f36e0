#include "common/config_file.h"

#include <cstdint>
#include <string>
#include <utility>
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
  // The file, the line and the key (when the line has one), then toml++'s
  // description.
  const std::vector<Case> cases = {
      {"a = 1\nlisten = 0.0.0.0:7070\n",
       "t.toml:2: key 'listen': Error while parsing floating-point"},
      {"a = 1\nlisten = 0.0.0.0:7070\n", "(strings need double quotes;"},
      {"listen = \"x\n", "t.toml:1: key 'listen': Error while parsing string"},
      {"\n\nnodes = [\"a\", \"b\"\n", "t.toml:3: key 'nodes': Error while parsing array"},
      {"nodes = [\n  \"a\"\n  \"b\",\n]\n",
       "t.toml:3: key 'nodes': Error while parsing array: expected comma or closing ']'"},
      {"nodes = [\"a\",\n  b,\n]\n", "t.toml:2: key 'nodes': Error while parsing value"},
      {"just words\n", "t.toml:1: Error while parsing key-value pair: expected '='"},
      {"= 3\n", "t.toml:1: Error while parsing root table"},
      {"a = \n", "t.toml:1: key 'a': Error while parsing key-value pair: expected value"},
      {"a = 1 2\n", "t.toml:1: key 'a': Error while parsing key-value pair"},
      {"[serve\n", "t.toml:1: Error while parsing table header"},
      {"[a.b]\n", "t.toml:1: key 'a.b': sections do not nest"},
      {"a = 1\n\na = 2\n",
       "t.toml:3: key 'a': Error while parsing key-value pair: cannot redefine"},
      {"a = \"\\q\"\n", "t.toml:1: key 'a': Error while parsing string: unknown escape"},
      {"a = yes\n", "t.toml:1: key 'a': Error while parsing value"},
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

TEST(ConfigFileTest, ReadsWhatTheHandParserCouldNot) {
  absl::StatusOr<std::vector<ConfigEntry>> entries = ParseConfigText(
      "note = \"\"\"\n"
      "two\n"
      "lines\"\"\"\n"
      "path = 'C:\\raw'\n"
      "nodes = [ # the first two\n"
      "  \"a:7070\", \"b:7070\", # comments between the items\n"
      "  'c:7070'\n"
      "]\n"
      "threads = 0x10\n"
      "serve.max-batch = 8\n"
      "generate = { temp = 0.5, seed = 7 }\n",
      "t.toml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  const std::vector<ConfigEntry>& e = *entries;
  ASSERT_EQ(e.size(), 7u);
  EXPECT_THAT(e[0].values, ElementsAre("two\nlines"));
  EXPECT_THAT(e[1].values, ElementsAre("C:\\raw"));
  EXPECT_EQ(e[2].key, "nodes");
  EXPECT_THAT(e[2].values, ElementsAre("a:7070", "b:7070", "c:7070"));
  EXPECT_EQ(e[2].line, 5);
  EXPECT_THAT(e[3].values, ElementsAre("16"));
  EXPECT_EQ(e[4].section, "serve");
  EXPECT_EQ(e[4].key, "max-batch");
  EXPECT_EQ(e[4].line, 10);
  // An inline table is a section too; its keys share its line.
  EXPECT_EQ(e[5].section, "generate");
  EXPECT_EQ(e[6].section, "generate");
  EXPECT_EQ(e[5].line, 11);
  EXPECT_THAT(
      std::vector<std::string>({e[5].key + "=" + e[5].values[0], e[6].key + "=" + e[6].values[0]}),
      ::testing::UnorderedElementsAre("temp=0.5", "seed=7"));
}

TEST(ConfigFileTest, ValuesThatAreNoOptionValuesNameTheirKey) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"nodes = [[\"a\"], [\"b\"]]\n", "t.toml:1: key 'nodes': a list inside a list"},
      {"a = 1\n[serve.tls]\ncert = \"c\"\n", "t.toml:2: key 'serve.tls': sections do not nest"},
      {"x.y.z = 1\n", "t.toml:1: key 'x.y': sections do not nest"},
      {"when = 2026-12-07\n", "t.toml:1: key 'when': dates and times are not option values"},
      {"[[node]]\nlisten = \"a\"\n", "t.toml:1: key 'node': an array of tables"},
      {"[serve]\nt = 1\n[serve]\nt = 2\n", "t.toml:3:"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<ConfigEntry>> entries = ParseConfigText(c.text, "t.toml");
    ASSERT_FALSE(entries.ok()) << c.text;
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(entries.status().message()), HasSubstr(c.expected)) << c.text;
  }
}

// Hostile files get an InvalidArgument naming the file; none crashes.
TEST(ConfigFileTest, HostileFilesGetAnErrorNotACrash) {
  std::string deep_list = "a = " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  std::string deep_table = "a = ";
  for (int i = 0; i < 50000; ++i) deep_table += "{b=";
  deep_table += "1" + std::string(50000, '}') + "\n";
  std::string dotted;
  for (int i = 0; i < 400000; ++i) dotted += "a.";
  dotted += "b = 1\n";
  std::string dotted_header = "[" + dotted.substr(0, 200000) + "b]\n";
  std::string dotted_inline = "x = { " + dotted + " }\n";
  std::string garbage;
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    garbage.push_back(static_cast<char>(state >> 24));
  }
  const std::string huge = "note = \"" + std::string(kMaxConfigBytes, 'x') + "\"\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {deep_list, "maximum nested value depth"},
      {deep_table, "maximum nested value depth"},
      {dotted, "t.toml:1: a dotted key of more than"},
      {dotted_header, "t.toml:1: a dotted key of more than"},
      {dotted_inline, "t.toml:1: a dotted key of more than"},
      {garbage, "t.toml:"},
      {std::string("a = \"x\0y\"\n", 9), "t.toml:1: key 'a'"},
      // Found by config_file_fuzz: toml++ asserts that a header's key starts
      // with a key character.
      {"[(", "t.toml:1: Error while parsing key"},
      {"a = 1\n[ (x]\n", "t.toml:2: Error while parsing key"},
      {"a.(=1\n", "t.toml:1: key 'a.(': Error while parsing key"},
      // Also found by it: toml++'s non-ASCII whitespace test reached
      // __builtin_unreachable on '¡' (U+00A1; the sanitizer build sees it).
      {"a = 1 \xc2\xa1\n", "t.toml:1: key 'a': Error while parsing key-value pair"},
      {"a = 1\n\xc2\xa1 = 2\n", "t.toml:2:"},
      {huge, "a config file has at most"},
  };
  for (const auto& [text, expected] : cases) {
    absl::StatusOr<std::vector<ConfigEntry>> entries = ParseConfigText(text, "t.toml");
    ASSERT_FALSE(entries.ok()) << text.substr(0, 40);
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument) << text.substr(0, 40);
    EXPECT_THAT(std::string(entries.status().message()).substr(0, 300), HasSubstr(expected))
        << text.substr(0, 40);
  }
}

TEST(ConfigFileTest, FloatsReadBackExactly) {
  absl::StatusOr<std::vector<ConfigEntry>> entries =
      ParseConfigText("a = 0.1\nb = 1e3\nc = -2.5e-7\nd = 1_000.5\n", "t.toml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_THAT((*entries)[0].values, ElementsAre("0.1"));
  EXPECT_THAT((*entries)[1].values, ElementsAre("1000"));
  EXPECT_THAT((*entries)[2].values, ElementsAre("-2.5e-07"));
  EXPECT_THAT((*entries)[3].values, ElementsAre("1000.5"));
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
