#include "model/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "model/tokenizer/piece_cache.h"
#include "model/tokenizer/unicode_util.h"

namespace colibri::tokenizer {
namespace {

constexpr absl::string_view kSpace = "\xE2\x96\x81";  // U+2581

// Length of the symbol (UTF-8 character, judged by its lead byte) at `offset`.
size_t SymbolLength(absl::string_view text, size_t offset) {
  return std::min<size_t>(Utf8SequenceLength(static_cast<uint8_t>(text[offset])),
                          text.size() - offset);
}

}  // namespace

struct SpmTokenizer::Scratch {
  struct Symbol {
    int32_t prev;
    int32_t next;
    uint32_t start;  // byte offset in the segment
    uint32_t len;    // bytes; 0 once merged into its left neighbour
  };
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;  // bytes of the merged text when queued
  };
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

SpmTokenizer::SpmTokenizer(const Vocab& vocab) : vocab_(vocab) {
  for (int b = 0; b < 256; ++b) {
    int32_t token = vocab.Find(absl::StrFormat("<0x%02X>", b));
    if (token < 0) token = vocab.Find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = token;
  }
  for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
    const absl::string_view text = vocab.text(id);
    for (size_t k = text.find(kSpace, 1); k != absl::string_view::npos;
         k = text.find(kSpace, k + 1)) {
      for (size_t len = 1; len <= 4 && len <= k; ++len) {
        precedes_space_.emplace(text.substr(k - len, len));
      }
    }
  }
}

void SpmTokenizer::Encode(absl::string_view text, std::vector<int32_t>* out) const {
  Scratch scratch;
  PieceCache cache;
  auto encode = [&](absl::string_view segment) {
    cache.Encode(segment, out, [&](absl::string_view s, std::vector<int32_t>* ids) {
      EncodeSegment(s, scratch, ids);
    });
  };
  size_t segment_start = 0;
  size_t prev_start = 0;  // start of the symbol before `offset`
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = SymbolLength(text, offset);
    if (offset > segment_start && text.substr(offset, len) == kSpace &&
        !precedes_space_.contains(text.substr(prev_start, offset - prev_start))) {
      encode(text.substr(segment_start, offset - segment_start));
      segment_start = offset;
    }
    prev_start = offset;
    offset += len;
  }
  if (segment_start < text.size()) encode(text.substr(segment_start));
}

void SpmTokenizer::EncodeSegment(absl::string_view text, Scratch& scratch,
                                 std::vector<int32_t>* out) const {
  using Symbol = Scratch::Symbol;
  using Bigram = Scratch::Bigram;
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Bigram>& heap = scratch.heap;
  symbols.clear();
  heap.clear();
  const size_t n = text.size();
  for (size_t offset = 0; offset < n;) {
    const size_t len = SymbolLength(text, offset);
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{index - 1, offset + len == n ? -1 : index + 1,
                             static_cast<uint32_t>(offset), static_cast<uint32_t>(len)});
    offset += len;
  }
  if (symbols.empty()) return;

  // Highest score first, then leftmost.
  auto later = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    // Adjacent symbols are contiguous in the text.
    const uint32_t size = symbols[left].len + symbols[right].len;
    const int32_t token = vocab_.Find(text.substr(symbols[left].start, size));
    if (token < 0) return;
    heap.push_back(Bigram{vocab_.score(token), left, right, size});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Bigram bigram = heap.back();
    heap.pop_back();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != bigram.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const absl::string_view piece = text.substr(symbols[i].start, symbols[i].len);
    const int32_t token = vocab_.Find(piece);
    if (token >= 0) {
      out->push_back(token);
      continue;
    }
    for (const char byte : piece) {
      const int32_t byte_token = byte_tokens_[static_cast<uint8_t>(byte)];
      if (byte_token >= 0) out->push_back(byte_token);
    }
  }
}

}  // namespace colibri::tokenizer
