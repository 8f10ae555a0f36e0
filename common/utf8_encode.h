// UTF-8 encoding of one code point, shared by the tokenizers and the chat
// template interpreter. Header-only.
#ifndef COLIBRI_COMMON_UTF8_ENCODE_H_
#define COLIBRI_COMMON_UTF8_ENCODE_H_

#include <cstdint>
#include <string>

namespace colibri {

// Appends cp (at most 0x10FFFF; not checked) to *out as 1-4 UTF-8 bytes.
inline void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace colibri

#endif  // COLIBRI_COMMON_UTF8_ENCODE_H_
