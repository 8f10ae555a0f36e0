// The pre-tokenizer machinery: the hand-written GPT-2 and Llama-3 splitters
// must cut exactly where the regexes they stand for (run through PCRE2 on the
// collapsed text) do, and every pre-tokenizer llama.cpp knows must compile and
// run. Texts: edge cases plus the shared corpus when the fixtures are present.
#include "model/tokenizer/pre_tokenizer.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/unicode_util.h"
#include "tests/support/paths.h"

namespace colibri::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kGpt2[] =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr char kLlama3[] =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

std::vector<std::string> Texts() {
  std::vector<std::string> texts = {
      "",
      " ",
      "  ",
      "   a",
      "\n",
      "\n\n  \n",
      "a  \t b",
      "a \n b",
      "I'm you're WE'D 'S",
      "'x '",
      "123456789 12 1",
      "x\xC2\xB2\xC2\xB3 \xE2\x85\xA7",
      "\xF0\x9F\xA6\x99\xF0\x9F\xA6\x99 ok",
      "\r\n\r\nx",
      "a\xC2\xA0"
      "b  \xE3\x80\x80x",
      "    def f(x):\n        return x\n",
      "caf\xC3\xA9 na\xC3\xAFve \xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\x82\xE0\xA4\xA6\xE0\xA5\x80",
      "\xE8\x87\xAA\xE7\x84\xB6\xE8\xA8\x80\xE8\xAA\x9E",
      "tab\tand\x0b"
      "vt\x1f"
      "us",
      "end  ",
      "a\xFF"
      "b\xC3",
      "!!!  ??? ...\n\n"};
  const std::string fixtures = colibri::testing::FixturesDir();
  if (!fixtures.empty()) {
    std::ifstream in(fixtures + "/vocab/corpus.inp", std::ios::binary);
    std::ostringstream raw;
    raw << in.rdbuf();
    const std::string corpus = raw.str();
    const std::string separator = "\n__ggml_vocab_test__\n";
    for (size_t pos = 0; pos < corpus.size();) {
      const size_t next = corpus.find(separator, pos);
      if (next == std::string::npos) break;
      texts.push_back(corpus.substr(pos, next - pos));
      pos = next + separator.size();
    }
  }
  return texts;
}

std::vector<uint32_t> Split(const PreTokenizer& pre, const std::string& text) {
  std::vector<uint32_t> cps;
  DecodeUtf8(text, &cps);
  std::vector<uint32_t> lengths;
  const absl::Status status = pre.Split(cps, &lengths);
  EXPECT_TRUE(status.ok()) << status;
  return lengths;
}

void ExpectSameSplits(const std::string& regex) {
  auto custom = PreTokenizer::Create({regex});
  // Any other spelling of the regex goes through PCRE2 on the collapsed text.
  auto generic = PreTokenizer::Create({"(?:" + regex + ")"});
  ASSERT_TRUE(custom.ok()) << custom.status();
  ASSERT_TRUE(generic.ok()) << generic.status();
  for (const std::string& text : Texts()) {
    EXPECT_EQ(absl::StrJoin(Split(**custom, text), ","), absl::StrJoin(Split(**generic, text), ","))
        << "\"" << absl::CHexEscape(text) << "\"";
  }
}

TEST(PreTokenizerTest, Gpt2SplitterMatchesItsRegex) { ExpectSameSplits(kGpt2); }

TEST(PreTokenizerTest, Llama3SplitterMatchesItsRegex) { ExpectSameSplits(kLlama3); }

TEST(PreTokenizerTest, Gpt2Words) {
  auto pre = PreTokenizer::Create({kGpt2});
  ASSERT_TRUE(pre.ok()) << pre.status();
  // "Hello" " world" "'s" "  " " 42" "!!" "\n"
  EXPECT_THAT(Split(**pre, "Hello world's   42!!\n"), ElementsAre(5, 6, 2, 2, 3, 2, 1));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsByThree) {
  auto pre = PreTokenizer::Create({kLlama3});
  ASSERT_TRUE(pre.ok()) << pre.status();
  EXPECT_THAT(Split(**pre, "1234567"), ElementsAre(3, 3, 1));
}

TEST(PreTokenizerTest, EveryKnownPreTokenizerCompilesAndRuns) {
  const std::vector<std::string> names = KnownPreTokenizerNames();
  EXPECT_GT(names.size(), 40u);
  const std::vector<std::string> texts = Texts();
  for (const std::string& name : names) {
    auto spec = FindPreTokenizerSpec(name);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    auto pre = PreTokenizer::Create(spec->regexes);
    ASSERT_TRUE(pre.ok()) << name << ": " << pre.status();
    for (const std::string& text : texts) {
      std::vector<uint32_t> cps;
      DecodeUtf8(text, &cps);
      std::vector<uint32_t> lengths;
      ASSERT_TRUE((*pre)->Split(cps, &lengths).ok()) << name;
      size_t total = 0;
      for (uint32_t len : lengths) {
        EXPECT_GT(len, 0u) << name;
        total += len;
      }
      EXPECT_EQ(total, cps.size()) << name << ": \"" << absl::CHexEscape(text) << "\"";
    }
  }
}

TEST(PreTokenizerTest, UnknownNameIsAnError) {
  auto spec = FindPreTokenizerSpec("qwen-17");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("'qwen-17'"));
  EXPECT_TRUE(FindPreTokenizerSpec("").ok());  // absent key: the default
}

TEST(PreTokenizerTest, CategoriesWithNonAsciiAreRejected) {
  auto pre = PreTokenizer::Create({"\\p{L}+|\xC3\xA9"});
  EXPECT_FALSE(pre.ok());
}

}  // namespace
}  // namespace colibri::tokenizer
