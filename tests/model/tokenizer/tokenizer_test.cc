// Behaviour of the tokenizer API: load errors, special tokens, BOS/EOS, the
// end-of-generation set, streaming detokenization. Synthetic vocabularies go
// through a GGUF image written in memory; the rest uses the fixture vocabularies
// (skipped when the fixtures folder is absent).
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode_util.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_value.h"
#include "model/gguf/gguf_writer.h"
#include "tests/support/paths.h"

namespace colibri::tokenizer {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A tokenizer from a GGUF image holding `metadata` only.
absl::StatusOr<std::unique_ptr<Tokenizer>> FromMetadata(
    const std::vector<std::pair<std::string, gguf::Value>>& metadata) {
  gguf::GgufWriter writer;
  for (const auto& [key, value] : metadata) writer.SetValue(key, value);
  const std::vector<uint8_t> bytes = writer.Serialize();
  auto file = gguf::GgufFile::FromBytes(bytes, "synthetic.gguf");
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

// Byte-level BPE over "a", "b", "c" with the merges "a b" and "ab c".
std::vector<std::pair<std::string, gguf::Value>> TinyBpe(const std::string& pre) {
  return {
      {"tokenizer.ggml.model", gguf::Value::String("gpt2")},
      {"tokenizer.ggml.pre", gguf::Value::String(pre)},
      {"tokenizer.ggml.tokens",
       gguf::Value::StringArray({"a", "b", "c", "ab", "abc", "\xC4\xA0", "<|end|>"})},
      {"tokenizer.ggml.token_type", gguf::Value::Int32Array({1, 1, 1, 1, 1, 1, 3})},
      {"tokenizer.ggml.merges", gguf::Value::StringArray({"a b", "ab c"})},
      {"tokenizer.ggml.eos_token_id", gguf::Value::Uint32(6)},
  };
}

TEST(TokenizerTest, UnknownPreTokenizerIsAnErrorNamingIt) {
  auto tokenizer = FromMetadata(TinyBpe("no-such-pretokenizer"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("'no-such-pretokenizer'"));
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("synthetic.gguf"));
}

TEST(TokenizerTest, UnknownTokenizerModelIsAnErrorNamingIt) {
  auto metadata = TinyBpe("gpt-2");
  metadata[0].second = gguf::Value::String("wordpiece-9000");
  auto tokenizer = FromMetadata(metadata);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("'wordpiece-9000'"));
}

TEST(TokenizerTest, BpeWithoutMergesIsDataLoss) {
  auto metadata = TinyBpe("gpt-2");
  metadata.erase(metadata.begin() + 4);
  auto tokenizer = FromMetadata(metadata);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kDataLoss);
}

TEST(TokenizerTest, SyntheticBpeAppliesMergesByRank) {
  auto tokenizer = FromMetadata(TinyBpe("gpt-2"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& t = **tokenizer;
  auto ids = t.Encode("abc ab", EncodeOptions());
  ASSERT_TRUE(ids.ok()) << ids.status();
  // "abc" merges fully; " ab" is a word of its own: "Ġ" has no merge with "a".
  EXPECT_THAT(*ids, ElementsAre(4, 5, 3));
  EXPECT_EQ(t.Decode(*ids, false), "abc ab");
  EXPECT_EQ(t.eos_id(), 6);
  EXPECT_TRUE(t.IsEndOfGeneration(6));
  EXPECT_FALSE(t.IsEndOfGeneration(4));
}

// --- Fixture vocabularies -------------------------------------------------

// NotFound when the fixture is absent (the caller skips).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadVocab(const std::string& name) {
  const std::string fixtures = colibri::testing::FixturesDir();
  if (fixtures.empty()) return absl::NotFoundError("fixtures folder not found");
  auto file = gguf::GgufFile::Open(fixtures + "/vocab/ggml-vocab-" + name + ".gguf");
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

#define COLIBRI_LOAD_VOCAB_OR_SKIP(var, name)                                 \
  auto var##_or = LoadVocab(name);                                            \
  if (absl::IsNotFound(var##_or.status())) GTEST_SKIP() << var##_or.status(); \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status();                            \
  const Tokenizer& var = **var##_or

std::vector<int32_t> Encode(const Tokenizer& t, const std::string& text, bool add_special,
                            bool parse_special) {
  EncodeOptions options;
  options.add_special = add_special;
  options.parse_special = parse_special;
  auto ids = t.Encode(text, options);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>();
}

TEST(TokenizerFixtureTest, StreamDecoderHoldsBackSplitCharacter) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(spm, "llama-spm");
  // U+1F999 is not in the vocabulary: four byte tokens after the "▁" token.
  const std::string llama = "\xF0\x9F\xA6\x99";
  const std::vector<int32_t> ids = Encode(spm, llama, false, false);
  ASSERT_THAT(ids, ElementsAre(29871, 243, 162, 169, 156));
  StreamDecoder stream(spm);
  EXPECT_EQ(stream.Push(ids[0]), " ");
  EXPECT_EQ(stream.Push(ids[1]), "");
  EXPECT_EQ(stream.Push(ids[2]), "");
  EXPECT_EQ(stream.Push(ids[3]), "");
  EXPECT_EQ(stream.Push(ids[4]), llama);
  EXPECT_EQ(stream.Flush(), "");
}

TEST(TokenizerFixtureTest, StreamDecoderFlushesAnUnfinishedCharacter) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(spm, "llama-spm");
  StreamDecoder stream(spm);
  EXPECT_EQ(stream.Push(243), "");  // <0xF0>
  EXPECT_EQ(stream.Push(162), "");  // <0x9F>
  EXPECT_EQ(stream.Push(29874),
            "\xF0\x9F"
            "a");  // "a" ends the character: passed through
  EXPECT_EQ(stream.Push(243), "");
  EXPECT_EQ(stream.Flush(), "\xF0");
}

TEST(TokenizerFixtureTest, StreamDecoderConcatenatesToTheText) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(qwen3, "qwen3");
  const std::string text = "Grüße 🦙🦙 自然言語処理 \xE2\x9C\x85 done";
  StreamDecoder stream(qwen3);
  std::string streamed;
  for (int32_t id : Encode(qwen3, text, false, false)) {
    const std::string chunk = stream.Push(id);
    // Every chunk ends on a character boundary.
    if (!chunk.empty()) {
      const uint8_t last = static_cast<uint8_t>(chunk.back());
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << "chunk ends in a lead byte";
    }
    streamed += chunk;
  }
  streamed += stream.Flush();
  EXPECT_EQ(streamed, text);
}

TEST(TokenizerFixtureTest, SpecialTokensRenderedOnlyWhenAsked) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(qwen3, "qwen3");
  constexpr int32_t kImEnd = 151645;
  EXPECT_TRUE(qwen3.IsControl(kImEnd));
  EXPECT_EQ(qwen3.TokenToPiece(kImEnd, /*render_special=*/false), "");
  EXPECT_EQ(qwen3.TokenToPiece(kImEnd, /*render_special=*/true), "<|im_end|>");
  std::vector<int32_t> ids = Encode(qwen3, "Hello", false, false);
  ids.push_back(kImEnd);
  EXPECT_EQ(qwen3.Decode(ids, false), "Hello");
  EXPECT_EQ(qwen3.Decode(ids, true), "Hello<|im_end|>");
  StreamDecoder plain(qwen3);
  EXPECT_EQ(plain.Push(kImEnd), "");
  StreamDecoder rendered(qwen3, /*render_special=*/true);
  EXPECT_EQ(rendered.Push(kImEnd), "<|im_end|>");
}

TEST(TokenizerFixtureTest, ParseSpecialOnAndOff) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(qwen3, "qwen3");
  const std::string chat = "<|im_start|>user\nHi<|im_end|>";
  const std::vector<int32_t> parsed = Encode(qwen3, chat, false, true);
  ASSERT_FALSE(parsed.empty());
  EXPECT_EQ(parsed.front(), 151644);
  EXPECT_EQ(parsed.back(), 151645);
  EXPECT_EQ(parsed, (std::vector<int32_t>{151644, 872, 198, 13048, 151645}));
  const std::vector<int32_t> literal = Encode(qwen3, chat, false, false);
  EXPECT_THAT(literal, Not(Contains(151644)));
  EXPECT_THAT(literal, Not(Contains(151645)));
  EXPECT_EQ(qwen3.Decode(literal, false), chat);
}

// As in llama.cpp (and Hugging Face's added tokens), user-defined tokens are
// matched in the text even with parse_special off; control tokens are not.
TEST(TokenizerFixtureTest, UserDefinedTokensMatchWithoutParseSpecial) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(qwen3, "qwen3");
  const std::vector<int32_t> ids = Encode(qwen3, "<think>x</think>", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{151667, 87, 151668}));
  EXPECT_EQ(qwen3.Decode(ids, false), "<think>x</think>");
}

TEST(TokenizerFixtureTest, AddSpecialAddsBosWhereTheVocabularyAsks) {
  struct Expectation {
    const char* vocab;
    int32_t bos;  // -1: no BOS added
  };
  for (const Expectation& e :
       {Expectation{"llama-spm", 1}, Expectation{"deepseek-llm", 100000},
        Expectation{"deepseek-coder", 32013}, Expectation{"qwen3", -1}, Expectation{"gpt-2", -1}}) {
    auto tokenizer = LoadVocab(e.vocab);
    if (absl::IsNotFound(tokenizer.status())) GTEST_SKIP() << tokenizer.status();
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    const Tokenizer& t = **tokenizer;
    const std::vector<int32_t> plain = Encode(t, "Hello world", false, false);
    const std::vector<int32_t> with = Encode(t, "Hello world", true, false);
    EXPECT_EQ(t.add_bos(), e.bos >= 0) << e.vocab;
    EXPECT_FALSE(t.add_eos()) << e.vocab;
    if (e.bos >= 0) {
      EXPECT_EQ(t.bos_id(), e.bos) << e.vocab;
      ASSERT_EQ(with.size(), plain.size() + 1) << e.vocab;
      EXPECT_EQ(with.front(), e.bos) << e.vocab;
    } else {
      EXPECT_EQ(with, plain) << e.vocab;
    }
  }
}

TEST(TokenizerFixtureTest, EmptyText) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(spm, "llama-spm");
  EXPECT_TRUE(Encode(spm, "", false, false).empty());
  EXPECT_THAT(Encode(spm, "", true, false), ElementsAre(1));
}

TEST(TokenizerFixtureTest, SentencePieceLeadingSpace) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(spm, "llama-spm");
  const std::vector<int32_t> ids = Encode(spm, "Hello world", true, false);
  EXPECT_THAT(ids, ElementsAre(1, 15043, 3186));
  EXPECT_EQ(spm.TokenToPiece(15043, false), " Hello");
  // Decode drops the prefix space as llama_detokenize does; after an unrendered
  // BOS the space stays, as there.
  EXPECT_EQ(spm.Decode({15043, 3186}, false), "Hello world");
  EXPECT_EQ(spm.Decode(ids, false), " Hello world");
  EXPECT_EQ(spm.Decode(ids, true), "<s> Hello world");
}

// llama.cpp gives Phi-3's special tokens RSTRIP: the whitespace after them goes.
TEST(TokenizerFixtureTest, Phi3SpecialTokensSwallowTheFollowingWhitespace) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(phi3, "phi-3");
  EXPECT_EQ(Encode(phi3, "<|user|>\n Hello", false, true), (std::vector<int32_t>{32010, 15043}));
  // With parse_special off the text is plain text.
  EXPECT_THAT(Encode(phi3, "<|user|>", false, false), Not(Contains(32010)));
}

TEST(TokenizerFixtureTest, EndOfGenerationSet) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(qwen3, "qwen3");
  EXPECT_TRUE(qwen3.IsEndOfGeneration(151645));   // <|im_end|>, the EOS
  EXPECT_TRUE(qwen3.IsEndOfGeneration(151643));   // <|endoftext|>
  EXPECT_TRUE(qwen3.IsEndOfGeneration(151662));   // <|fim_pad|>
  EXPECT_FALSE(qwen3.IsEndOfGeneration(151644));  // <|im_start|>
  EXPECT_FALSE(qwen3.IsEndOfGeneration(9707));    // "Hello"
  COLIBRI_LOAD_VOCAB_OR_SKIP(spm, "llama-spm");
  EXPECT_TRUE(spm.IsEndOfGeneration(2));
  EXPECT_FALSE(spm.IsEndOfGeneration(1));
}

// Tokens llama.cpp recognises by their text become control tokens: DeepSeek's
// user-defined FIM tokens are then no longer matched with parse_special off.
TEST(TokenizerFixtureTest, FimTokensFoundByTextBecomeControl) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(coder, "deepseek-coder");
  EXPECT_TRUE(coder.IsEndOfGeneration(32014));  // <｜end▁of▁sentence｜>
  const int32_t fim_begin = 32016;              // <｜fim▁begin｜>
  EXPECT_TRUE(coder.IsControl(fim_begin));
  const std::string text = coder.TokenText(fim_begin);
  EXPECT_THAT(Encode(coder, text, false, false), Not(Contains(fim_begin)));
  EXPECT_THAT(Encode(coder, text, false, true), ElementsAre(fim_begin));
  // Still user-defined: matched either way.
  EXPECT_THAT(Encode(coder, "<|User|>", false, false), ElementsAre(32019));
}

TEST(TokenizerFixtureTest, InvalidUtf8BecomesReplacementCharacter) {
  COLIBRI_LOAD_VOCAB_OR_SKIP(gpt2, "gpt-2");
  // llama.cpp decodes a malformed byte as U+FFFD before the byte-level mapping.
  EXPECT_EQ(Encode(gpt2,
                   "a\xFF"
                   "b",
                   false, false),
            Encode(gpt2,
                   "a\xEF\xBF\xBD"
                   "b",
                   false, false));
  EXPECT_EQ(gpt2.TokenToPiece(262, false), " the");
}

TEST(Utf8Test, ToValidUtf8KeepsValidTextAndReplacesEveryBadByte) {
  const std::string valid = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF";
  EXPECT_EQ(ToValidUtf8(valid), valid);
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(ToValidUtf8("\x80"), r);                      // lone continuation byte
  EXPECT_EQ(ToValidUtf8("x\xC3"), "x" + r);               // truncated sequence
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), r + r);              // overlong '/'
  EXPECT_EQ(ToValidUtf8("\xE0\x80\xAF"), r + r + r);      // overlong 3-byte
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), r + r + r);      // surrogate U+D800
  EXPECT_EQ(ToValidUtf8("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(ToValidUtf8("\xFF\xFEok"), r + r + "ok");
  EXPECT_EQ(ToValidUtf8(""), "");
}

}  // namespace
}  // namespace colibri::tokenizer
