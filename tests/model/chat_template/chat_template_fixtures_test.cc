// Every case of the real chat templates in ../shared/fixtures/chat_templates
// renders byte for byte as transformers rendered it, or fails where it failed.
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "model/chat_template/chat_template.h"
#include "nlohmann/json.hpp"
#include "tests/support/paths.h"

namespace colibri::chat_template {
namespace {

using Json = nlohmann::ordered_json;

std::string TemplatesDir() {
  const std::string fixtures = colibri::testing::FixturesDir();
  return fixtures.empty() ? "" : fixtures + "/chat_templates";
}

std::vector<std::string> TemplateNames() {
  std::vector<std::string> names;
  const std::string dir = TemplatesDir();
  if (dir.empty()) return names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() > 5 && name.substr(name.size() - 5) == ".json" &&
        name != "conversations.json") {
      names.push_back(name.substr(0, name.size() - 5));
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// Escapes control characters so that a failure message shows them.
std::string Visible(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Describe(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  return absl::StrCat("first difference at byte ", i, " (expected ", expected.size(),
                      " bytes, got ", actual.size(), ")\n--- expected from byte ", from, ":\n",
                      Visible(expected.substr(from, 200)), "\n--- actual from byte ", from, ":\n",
                      Visible(actual.substr(from, 200)));
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, EveryCaseMatches) {
  const std::string dir = TemplatesDir();
  if (dir.empty()) GTEST_SKIP() << "fixtures not found (set COLIBRI_FIXTURES_DIR)";
  const Json conversations = ReadJson(dir + "/conversations.json");
  const Json fixture = ReadJson(dir + "/" + GetParam() + ".json");
  absl::StatusOr<std::unique_ptr<ChatTemplate>> tmpl =
      ChatTemplate::Parse(fixture["template"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << GetParam() << ": " << tmpl.status();
  RenderOptions options;
  options.now = absl::FromCivil(absl::CivilSecond(2026, 12, 2, 12, 0, 0), absl::UTCTimeZone());
  options.time_zone = absl::UTCTimeZone();
  int passed = 0;
  for (const Json& c : fixture["cases"]) {
    const int index = c["conversation"].get<int>();
    const bool add_generation_prompt = c["add_generation_prompt"].get<bool>();
    const Json& conversation = conversations.at(index);
    Json context = Json::object();
    context["messages"] = conversation["messages"];
    if (conversation.contains("tools")) context["tools"] = conversation["tools"];
    context["add_generation_prompt"] = add_generation_prompt;
    context["bos_token"] = fixture["bos_token"];
    context["eos_token"] = fixture["eos_token"];
    const std::string label = absl::StrCat(GetParam(), " conversation ", index,
                                           " add_generation_prompt=", add_generation_prompt);
    absl::StatusOr<std::string> out = (*tmpl)->Render(context, options);
    if (c.contains("error")) {
      EXPECT_FALSE(out.ok()) << label << ": expected an error like '"
                             << c["error"].get<std::string>() << "', got output:\n"
                             << Visible(out.value_or(""));
      if (!out.ok()) ++passed;
      continue;
    }
    if (!out.ok()) {
      ADD_FAILURE() << label << ": " << out.status();
      continue;
    }
    const std::string expected = c["output"].get<std::string>();
    if (*out == expected) {
      ++passed;
    } else {
      ADD_FAILURE() << label << ": " << Describe(expected, *out);
    }
  }
  std::cout << GetParam() << ": " << passed << "/" << fixture["cases"].size() << " cases match\n";
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, FixtureTest, ::testing::ValuesIn(TemplateNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FixtureTest);

TEST(ChatTemplateFixtures, FolderIsPresent) {
  if (TemplatesDir().empty()) GTEST_SKIP() << "fixtures not found (set COLIBRI_FIXTURES_DIR)";
  EXPECT_EQ(TemplateNames().size(), 33u);
}

}  // namespace
}  // namespace colibri::chat_template
