#include "model/tokenizer/custom_splitters.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/tokenizer/unicode_util.h"

namespace colibri::tokenizer {
namespace {

// Appends `len` to `out` unless it is zero.
inline void Emit(size_t len, std::vector<uint32_t>* out) {
  if (len > 0) out->push_back(static_cast<uint32_t>(len));
}

// One piece [begin, end) of the text; positions outside read as "out of range"
// (no flags).
class PieceView {
 public:
  static constexpr uint32_t kOutOfRange = 0xFFFFFFFF;
  PieceView(const uint32_t* cps, const uint16_t* flags, size_t begin, size_t end)
      : cps_(cps), flags_(flags), begin_(begin), end_(end) {}
  uint32_t Cp(size_t pos) const { return pos >= begin_ && pos < end_ ? cps_[pos] : kOutOfRange; }
  uint16_t Flags(size_t pos) const { return pos >= begin_ && pos < end_ ? flags_[pos] : 0; }

 private:
  const uint32_t* cps_;
  const uint16_t* flags_;
  size_t begin_;
  size_t end_;
};

constexpr uint16_t kWordFlags = kCpWhitespace | kCpLetter | kCpNumber;

// 's|'t|'re|'ve|'m|'ll|'d at `pos` (case-folded when `fold`): its length or 0.
size_t ContractionLength(const PieceView& v, size_t pos, size_t end, bool fold) {
  if (v.Cp(pos) != '\'' || pos + 1 >= end) return 0;
  auto lower = [&](size_t p) { return fold ? ToLower(v.Cp(p)) : v.Cp(p); };
  const uint32_t c1 = lower(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= end) return 0;
  const uint32_t c2 = lower(pos + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

}  // namespace

void SplitGpt2(const uint32_t* cps, const uint16_t* flags, size_t begin, size_t end,
               std::vector<uint32_t>* out) {
  const PieceView v(cps, flags, begin, end);
  size_t pos = begin;
  while (pos < end) {
    const uint32_t cp = v.Cp(pos);
    if (const size_t n = ContractionLength(v, pos, end, /*fold=*/false); n > 0) {
      Emit(n, out);
      pos += n;
      continue;
    }
    const size_t start = pos;
    uint16_t f2 = cp == ' ' ? v.Flags(pos + 1) : v.Flags(pos);
    if (f2 & (kCpLetter | kCpNumber)) {  // ' ?\p{L}+' or ' ?\p{N}+'
      const uint16_t kind = (f2 & kCpLetter) ? kCpLetter : kCpNumber;
      pos += (cp == ' ');
      while (f2 & kind) f2 = v.Flags(++pos);
      Emit(pos - start, out);
      continue;
    }
    if (!(f2 & kWordFlags) && f2 != 0) {  // ' ?[^\s\p{L}\p{N}]+'
      pos += (cp == ' ');
      while (!(f2 & kWordFlags) && f2 != 0) f2 = v.Flags(++pos);
      Emit(pos - start, out);
      continue;
    }
    size_t n_ws = 0;
    while (v.Flags(pos + n_ws) & kCpWhitespace) ++n_ws;
    if (n_ws > 1 && v.Cp(pos + n_ws) != PieceView::kOutOfRange) {  // '\s+(?!\S)'
      pos += n_ws - 1;
    } else if (n_ws > 0) {  // '\s+'
      pos += n_ws;
    } else {
      pos += 1;
    }
    Emit(pos - start, out);
  }
}

void SplitLlama3(const uint32_t* cps, const uint16_t* flags, size_t begin, size_t end,
                 std::vector<uint32_t>* out) {
  const PieceView v(cps, flags, begin, end);
  size_t pos = begin;
  while (pos < end) {
    const uint32_t cp = v.Cp(pos);
    const uint16_t f = v.Flags(pos);
    if (const size_t n = ContractionLength(v, pos, end, /*fold=*/true); n > 0) {
      Emit(n, out);
      pos += n;
      continue;
    }
    const size_t start = pos;
    // '[^\r\n\p{L}\p{N}]?\p{L}+'
    if (!(cp == '\r' || cp == '\n' || (f & kCpNumber)) &&
        ((f & kCpLetter) || (v.Flags(pos + 1) & kCpLetter))) {
      ++pos;
      while (v.Flags(pos) & kCpLetter) ++pos;
      Emit(pos - start, out);
      continue;
    }
    if (f & kCpNumber) {  // '\p{N}{1,3}'
      size_t run = pos;
      while (v.Flags(pos) & kCpNumber) {
        if (++pos - run >= 3) {
          Emit(pos - run, out);
          run = pos;
        }
      }
      Emit(pos - run, out);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (llama.cpp tests the flags of `pos` here, not of
    // the character after the space; the outcome is the same).
    uint16_t f2 = cp == ' ' ? v.Flags(pos + 1) : f;
    if (!(f2 & kWordFlags) && f != 0) {
      pos += (cp == ' ');
      while (!(f2 & kWordFlags) && f2 != 0) f2 = v.Flags(++pos);
      while (v.Cp(pos) == '\r' || v.Cp(pos) == '\n') ++pos;
      Emit(pos - start, out);
      continue;
    }
    size_t n_ws = 0;
    size_t last_newline_end = 0;
    while (v.Flags(pos + n_ws) & kCpWhitespace) {
      const uint32_t c = v.Cp(pos + n_ws);
      if (c == '\r' || c == '\n') last_newline_end = pos + n_ws + 1;
      ++n_ws;
    }
    if (last_newline_end > 0) {  // '\s*[\r\n]+'
      pos = last_newline_end;
    } else if (n_ws > 1 && v.Cp(pos + n_ws) != PieceView::kOutOfRange) {  // '\s+(?!\S)'
      pos += n_ws - 1;
    } else if (n_ws > 0) {  // '\s+'
      pos += n_ws;
    } else {
      pos += 1;
    }
    Emit(pos - start, out);
  }
}

}  // namespace colibri::tokenizer
