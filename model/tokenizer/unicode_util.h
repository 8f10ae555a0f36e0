// Unicode helpers shared by the tokenizers: UTF-8 decoding with llama.cpp's
// error handling, code point categories, and GPT-2's byte-to-unicode mapping.
//
// The category table follows llama.cpp's (src/unicode-data.cpp): one general
// category per code point (\p{L}, \p{N}, \p{M}, \p{P}, \p{S}, \p{Z}, \p{C}) plus
// the Unicode White_Space property. It is built from ICU on first use.
//
// Thread-safety: all functions are thread-safe.
#ifndef COLIBRI_MODEL_TOKENIZER_UNICODE_UTIL_H_
#define COLIBRI_MODEL_TOKENIZER_UNICODE_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/utf8_encode.h"

namespace colibri::tokenizer {

// Bit layout of llama.cpp's unicode_cpt_flags.
enum CodepointFlag : uint16_t {
  kCpUndefined = 0x0001,
  kCpNumber = 0x0002,       // \p{N}
  kCpLetter = 0x0004,       // \p{L}
  kCpSeparator = 0x0008,    // \p{Z}
  kCpMark = 0x0010,         // \p{M}
  kCpPunctuation = 0x0020,  // \p{P}
  kCpSymbol = 0x0040,       // \p{S}
  kCpControl = 0x0080,      // \p{C}, including unassigned code points
  kCpCategoryMask = 0x00FF,
  kCpWhitespace = 0x0100,  // White_Space
};

// Flags of `cp`; 0 above U+10FFFF.
uint16_t CodepointFlags(uint32_t cp);

// Lowercase mapping (simple case mapping).
uint32_t ToLower(uint32_t cp);

// Length of the UTF-8 sequence that starts with `lead`, judged from its top four
// bits only (1 for continuation bytes), as llama.cpp's unicode_len_utf8.
inline int Utf8SequenceLength(uint8_t lead) {
  static constexpr int8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

inline int Utf8Length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Appends cp as UTF-8 (common/utf8_encode.h).
using ::colibri::AppendUtf8;

// Decodes `text` into code points, appending to `out`. As llama.cpp, a byte that
// does not start a well-formed sequence becomes U+FFFD and decoding resumes at the
// next byte; overlong forms and surrogates are accepted as they decode. Returns
// true when re-encoding `out` reproduces `text` byte for byte.
bool DecodeUtf8(absl::string_view text, std::vector<uint32_t>* out);

// `text` with every byte that does not belong to a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF)
// replaced by U+FFFD, one replacement per such byte. Valid text comes back
// unchanged. For protocols that require valid UTF-8 (protobuf strings, JSON).
std::string ToValidUtf8(absl::string_view text);

// GPT-2's reversible byte <-> code point mapping used by byte-level BPE.
uint32_t ByteToCodepoint(uint8_t byte);
// The byte whose image is `cp`, or -1.
int CodepointToByte(uint32_t cp);

}  // namespace colibri::tokenizer

#endif  // COLIBRI_MODEL_TOKENIZER_UNICODE_UTIL_H_
