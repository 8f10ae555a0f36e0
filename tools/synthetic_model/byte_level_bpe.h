// A small byte-level BPE trainer producing GPT-2-style vocabularies
// (tokenizer.ggml.model "gpt2"): the 256 byte tokens in GPT-2's byte-to-unicode
// form and id order, then one token per learned merge, then <|endoftext|>.
//
// Training is the standard algorithm: pre-tokenize the text roughly as GPT-2's
// regex does (contractions, runs of letters / digits / other symbols with an
// optional leading space, whitespace runs), then repeatedly merge the most
// frequent adjacent pair inside the pre-tokens (ties: lower left id, then lower
// right id). Deterministic: the same text and size give the same vocabulary.
#ifndef COLIBRI_SCRIPTS_SYNTHETIC_MODEL_BYTE_LEVEL_BPE_H_
#define COLIBRI_SCRIPTS_SYNTHETIC_MODEL_BYTE_LEVEL_BPE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri::synthetic {

// GPT-2's byte order: element i is the byte that byte token i stands for
// (33..126, 161..172, 174..255, then the remaining bytes ascending).
const std::array<uint8_t, 256>& Gpt2ByteOrder();

// GPT-2's byte-to-unicode mapping, as UTF-8: bytes 33..126, 161..172 and
// 174..255 map to the code point of the same value; the k-th other byte
// (ascending) maps to U+0100 + k (so ' ' is "Ġ", U+0120).
std::string ByteToUnicode(uint8_t byte);

// Splits text into pre-tokens (raw bytes, not yet mapped). Bytes >= 0x80 count as
// letters so that UTF-8 sequences stay inside words.
std::vector<std::string> PreTokenize(absl::string_view text);

struct BpeVocabulary {
  static constexpr const char* kEndOfText = "<|endoftext|>";
  static constexpr int32_t kTypeNormal = 1;
  static constexpr int32_t kTypeControl = 3;
  static constexpr int32_t kTypeUnused = 5;

  std::vector<std::string> tokens;   // byte-to-unicode form; merged tokens concatenate
  std::vector<int32_t> token_types;  // kTypeNormal, kTypeControl for <|endoftext|>, kTypeUnused
                                     // for padding
  std::vector<std::string> merges;   // "left right", in rank order
  int32_t end_of_text_id = -1;       // the last trained token
};

// Learns merges until the vocabulary (bytes + merged tokens + <|endoftext|>) has
// vocab_size tokens, or fewer when the text runs out of pairs. InvalidArgument
// if vocab_size < 257.
absl::StatusOr<BpeVocabulary> TrainByteLevelBpe(absl::string_view text, int vocab_size);

// Appends unused tokens "<|unused_N|>" (N from 0, type kTypeUnused) after
// <|endoftext|> until the vocabulary has vocab_size tokens, the way released
// models pad their embedding rows (Qwen3's 151,643 tokens fill 151,936 rows).
// Unused tokens are never produced by tokenizing text. Returns how many were
// added (0 when the vocabulary is already that large).
int PadVocabulary(int vocab_size, BpeVocabulary* vocab);

}  // namespace colibri::synthetic

#endif  // COLIBRI_SCRIPTS_SYNTHETIC_MODEL_BYTE_LEVEL_BPE_H_
