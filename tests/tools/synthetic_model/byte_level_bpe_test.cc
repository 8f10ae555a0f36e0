#include "tools/synthetic_model/byte_level_bpe.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "tools/synthetic_model/training_corpus.h"
#include "tests/support/paths.h"

namespace colibri::synthetic {
namespace {

using ::testing::ElementsAre;

TEST(ByteToUnicodeTest, MatchesGpt2Mapping) {
  EXPECT_EQ(ByteToUnicode('!'), "!");
  EXPECT_EQ(ByteToUnicode('a'), "a");
  EXPECT_EQ(ByteToUnicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(ByteToUnicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(ByteToUnicode(0), "\xC4\x80");     // U+0100
  EXPECT_EQ(ByteToUnicode(127), "\xC4\xA1");   // U+0121
  EXPECT_EQ(ByteToUnicode(173), "\xC5\x83");   // U+0143, the last remapped byte
  EXPECT_EQ(ByteToUnicode(161), "\xC2\xA1");   // maps to itself
  EXPECT_EQ(ByteToUnicode(255), "\xC3\xBF");
}

TEST(ByteToUnicodeTest, ByteOrderIsGpt2s) {
  const std::array<uint8_t, 256>& order = Gpt2ByteOrder();
  EXPECT_EQ(order[0], 33);
  EXPECT_EQ(order[93], 126);
  EXPECT_EQ(order[94], 161);
  EXPECT_EQ(order[105], 172);
  EXPECT_EQ(order[106], 174);
  EXPECT_EQ(order[187], 255);
  EXPECT_EQ(order[188], 0);
  EXPECT_EQ(order[220], 32);
  EXPECT_EQ(order[255], 173);
  std::set<int> distinct(order.begin(), order.end());
  EXPECT_EQ(distinct.size(), 256u);
}

// The 256 byte tokens must be exactly the first 256 tokens of the real GPT-2
// vocabulary (from llama.cpp's test vocabularies).
TEST(ByteToUnicodeTest, MatchesRealGpt2VocabularyFixture) {
  const std::string fixtures = colibri::testing::FixturesDir();
  if (fixtures.empty()) GTEST_SKIP() << "no fixtures folder";
  const std::string path = fixtures + "/vocab/ggml-vocab-gpt-2.gguf";
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<const std::vector<std::string>*> tokens =
      (*file)->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_GE((*tokens)->size(), 256u);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ((**tokens)[static_cast<size_t>(i)],
              ByteToUnicode(Gpt2ByteOrder()[static_cast<size_t>(i)]))
        << "token " << i;
  }
}

TEST(PreTokenizeTest, SplitsLikeGpt2) {
  EXPECT_THAT(PreTokenize("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(PreTokenize("don't we'll"), ElementsAre("don", "'t", " we", "'ll"));
  EXPECT_THAT(PreTokenize("a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(PreTokenize("x\n\ny"), ElementsAre("x", "\n", "\n", "y"));
  EXPECT_THAT(PreTokenize("in 2019, 12,480 loaves?!"),
              ElementsAre("in", " 2019", ",", " 12", ",", "480", " loaves", "?!"));
  EXPECT_THAT(PreTokenize("abc123def"), ElementsAre("abc", "123", "def"));
  EXPECT_THAT(PreTokenize("end  "), ElementsAre("end", "  "));
  EXPECT_THAT(PreTokenize("caf\xC3\xA9 ok"), ElementsAre("caf\xC3\xA9", " ok"));
}

TEST(PreTokenizeTest, IsLossless) {
  const std::string& text = TrainingCorpus();
  EXPECT_EQ(absl::StrJoin(PreTokenize(text), ""), text);
}

TEST(TrainByteLevelBpeTest, MergesMostFrequentPairFirstAndBreaksTiesByLowerId) {
  // Pre-tokens: "ab", " ab" twice, " cd". (a,b) occurs 3 times, then (Ġ,ab) twice;
  // (c,d) and (Ġ,c) tie at 1 and 'c' (id 66) has a lower id than 'Ġ' (id 220).
  absl::StatusOr<BpeVocabulary> vocab = TrainByteLevelBpe("ab ab ab cd", 1000);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_THAT(vocab->merges, ElementsAre("a b", "\xC4\xA0 ab", "c d", "\xC4\xA0 cd"));
  ASSERT_EQ(vocab->tokens.size(), 256u + 4 + 1);
  EXPECT_EQ(vocab->tokens[256], "ab");
  EXPECT_EQ(vocab->tokens[257],
            "\xC4\xA0"
            "ab");
  EXPECT_EQ(vocab->tokens.back(), "<|endoftext|>");
  EXPECT_EQ(vocab->end_of_text_id, 260);
}

TEST(TrainByteLevelBpeTest, ReachesTargetSizeOnBuiltInText) {
  absl::StatusOr<BpeVocabulary> vocab = TrainByteLevelBpe(TrainingCorpus(), 4096);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->tokens.size(), 4096u);
  EXPECT_EQ(vocab->token_types.size(), 4096u);
  EXPECT_EQ(vocab->end_of_text_id, 4095);
  EXPECT_EQ(vocab->token_types[4095], BpeVocabulary::kTypeControl);
  for (int i = 0; i < 4095; ++i) ASSERT_EQ(vocab->token_types[static_cast<size_t>(i)], 1);
  EXPECT_EQ(vocab->merges[0], "\xC4\xA0 t");  // " t", as for real English BPEs
}

TEST(TrainByteLevelBpeTest, MergesAreConsistentAndTokensUnique) {
  absl::StatusOr<BpeVocabulary> vocab = TrainByteLevelBpe(TrainingCorpus(), 4096);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::flat_hash_set<std::string> tokens(vocab->tokens.begin(), vocab->tokens.end());
  EXPECT_EQ(tokens.size(), vocab->tokens.size());
  for (const std::string& merge : vocab->merges) {
    const size_t space = merge.find(' ');
    ASSERT_NE(space, std::string::npos) << merge;
    ASSERT_EQ(merge.find(' ', space + 1), std::string::npos) << merge;
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    EXPECT_TRUE(tokens.contains(left)) << merge;
    EXPECT_TRUE(tokens.contains(right)) << merge;
    EXPECT_TRUE(tokens.contains(left + right)) << merge;
  }
}

TEST(TrainByteLevelBpeTest, IsDeterministic) {
  absl::StatusOr<BpeVocabulary> a = TrainByteLevelBpe(TrainingCorpus(), 1500);
  absl::StatusOr<BpeVocabulary> b = TrainByteLevelBpe(TrainingCorpus(), 1500);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->merges, b->merges);
}

TEST(TrainByteLevelBpeTest, StopsWhenTextRunsOut) {
  absl::StatusOr<BpeVocabulary> vocab = TrainByteLevelBpe("aaaa", 1000);
  ASSERT_TRUE(vocab.ok());
  EXPECT_THAT(vocab->merges, ElementsAre("a a", "aa aa"));
  EXPECT_EQ(vocab->tokens.size(), 256u + 2 + 1);
}

TEST(TrainByteLevelBpeTest, RejectsTooSmallVocabulary) {
  EXPECT_EQ(TrainByteLevelBpe("text", 256).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(TrainByteLevelBpe("text", 257).ok());
}

}  // namespace
}  // namespace colibri::synthetic
