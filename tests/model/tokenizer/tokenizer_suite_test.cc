// llama.cpp's tokenizer suites and the shared corpus, for every vocabulary in
// <fixtures>/vocab: every case must give exactly llama.cpp's ids
// (no BOS, special-token parsing off), as test-tokenizer-0 checks them.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/paths.h"

namespace colibri::tokenizer {
namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

// `inp`: strings each followed by "\n__ggml_vocab_test__\n"; line i of `out`:
// the ids of string i.
::testing::AssertionResult ReadCases(const std::string& inp_path, const std::string& out_path,
                                     std::vector<Case>* cases) {
  std::string inp, out;
  if (!ReadFile(inp_path, &inp)) return ::testing::AssertionFailure() << "cannot read " << inp_path;
  if (!ReadFile(out_path, &out)) return ::testing::AssertionFailure() << "cannot read " << out_path;
  const std::string separator = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(separator, pos);
    if (next == std::string::npos) break;
    cases->push_back(Case{inp.substr(pos, next - pos), {}});
    pos = next + separator.size();
  }
  std::vector<std::string> lines = absl::StrSplit(out, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() != cases->size()) {
    return ::testing::AssertionFailure() << inp_path << " has " << cases->size() << " strings but "
                                         << out_path << " has " << lines.size() << " lines";
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    for (absl::string_view field : absl::StrSplit(lines[i], ' ', absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(field, &id)) {
        return ::testing::AssertionFailure() << out_path << ":" << i + 1 << ": bad id " << field;
      }
      (*cases)[i].ids.push_back(id);
    }
  }
  return ::testing::AssertionSuccess();
}

// Encodes every case; fails naming the first mismatch (and how many there are).
void ExpectCases(const Tokenizer& tokenizer, const std::vector<Case>& cases,
                 const std::string& source) {
  int mismatches = 0;
  std::string first;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto ids = tokenizer.Encode(cases[i].text, EncodeOptions());
    ASSERT_TRUE(ids.ok()) << source << " case " << i << ": " << ids.status();
    if (*ids == cases[i].ids) continue;
    if (mismatches++ == 0) {
      first = absl::StrCat("case ", i, ": \"", absl::CHexEscape(cases[i].text),
                           "\"\n  expected: ", absl::StrJoin(cases[i].ids, " "),
                           "\n  got:      ", absl::StrJoin(*ids, " "));
    }
  }
  EXPECT_EQ(mismatches, 0) << source << ": " << mismatches << " of " << cases.size()
                           << " cases differ from llama.cpp; first " << first;
}

class VocabTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string fixtures = colibri::testing::FixturesDir();
    if (fixtures.empty()) {
      GTEST_SKIP() << "fixtures folder not found (set COLIBRI_FIXTURES_DIR); "
                      "the vocabulary suites need it";
    }
    dir_ = fixtures + "/vocab/";
    const std::string path = dir_ + "ggml-vocab-" + GetParam() + ".gguf";
    if (!std::ifstream(path).good()) GTEST_SKIP() << path << " is absent";
    auto file = gguf::GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto tokenizer = Tokenizer::FromGguf(**file);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
  }

  std::string dir_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// The vocabularies llama.cpp has a suite for (all but gpt-neox).
class LlamaCppSuiteTest : public VocabTest {};

TEST_P(LlamaCppSuiteTest, MatchesLlamaCpp) {
  const std::string inp = dir_ + "ggml-vocab-" + GetParam() + ".gguf.inp";
  std::vector<Case> cases;
  ASSERT_TRUE(ReadCases(inp, dir_ + "ggml-vocab-" + GetParam() + ".gguf.out", &cases));
  ASSERT_FALSE(cases.empty());
  ExpectCases(*tokenizer_, cases, inp);
}

class CorpusTest : public VocabTest {};

TEST_P(CorpusTest, MatchesLlamaCpp) {
  std::vector<Case> cases;
  ASSERT_TRUE(ReadCases(dir_ + "corpus.inp", dir_ + "corpus." + GetParam() + ".out", &cases));
  ASSERT_FALSE(cases.empty());
  ExpectCases(*tokenizer_, cases, dir_ + "corpus." + GetParam() + ".out");
}

// Decoding the ids gives the text back (byte-level BPE loses nothing; neither
// does SentencePiece with byte fallback on this corpus).
class RoundTripTest : public VocabTest {};

TEST_P(RoundTripTest, DecodeOfEncodeIsTheText) {
  std::vector<Case> cases;
  ASSERT_TRUE(ReadCases(dir_ + "corpus.inp", dir_ + "corpus." + GetParam() + ".out", &cases));
  for (size_t i = 0; i < cases.size(); ++i) {
    auto ids = tokenizer_->Encode(cases[i].text, EncodeOptions());
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(tokenizer_->Decode(*ids, /*render_special=*/false), cases[i].text)
        << "corpus case " << i << ": \"" << absl::CHexEscape(cases[i].text) << "\"";
  }
}

std::string VocabName(const ::testing::TestParamInfo<std::string>& info) {
  return absl::StrReplaceAll(info.param, {{"-", "_"}});
}

INSTANTIATE_TEST_SUITE_P(Vocabs, LlamaCppSuiteTest,
                         ::testing::Values("qwen3", "gpt-2", "deepseek-llm", "deepseek-coder",
                                           "llama-spm", "phi-3"),
                         VocabName);
INSTANTIATE_TEST_SUITE_P(Vocabs, CorpusTest,
                         ::testing::Values("qwen3", "gpt-2", "gpt-neox", "deepseek-llm",
                                           "deepseek-coder", "llama-spm", "phi-3"),
                         VocabName);
INSTANTIATE_TEST_SUITE_P(Vocabs, RoundTripTest,
                         ::testing::Values("qwen3", "gpt-2", "gpt-neox", "deepseek-llm",
                                           "deepseek-coder", "llama-spm", "phi-3"),
                         VocabName);

}  // namespace
}  // namespace colibri::tokenizer
