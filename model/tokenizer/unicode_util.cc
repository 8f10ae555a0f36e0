#include "model/tokenizer/unicode_util.h"

#include <unicode/uchar.h>

#include <array>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace colibri::tokenizer {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr int kBlockBits = 8;
constexpr uint32_t kBlockSize = 1u << kBlockBits;
constexpr uint32_t kNumBlocks = (kMaxCodepoint + 1) >> kBlockBits;

uint16_t CategoryFlag(int8_t category) {
  switch (category) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kCpLetter;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return kCpMark;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kCpNumber;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return kCpSeparator;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return kCpPunctuation;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      return kCpSymbol;
    default:  // Cc, Cf, Co, Cs and unassigned (Cn), as the regex \p{C} of llama.cpp's generator
      return kCpControl;
  }
}

// Two-stage table: blocks of 256 code points, identical blocks shared.
class FlagTable {
 public:
  FlagTable() {
    block_index_.resize(kNumBlocks);
    absl::flat_hash_map<std::string, uint16_t> seen;
    std::array<uint16_t, kBlockSize> block;
    for (uint32_t b = 0; b < kNumBlocks; ++b) {
      for (uint32_t i = 0; i < kBlockSize; ++i) {
        const UChar32 cp = static_cast<UChar32>((b << kBlockBits) | i);
        uint16_t flags = CategoryFlag(static_cast<int8_t>(u_charType(cp)));
        if (u_hasBinaryProperty(cp, UCHAR_WHITE_SPACE)) flags |= kCpWhitespace;
        block[i] = flags;
      }
      std::string key(reinterpret_cast<const char*>(block.data()), sizeof(block));
      auto [it, inserted] = seen.emplace(std::move(key), static_cast<uint16_t>(seen.size()));
      if (inserted) blocks_.insert(blocks_.end(), block.begin(), block.end());
      block_index_[b] = it->second;
    }
  }

  uint16_t Get(uint32_t cp) const {
    if (cp > kMaxCodepoint) return 0;
    return blocks_[(static_cast<uint32_t>(block_index_[cp >> kBlockBits]) << kBlockBits) |
                   (cp & (kBlockSize - 1))];
  }

 private:
  std::vector<uint16_t> block_index_;  // [kNumBlocks]
  std::vector<uint16_t> blocks_;       // [n_unique_blocks][kBlockSize]
};

const FlagTable& Table() {
  static const FlagTable* const table = new FlagTable();
  return *table;
}

struct ByteMap {
  std::array<uint32_t, 256> to_cp;
  absl::flat_hash_map<uint32_t, uint8_t> from_cp;

  ByteMap() {
    std::array<bool, 256> direct{};
    for (int b = 0x21; b <= 0x7E; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap* const map = new ByteMap();
  return *map;
}

}  // namespace

uint16_t CodepointFlags(uint32_t cp) { return Table().Get(cp); }

uint32_t ToLower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp;
  if (cp > kMaxCodepoint) return cp;
  return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp)));
}

namespace {

// Length of the well-formed sequence at s[i..n), or 0 (RFC 3629 table 3-7).
size_t WellFormedLength(const uint8_t* s, size_t i, size_t n) {
  const uint8_t b0 = s[i];
  if (b0 < 0x80) return 1;
  auto in = [&](size_t j, uint8_t lo, uint8_t hi) { return j < n && s[j] >= lo && s[j] <= hi; };
  if (b0 >= 0xC2 && b0 <= 0xDF) return in(i + 1, 0x80, 0xBF) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80;  // no overlong forms
    const uint8_t hi = b0 == 0xED ? 0x9F : 0xBF;  // no surrogates
    return in(i + 1, lo, hi) && in(i + 2, 0x80, 0xBF) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80;  // no overlong forms
    const uint8_t hi = b0 == 0xF4 ? 0x8F : 0xBF;  // nothing above U+10FFFF
    return in(i + 1, lo, hi) && in(i + 2, 0x80, 0xBF) && in(i + 3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::string ToValidUtf8(absl::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n;) {
    const size_t len = WellFormedLength(s, i, n);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(text.data() + i, len);
      i += len;
    }
  }
  return out;
}

bool DecodeUtf8(absl::string_view text, std::vector<uint32_t>* out) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  out->reserve(out->size() + n);
  bool canonical = true;
  auto cont = [&](size_t i) { return i < n && (s[i] & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = s[i];
    if (b0 < 0x80) {
      out->push_back(b0);
      i += 1;
      continue;
    }
    uint32_t cp = 0;
    size_t len = 0;
    if ((b0 & 0xE0) == 0xC0) {
      if (cont(i + 1)) {
        cp = ((b0 & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
        len = 2;
      }
    } else if ((b0 & 0xF0) == 0xE0) {
      if (cont(i + 1) && cont(i + 2)) {
        cp = ((b0 & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
        len = 3;
      }
    } else if ((b0 & 0xF8) == 0xF0) {
      if (cont(i + 1) && cont(i + 2) && cont(i + 3)) {
        cp = ((b0 & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
             (s[i + 3] & 0x3Fu);
        len = 4;
      }
    }
    // llama.cpp would throw while re-encoding a code point above U+10FFFF; treat
    // such a sequence like any other malformed byte.
    if (len == 0 || cp > kMaxCodepoint) {
      out->push_back(0xFFFD);
      canonical = false;
      i += 1;
      continue;
    }
    if (Utf8Length(cp) != static_cast<int>(len)) canonical = false;  // overlong
    out->push_back(cp);
    i += len;
  }
  return canonical;
}

uint32_t ByteToCodepoint(uint8_t byte) { return Bytes().to_cp[byte]; }

int CodepointToByte(uint32_t cp) {
  const auto& from = Bytes().from_cp;
  auto it = from.find(cp);
  return it == from.end() ? -1 : it->second;
}

}  // namespace colibri::tokenizer
