// Which chat template serve uses: the GGUF's (the qwen3 vocabulary fixture
// carries one), ChatML with a warning when there is none, or a file; with the
// vocabulary's BOS/EOS texts, and template errors as InvalidArgument.
#include "coordinator/api/chat_prompt.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/paths.h"

namespace colibri::coordinator {
namespace {

using ojson = nlohmann::ordered_json;

class ChatPromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  }
  // Opens a fixture GGUF and its tokenizer.
  void Open(const std::string& relative) {
    absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file =
        gguf::GgufFile::Open(testing::FixturesDir() + "/" + relative);
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(*file);
    absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
        tokenizer::Tokenizer::FromGguf(*file_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
  }

  std::unique_ptr<gguf::GgufFile> file_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

const ojson kMessages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");

TEST_F(ChatPromptTest, TheGgufTemplateIsUsedWhenItHasOne) {
  ASSERT_NO_FATAL_FAILURE(Open("vocab/ggml-vocab-qwen3.gguf"));
  std::ostringstream err;
  absl::StatusOr<ChatRenderer> chat = LoadChatRenderer(*file_, tokenizer_.get(), "", err);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_NE(err.str().find("tokenizer.chat_template"), std::string::npos) << err.str();
  EXPECT_EQ(err.str().find("warning"), std::string::npos) << err.str();
  absl::StatusOr<std::string> prompt = (*chat)(kMessages, nullptr, true);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  // Qwen3's template: ChatML turns, then the assistant's opening.
  EXPECT_NE(prompt->find("<|im_start|>user\nHi<|im_end|>\n"), std::string::npos) << *prompt;
  EXPECT_NE(prompt->rfind("<|im_start|>assistant\n"), std::string::npos) << *prompt;
}

TEST_F(ChatPromptTest, WithoutATemplateChatMlIsUsedWithAWarning) {
  ASSERT_NO_FATAL_FAILURE(Open("models/qwen3moe-tiny-f32.gguf"));
  std::ostringstream err;
  absl::StatusOr<ChatRenderer> chat = LoadChatRenderer(*file_, tokenizer_.get(), "", err);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_NE(err.str().find("warning"), std::string::npos) << err.str();
  absl::StatusOr<std::string> prompt = (*chat)(kMessages, nullptr, false);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, "<|im_start|>user\nHi<|im_end|>\n");
}

TEST_F(ChatPromptTest, AFileOverridesAndSeesBosEosAndTools) {
  ASSERT_NO_FATAL_FAILURE(Open("vocab/ggml-vocab-phi-3.gguf"));
  const std::string path = ::testing::TempDir() + "/chat_prompt_test.jinja";
  std::ofstream(path) << "{{ bos_token }}|{{ eos_token }}|{{ tools is defined }}|"
                         "{{ messages[0].content }}{% if messages|length > 1 %}"
                         "{{ raise_exception('one message only') }}{% endif %}";
  std::ostringstream err;
  absl::StatusOr<ChatRenderer> chat = LoadChatRenderer(*file_, tokenizer_.get(), path, err);
  ASSERT_TRUE(chat.ok()) << chat.status();
  const std::string bos = tokenizer_->TokenText(tokenizer_->bos_id());
  const std::string eos = tokenizer_->TokenText(tokenizer_->eos_id());
  ASSERT_FALSE(bos.empty());
  absl::StatusOr<std::string> prompt = (*chat)(kMessages, nullptr, true);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, bos + "|" + eos + "|False|Hi");
  prompt = (*chat)(kMessages, ojson::parse(R"([{"type": "function"}])"), true);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, bos + "|" + eos + "|True|Hi");

  absl::StatusOr<std::string> raised =
      (*chat)(ojson::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content":
      "b"}])"),
              nullptr, true);
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(raised.status().message().find("one message only"), std::string::npos)
      << raised.status();

  EXPECT_EQ(LoadChatRenderer(*file_, tokenizer_.get(), path + ".missing", err).status().code(),
            absl::StatusCode::kNotFound);
  std::ofstream(path) << "{% if %}";
  EXPECT_EQ(LoadChatRenderer(*file_, tokenizer_.get(), path, err).status().code(),
            absl::StatusCode::kInvalidArgument);
}


// A history with a call (OpenAI's form: arguments as JSON text) and its
// result renders with GLM-4.6's template, which iterates over the arguments,
// and with Qwen2.5's, which encodes them with tojson (both given the
// object), and with Qwen3's, which prints the text as it is.
TEST_F(ChatPromptTest, ToolCallHistoriesRenderWhetherTheTemplateWantsTextOrAnObject) {
  ASSERT_NO_FATAL_FAILURE(Open("vocab/ggml-vocab-qwen3.gguf"));
  const ojson messages = ojson::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"days\":2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "rain"}])");
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "d", "parameters": {"type": "object"}}}])");
  for (const auto& [fixture, expected] :
       {std::pair<std::string, std::string>{"GLM-4.6.json",
                                            "<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>"},
        {"Qwen-Qwen2.5-7B-Instruct.json", "\"arguments\": {\"city\": \"Oslo\", \"days\": 2}}"},
        {"Qwen-Qwen3-0.6B.json", "\"arguments\": {\"city\":\"Oslo\",\"days\":2}}"}}) {
    SCOPED_TRACE(fixture);
    std::ifstream in(testing::FixturesDir() + "/chat_templates/" + fixture);
    const ojson templates = ojson::parse(in, nullptr, false);
    ASSERT_TRUE(templates.is_object());
    const std::string path = ::testing::TempDir() + "/chat_prompt_history.jinja";
    std::ofstream(path) << templates["template"].get<std::string>();
    std::ostringstream err;
    absl::StatusOr<ChatRenderer> chat = LoadChatRenderer(*file_, tokenizer_.get(), path, err);
    ASSERT_TRUE(chat.ok()) << chat.status();
    absl::StatusOr<std::string> prompt = (*chat)(messages, tools, true);
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_NE(prompt->find(expected), std::string::npos) << *prompt;
    EXPECT_NE(prompt->find("rain"), std::string::npos) << *prompt;
  }
}

}  // namespace
}  // namespace colibri::coordinator
