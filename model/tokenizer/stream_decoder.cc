#include <cstddef>
#include <cstdint>
#include <string>

#include "model/tokenizer/tokenizer.h"

namespace colibri::tokenizer {
namespace {

// Length of the trailing bytes of `s` that begin a UTF-8 character still
// missing bytes (0 if `s` ends on a character boundary or in malformed bytes).
size_t IncompleteTail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const uint8_t c = static_cast<uint8_t>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = (c & 0xE0) == 0xC0   ? 2
                        : (c & 0xF0) == 0xE0 ? 3
                        : (c & 0xF8) == 0xF0 ? 4
                                             : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(tokenizer), render_special_(render_special) {}

std::string StreamDecoder::Push(int32_t id) {
  pending_ += tokenizer_.TokenToPiece(id, render_special_);
  const size_t complete = pending_.size() - IncompleteTail(pending_);
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace colibri::tokenizer
