// The tokenizer through the command line: `run --prompt-file` and `tokenize`
// give the fixtures' prompt_tokens (llama.cpp's ids, BOS where the vocab asks).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

std::string Coordinator() { return testing::BinaryPath("coordinator/colibri-coordinator"); }

std::string PromptText(const std::string& model, const std::string& prompt) {
  std::ifstream in(testing::FixturesDir() + "/golden/" + model + "." + prompt + ".json");
  return nlohmann::json::parse(in).at("prompt").get<std::string>();
}

std::string Join(const std::vector<int32_t>& ids, const char* sep) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? sep : "") + std::to_string(ids[i]);
  return s;
}

TEST(TokenizeCommandTest, PromptFileReproducesGoldenPromptTokens) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  for (const std::string& model : testing::GoldenModels()) {
    for (const std::string& prompt : testing::GoldenPrompts()) {
      testing::GoldenCase c;
      std::string error;
      ASSERT_TRUE(testing::LoadGoldenCase(model, prompt, &c, &error)) << error;
      const std::string text_file = ::testing::TempDir() + "/prompt-" + model + "-" + prompt;
      std::ofstream(text_file, std::ios::binary) << PromptText(model, prompt);

      testing::CommandResult tok = testing::RunCommand(
          {Coordinator(), "tokenize", "--model", c.model_path, "--text-file", text_file,
           "--add-special"});
      ASSERT_EQ(tok.exit_code, 0) << tok.err;
      EXPECT_EQ(tok.out, Join(c.prompt_tokens, " ") + "\n") << model << " " << prompt;

      // run --prompt-file evaluates exactly those ids: its logits equal the
      // run fed with --prompt-tokens bit for bit.
      const std::string a = text_file + ".text.f32", b = text_file + ".ids.f32";
      testing::CommandResult by_text = testing::RunCommand(
          {Coordinator(), "run", "--model", c.model_path, "--prompt-file", text_file,
           "--n-predict", "0", "--all-logits", "--logits-out", a});
      ASSERT_EQ(by_text.exit_code, 0) << by_text.err;
      testing::CommandResult by_ids = testing::RunCommand(
          {Coordinator(), "run", "--model", c.model_path, "--prompt-tokens",
           Join(c.prompt_tokens, ","), "--n-predict", "0", "--all-logits", "--logits-out", b});
      ASSERT_EQ(by_ids.exit_code, 0) << by_ids.err;
      std::vector<testing::Row> rows_a, rows_b;
      ASSERT_TRUE(testing::ReadRows(a, c.n_vocab, &rows_a, &error)) << error;
      ASSERT_TRUE(testing::ReadRows(b, c.n_vocab, &rows_b, &error)) << error;
      EXPECT_EQ(rows_a.size(), c.prompt_tokens.size()) << model << " " << prompt;
      EXPECT_TRUE(rows_a == rows_b) << model << " " << prompt;
      std::remove(a.c_str());
      std::remove(b.c_str());
      std::remove(text_file.c_str());
    }
  }
}

TEST(TokenizeCommandTest, SeparatorPrintsOneLinePerPieceAndDetokenizeInverts) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found";
  const std::string vocab = testing::FixturesDir() + "/vocab/ggml-vocab-gpt-2.gguf";
  testing::CommandResult r = testing::RunCommand(
      {Coordinator(), "tokenize", "--model", vocab, "--text", "Hello world||| again", "--separator",
       "|"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Pieces: "Hello world", "", "", " again".
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < r.out.size(); ++i) {
    if (r.out[i] == '\n') {
      lines.push_back(r.out.substr(start, i - start));
      start = i + 1;
    }
  }
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_FALSE(lines[0].empty());
  EXPECT_TRUE(lines[1].empty());
  EXPECT_TRUE(lines[2].empty());
  std::string ids = lines[0];
  for (char& ch : ids) {
    if (ch == ' ') ch = ',';
  }
  testing::CommandResult d =
      testing::RunCommand({Coordinator(), "detokenize", "--model", vocab, "--ids", ids});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out, "Hello world");
  testing::CommandResult bad =
      testing::RunCommand({Coordinator(), "detokenize", "--model", vocab, "--ids", "99999999"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("outside the vocabulary"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace colibri
