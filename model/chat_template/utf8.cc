#include "model/chat_template/utf8.h"

namespace colibri::chat_template {

uint32_t DecodeUtf8(absl::string_view s, size_t* pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = byte(*pos);
  int extra = 0;
  uint32_t cp = c;
  if (c >= 0xF0 && c < 0xF8) {
    extra = 3;
    cp = c & 0x07;
  } else if (c >= 0xE0) {
    extra = c < 0xF0 ? 2 : 0;
    cp = c & 0x0F;
  } else if (c >= 0xC0) {
    extra = 1;
    cp = c & 0x1F;
  }
  if (extra == 0 || *pos + extra >= s.size()) {
    ++*pos;
    return c;
  }
  for (int i = 1; i <= extra; ++i) {
    if ((byte(*pos + i) & 0xC0) != 0x80) {
      ++*pos;
      return c;
    }
    cp = (cp << 6) | (byte(*pos + i) & 0x3F);
  }
  *pos += extra + 1;
  return cp;
}

std::vector<uint32_t> ToCodePoints(absl::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(DecodeUtf8(s, &pos));
  return out;
}

std::string FromCodePoints(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) AppendUtf8(cps[i], &out);
  return out;
}

bool IsSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t ToUpper(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if (cp == 0xB5) return 0x39C;
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x131) return 'I';
    if (cp == 0x17F) return 'S';
    const bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (cp == 0x130 || cp == 0x138 || cp == 0x149 || cp == 0x178) return cp;
    if (odd_lower) return (cp % 2 == 0) ? cp - 1 : cp;
    return (cp % 2 == 1) ? cp - 1 : cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x3AC && cp <= 0x3AF) {
    static const uint32_t kTonos[] = {0x386, 0x388, 0x389, 0x38A};
    return kTonos[cp - 0x3AC];
  }
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD) return 0x38E;
  if (cp == 0x3CE) return 0x38F;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

uint32_t ToLower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x130) return 'i';
    const bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (cp == 0x131 || cp == 0x138 || cp == 0x149 || cp == 0x17F) return cp;
    if (odd_lower) return (cp % 2 == 1) ? cp + 1 : cp;
    return (cp % 2 == 0) ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

bool IsCased(uint32_t cp) {
  return ToUpper(cp) != cp || ToLower(cp) != cp || cp == 0xDF || cp == 0x138 || cp == 0x149;
}

namespace {

void AppendUpper(uint32_t cp, std::string* out) {
  if (cp == 0xDF) {
    *out += "SS";
  } else {
    AppendUtf8(ToUpper(cp), out);
  }
}

}  // namespace

std::string UpperString(absl::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) AppendUpper(DecodeUtf8(s, &pos), &out);
  return out;
}

std::string LowerString(absl::string_view s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) AppendUtf8(ToLower(DecodeUtf8(s, &pos)), &out);
  return out;
}

std::string TitleString(absl::string_view s) {
  std::string out;
  size_t pos = 0;
  bool prev_cased = false;
  while (pos < s.size()) {
    const uint32_t cp = DecodeUtf8(s, &pos);
    if (prev_cased) {
      AppendUtf8(ToLower(cp), &out);
    } else if (cp == 0xDF) {
      out += "Ss";
    } else {
      AppendUtf8(ToUpper(cp), &out);
    }
    prev_cased = IsCased(cp);
  }
  return out;
}

std::string CapitalizeString(absl::string_view s) {
  std::string out;
  size_t pos = 0;
  bool first = true;
  while (pos < s.size()) {
    const uint32_t cp = DecodeUtf8(s, &pos);
    if (first && cp == 0xDF) {
      out += "Ss";
    } else {
      AppendUtf8(first ? ToUpper(cp) : ToLower(cp), &out);
    }
    first = false;
  }
  return out;
}

}  // namespace colibri::chat_template
