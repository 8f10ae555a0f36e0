// Small UTF-8 helpers of the template interpreter (code points as Python sees
// them in str).
#ifndef COLIBRI_MODEL_CHAT_TEMPLATE_UTF8_H_
#define COLIBRI_MODEL_CHAT_TEMPLATE_UTF8_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/utf8_encode.h"

namespace colibri::chat_template {

// Decodes the code point at s[*pos] and advances *pos; an invalid byte decodes
// as itself (one byte), so every input round-trips.
uint32_t DecodeUtf8(absl::string_view s, size_t* pos);
// Appends cp as UTF-8 (common/utf8_encode.h).
using ::colibri::AppendUtf8;
std::vector<uint32_t> ToCodePoints(absl::string_view s);
std::string FromCodePoints(const std::vector<uint32_t>& cps, size_t begin, size_t end);
// Python's str.isspace() for one code point.
bool IsSpace(uint32_t cp);
// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and
// Cyrillic (other code points are returned unchanged).
uint32_t ToUpper(uint32_t cp);
uint32_t ToLower(uint32_t cp);
// Whether cp has case (ToUpper or ToLower changes it).
bool IsCased(uint32_t cp);
// Python's str.upper(), str.lower(), str.title(), str.capitalize() over the
// ranges above ("ß" upper-cases to "SS" as in Python).
std::string UpperString(absl::string_view s);
std::string LowerString(absl::string_view s);
std::string TitleString(absl::string_view s);
std::string CapitalizeString(absl::string_view s);

}  // namespace colibri::chat_template

#endif  // COLIBRI_MODEL_CHAT_TEMPLATE_UTF8_H_
