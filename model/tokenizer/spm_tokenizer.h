// SentencePiece BPE (tokenizer.ggml.model = "llama"), as llama.cpp's
// llm_tokenizer_spm_session: start from the UTF-8 characters of the text,
// repeatedly merge the adjacent pair whose concatenation is the vocabulary token
// of highest score (leftmost first on ties), then emit each final symbol as its
// token or, when it is none, as byte tokens (<0xXX>).
//
// The caller does the SentencePiece normalization: the leading space and the
// replacement of ' ' by U+2581 (see Tokenizer::Encode).
//
// Merges never cross a point no vocabulary token straddles, so the text is cut
// into independent segments before each U+2581 whose preceding symbol never
// precedes U+2581 inside a token (for Llama/Mistral vocabularies: any symbol but
// U+2581 itself). Each distinct segment is merged once per call. The result is
// the same as merging the whole text at once, as llama.cpp does.
//
// Thread-safety: immutable after construction; Encode may run concurrently.
#ifndef COLIBRI_MODEL_TOKENIZER_SPM_TOKENIZER_H_
#define COLIBRI_MODEL_TOKENIZER_SPM_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/vocab.h"

namespace colibri::tokenizer {

class SpmTokenizer {
 public:
  // `vocab` (an SPM vocabulary) must outlive the tokenizer.
  explicit SpmTokenizer(const Vocab& vocab);

  // Appends the tokens of the normalized `text`.
  void Encode(absl::string_view text, std::vector<int32_t>* out) const;

  // The token of a raw byte: "<0xXX>", else the one-byte token; -1 if neither.
  int32_t ByteToken(uint8_t byte) const { return byte_tokens_[byte]; }

 private:
  struct Scratch;
  // llama.cpp's merge loop over one segment.
  void EncodeSegment(absl::string_view text, Scratch& scratch, std::vector<int32_t>* out) const;

  const Vocab& vocab_;
  std::array<int32_t, 256> byte_tokens_{};
  // Byte strings (1 to 4 bytes) found right before a U+2581 inside some token.
  absl::flat_hash_set<std::string> precedes_space_;
};

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_SPM_TOKENIZER_H_
