// The one request -> spec function both front ends use: the defaults a
// request leaves out, each limit with the field it names, and the prompt
// forms, on the demo model's tokenizer and chat template.
#include "coordinator/api/generation_request.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/api/chat_prompt.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/demo_model.h"

namespace colibri::coordinator {
namespace {

class GenerationRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = gguf::GgufFile::Open(testing::kDemoModel);
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(*file);
    auto tok = tokenizer::Tokenizer::FromGguf(*file_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    std::ostringstream log;
    auto chat = LoadChatRenderer(*file_, tokenizer_.get(), "", log);
    ASSERT_TRUE(chat.ok()) << chat.status();
    context_.tokenizer = tokenizer_.get();
    context_.chat = *chat;
    context_.limits.n_ctx = 128;
    context_.limits.n_vocab = tokenizer_->n_vocab();
  }

  // The error of `request`, and the field it names in *param.
  absl::Status ErrorOf(const GenerationRequest& request, std::string* param) {
    absl::StatusOr<GenerationSpec> spec = MakeGenerationSpec(request, context_, param);
    EXPECT_FALSE(spec.ok());
    return spec.status();
  }

  static GenerationRequest Text(std::string text) {
    GenerationRequest r;
    r.text = std::move(text);
    return r;
  }

  std::unique_ptr<gguf::GgufFile> file_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  GenerationRequestContext context_;
};

TEST_F(GenerationRequestTest, DefaultsFillWhatTheRequestLeavesOut) {
  const GenerationRequest r = Text("And God said");
  auto a = MakeGenerationSpec(r, context_);
  ASSERT_TRUE(a.ok()) << a.status();
  tokenizer::EncodeOptions enc;
  enc.add_special = true;
  EXPECT_EQ(a->prompt_ids, *tokenizer_->Encode("And God said", enc));
  // max_tokens: the default, capped by what the context holds after the prompt.
  const int n_prompt = static_cast<int>(a->prompt_ids.size());
  EXPECT_EQ(a->generation.max_tokens, std::min(256, 128 - n_prompt));
  context_.defaults.max_tokens = 5;
  EXPECT_EQ(MakeGenerationSpec(r, context_)->generation.max_tokens, 5);
  EXPECT_EQ(a->sampling.penalty_last_n, 64);
  // No seed: the server picks one per request.
  auto b = MakeGenerationSpec(r, context_);
  EXPECT_NE(a->sampling.seed, b->sampling.seed);
  GenerationRequest seeded = r;
  seeded.has_seed = true;
  seeded.sampling.seed = 1234;
  seeded.sampling.penalty_last_n = 8;
  seeded.max_tokens = 7;
  auto c = MakeGenerationSpec(seeded, context_);
  EXPECT_EQ(c->sampling.seed, 1234u);
  EXPECT_EQ(c->sampling.penalty_last_n, 8);
  EXPECT_EQ(c->generation.max_tokens, 7);
}

TEST_F(GenerationRequestTest, PromptFormsBecomeTokenIds) {
  GenerationRequest ids;
  ids.prompt = GenerationRequest::Prompt::kIds;
  ids.ids = {5, 6, 7};
  EXPECT_EQ(MakeGenerationSpec(ids, context_)->prompt_ids, ids.ids);
  GenerationRequest chat;
  chat.prompt = GenerationRequest::Prompt::kChat;
  chat.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hello"}}});
  auto spec = MakeGenerationSpec(chat, context_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->prompt_ids, *EncodeChatPrompt(context_.chat, *tokenizer_, chat.messages,
                                                nullptr));
}

TEST_F(GenerationRequestTest, EachLimitIsRefusedNamingItsField) {
  std::string param;
  context_.limits.max_text_bytes = 16;
  EXPECT_EQ(ErrorOf(Text(std::string(17, 'a')), &param).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(param, "prompt");
  EXPECT_EQ(ErrorOf(Text(""), &param).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(param, "prompt");

  GenerationRequest chat;
  chat.prompt = GenerationRequest::Prompt::kChat;
  chat.messages = nlohmann::ordered_json::array();
  for (int i = 0; i < 3; ++i) chat.messages.push_back({{"role", "user"}, {"content", "hi"}});
  context_.limits.max_messages = 2;
  EXPECT_EQ(ErrorOf(chat, &param).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(param, "messages");
  context_.limits.max_messages = 4096;

  GenerationRequest ids;
  ids.prompt = GenerationRequest::Prompt::kIds;
  ids.ids = {1, context_.limits.n_vocab};
  EXPECT_EQ(ErrorOf(ids, &param).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(param, "prompt");
  ids.ids.assign(129, 1);  // longer than the context
  EXPECT_EQ(ErrorOf(ids, &param).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(param, "prompt");

  GenerationRequest r = Text("And");
  r.max_tokens = -1;
  EXPECT_EQ(ErrorOf(r, &param).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(param, "max_tokens");
  r.max_tokens = context_.limits.max_tokens + 1;
  EXPECT_EQ(ErrorOf(r, &param).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(param, "max_tokens");
  r.max_tokens.reset();
  r.top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_EQ(ErrorOf(r, &param).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(param, "top_logprobs");
  r.top_logprobs = 0;
  r.stop.assign(17, "x");
  EXPECT_EQ(ErrorOf(r, &param).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(param, "stop");
  r.stop.clear();
  r.sampling.temperature = -1;
  EXPECT_EQ(ErrorOf(r, &param).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(param, "sampling");
}

TEST_F(GenerationRequestTest, PromptsTheServerCannotTakeAreRefused) {
  std::string param = "stale";
  GenerationRequest chat;
  chat.prompt = GenerationRequest::Prompt::kChat;
  chat.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hello"}}});
  context_.chat = nullptr;
  EXPECT_EQ(ErrorOf(chat, &param).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(param, "");
  context_.tokenizer = nullptr;
  EXPECT_EQ(ErrorOf(Text("And"), &param).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(param, "prompt");
}

}  // namespace
}  // namespace colibri::coordinator
