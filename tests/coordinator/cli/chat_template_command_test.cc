// `colibri-coordinator chat-template` prints a fixture template's rendering
// exactly and exits 0, or prints the template's error and exits 1.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using Json = nlohmann::ordered_json;

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/chat-template-" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The fixture case of `conversation` with add_generation_prompt = `agp`.
const Json* FindCase(const Json& fixture, int conversation, bool agp) {
  for (const Json& c : fixture["cases"]) {
    if (c["conversation"] == conversation && c["add_generation_prompt"] == agp) return &c;
  }
  return nullptr;
}

TEST(ChatTemplateCommandTest, PrintsTheRenderingExactly) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  const std::string dir = testing::FixturesDir() + "/chat_templates";
  const Json conversations = ReadJson(dir + "/conversations.json");
  const Json fixture = ReadJson(dir + "/Qwen-Qwen3-0.6B.json");
  const std::string tmpl = WriteTemp("qwen3.jinja", fixture["template"].get<std::string>());
  for (int conversation : {3, 5}) {
    const std::string conv = WriteTemp("conv" + std::to_string(conversation) + ".json",
                                       conversations[conversation].dump());
    const Json* expected = FindCase(fixture, conversation, true);
    ASSERT_NE(expected, nullptr);
    testing::CommandResult r = testing::RunCommand(
        {Coordinator(), "chat-template", "--template-file", tmpl, "--conversation-file", conv,
         "--add-generation-prompt", "--bos-token", fixture["bos_token"].get<std::string>(),
         "--eos-token", fixture["eos_token"].get<std::string>()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, (*expected)["output"].get<std::string>()) << "conversation " << conversation;
  }
}

TEST(ChatTemplateCommandTest, TemplateErrorsGoToStderrWithExitCode1) {
  const std::string tmpl =
      WriteTemp("raise.jinja",
                "{% if messages[0].role != 'system' %}"
                "{{ raise_exception('first message must be system') }}{% endif %}");
  const std::string conv =
      WriteTemp("user.json", R"({"messages": [{"role": "user", "content": "hi"}]})");
  testing::CommandResult r = testing::RunCommand(
      {Coordinator(), "chat-template", "--template-file", tmpl, "--conversation-file", conv});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("first message must be system"), std::string::npos) << r.err;

  const std::string bad = WriteTemp("bad.jinja", "{% for %}");
  r = testing::RunCommand(
      {Coordinator(), "chat-template", "--template-file", bad, "--conversation-file", conv});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("line 1"), std::string::npos) << r.err;

  const std::string not_json = WriteTemp("notjson.json", "{messages");
  r = testing::RunCommand(
      {Coordinator(), "chat-template", "--template-file", tmpl, "--conversation-file", not_json});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a JSON object"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace colibri
