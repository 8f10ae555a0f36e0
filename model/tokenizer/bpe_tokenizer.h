// Byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's
// llm_tokenizer_bpe_session: pre-tokenize into words, map each byte to its GPT-2
// code point, then repeatedly merge the adjacent pair of lowest merge rank
// (leftmost first on ties). A final symbol that is not a token falls back to the
// tokens of its single bytes where those exist.
//
// Merges are looked up by (left, right) piece ids rather than strings: every
// string occurring in a merge gets an id once, at construction.
//
// Thread-safety: immutable after Create; Encode may run concurrently.
#ifndef COLIBRI_MODEL_TOKENIZER_BPE_TOKENIZER_H_
#define COLIBRI_MODEL_TOKENIZER_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace colibri::tokenizer {

class BpeTokenizer {
 public:
  // `vocab` (a BPE vocabulary) must outlive the tokenizer. InvalidArgument if its
  // pre-tokenizer regexes do not compile.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(const Vocab& vocab);

  // Appends the tokens of `text`, a piece of raw text without special tokens.
  absl::Status Encode(absl::string_view text, std::vector<int32_t>* out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // piece id of left + right
  };
  struct Scratch;

  explicit BpeTokenizer(const Vocab& vocab) : vocab_(vocab) {}
  // Tokens of one word, given as its UTF-8 bytes.
  void EncodeWord(absl::string_view word, Scratch& scratch, std::vector<int32_t>* out) const;
  // The tokens of the bytes of a symbol that is not itself a token.
  void AppendByteFallback(absl::string_view bytes, std::vector<int32_t>* out) const;
  const Merge* FindMerge(int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return nullptr;
    auto it = merges_.find((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  const Vocab& vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_ = false;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left piece << 32 | right piece) -> merge
  std::vector<int32_t> piece_token_;             // [n_pieces] token spelled as the piece, or -1
  std::array<int32_t, 256> byte_piece_{};        // piece of each byte's code point, or -1
  std::array<int32_t, 256> byte_token_{};        // token of each byte's code point, or -1
  std::array<int32_t, 256> raw_byte_token_{};    // token spelled as the raw byte, or -1
  std::array<std::string, 256> byte_image_;      // UTF-8 of each byte's code point
};

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_BPE_TOKENIZER_H_
