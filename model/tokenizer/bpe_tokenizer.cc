#include "model/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "model/tokenizer/piece_cache.h"
#include "model/tokenizer/unicode_util.h"

namespace colibri::tokenizer {

struct BpeTokenizer::Scratch {
  struct Symbol {
    int32_t prev;
    int32_t next;
    int32_t piece;  // -1: a byte whose code point occurs in no merge
    int32_t len;    // bytes; 0 once merged into its left neighbour
  };
  struct Bigram {
    int32_t rank;
    int32_t left;
    int32_t right;
    int32_t left_piece;  // the pieces when queued; a changed piece means stale
    int32_t right_piece;
    int32_t result;
  };
  std::vector<uint32_t> cps;
  std::string utf8;
  std::vector<uint32_t> word_lengths;
  std::string encoded;
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(const Vocab& vocab) {
  std::unique_ptr<BpeTokenizer> bpe(new BpeTokenizer(vocab));
  auto pre = PreTokenizer::Create(vocab.pre_tokenizer().regexes);
  if (!pre.ok()) return pre.status();
  bpe->pre_ = *std::move(pre);
  bpe->ignore_merges_ = vocab.pre_tokenizer().ignore_merges;

  absl::flat_hash_map<std::string, int32_t> pieces;  // every string occurring in a merge
  auto intern = [&pieces](std::string text) {
    return pieces.emplace(std::move(text), static_cast<int32_t>(pieces.size())).first->second;
  };
  const std::vector<std::string>& merges = vocab.merges();
  bpe->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    // llama.cpp splits at the first space after the first byte.
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) continue;
    const int32_t left = intern(merge.substr(0, space));
    const int32_t right = intern(merge.substr(space + 1));
    const int32_t result = intern(merge.substr(0, space) + merge.substr(space + 1));
    // The first occurrence of a pair keeps its rank.
    bpe->merges_.emplace((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right),
                         Merge{static_cast<int32_t>(rank), result});
  }
  std::vector<const std::string*> piece_text(pieces.size());
  for (const auto& [text, id] : pieces) piece_text[id] = &text;
  bpe->piece_token_.resize(pieces.size());
  for (size_t id = 0; id < pieces.size(); ++id) {
    bpe->piece_token_[id] = vocab.Find(*piece_text[id]);
  }
  for (int b = 0; b < 256; ++b) {
    std::string image;
    AppendUtf8(ByteToCodepoint(static_cast<uint8_t>(b)), &image);
    auto it = pieces.find(image);
    bpe->byte_piece_[b] = it == pieces.end() ? -1 : it->second;
    bpe->byte_token_[b] = vocab.Find(image);
    bpe->raw_byte_token_[b] = vocab.Find(std::string(1, static_cast<char>(b)));
    bpe->byte_image_[b] = std::move(image);
  }
  return bpe;
}

absl::Status BpeTokenizer::Encode(absl::string_view text, std::vector<int32_t>* out) const {
  Scratch scratch;
  // Words are cut from the code points; invalid UTF-8 has become U+FFFD there,
  // so the bytes come from re-encoding them (the input itself when it is valid).
  absl::string_view utf8 = text;
  if (!DecodeUtf8(text, &scratch.cps)) {
    scratch.utf8.reserve(text.size() + 8);
    for (uint32_t cp : scratch.cps) AppendUtf8(cp, &scratch.utf8);
    utf8 = scratch.utf8;
  }
  if (absl::Status status = pre_->Split(scratch.cps, &scratch.word_lengths); !status.ok()) {
    return status;
  }
  PieceCache cache;
  size_t cp_pos = 0;
  size_t byte_pos = 0;
  for (const uint32_t n_cps : scratch.word_lengths) {
    size_t n_bytes = 0;
    for (size_t i = cp_pos; i < cp_pos + n_cps; ++i) n_bytes += Utf8Length(scratch.cps[i]);
    const absl::string_view word = utf8.substr(byte_pos, n_bytes);
    cp_pos += n_cps;
    byte_pos += n_bytes;
    if (n_bytes <= 1) {
      EncodeWord(word, scratch, out);
      continue;
    }
    cache.Encode(word, out, [&](absl::string_view w, std::vector<int32_t>* ids) {
      EncodeWord(w, scratch, ids);
    });
  }
  return absl::OkStatus();
}

void BpeTokenizer::AppendByteFallback(absl::string_view bytes, std::vector<int32_t>* out) const {
  // llama.cpp looks up each byte of the symbol's byte-level spelling on its own;
  // only ASCII-range ones can be tokens, the others are dropped.
  for (const char b : bytes) {
    for (const char c : byte_image_[static_cast<uint8_t>(b)]) {
      const int32_t token = raw_byte_token_[static_cast<uint8_t>(c)];
      if (token >= 0) out->push_back(token);
    }
  }
}

void BpeTokenizer::EncodeWord(absl::string_view word, Scratch& scratch,
                              std::vector<int32_t>* out) const {
  const size_t n = word.size();
  if (n == 0) return;
  if (ignore_merges_) {
    scratch.encoded.clear();
    for (const char b : word) scratch.encoded += byte_image_[static_cast<uint8_t>(b)];
    const int32_t token = vocab_.Find(scratch.encoded);
    if (token >= 0) {
      out->push_back(token);
      return;
    }
  }
  if (n == 1) {
    const int32_t token = byte_token_[static_cast<uint8_t>(word[0])];
    if (token >= 0) {
      out->push_back(token);
    } else {
      AppendByteFallback(word, out);
    }
    return;
  }

  using Symbol = Scratch::Symbol;
  using Bigram = Scratch::Bigram;
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Bigram>& heap = scratch.heap;
  symbols.resize(n);
  for (size_t i = 0; i < n; ++i) {
    symbols[i] = Symbol{static_cast<int32_t>(i) - 1, i + 1 == n ? -1 : static_cast<int32_t>(i) + 1,
                        byte_piece_[static_cast<uint8_t>(word[i])], 1};
  }
  // Lowest rank first, then leftmost.
  auto later = [](const Bigram& a, const Bigram& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Merge* merge = FindMerge(symbols[left].piece, symbols[right].piece);
    if (merge == nullptr) return;
    heap.push_back(
        Bigram{merge->rank, left, right, symbols[left].piece, symbols[right].piece, merge->result});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  heap.clear();
  for (size_t i = 1; i < n; ++i) try_add(static_cast<int32_t>(i) - 1, static_cast<int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Bigram bigram = heap.back();
    heap.pop_back();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.len == 0 || right.len == 0 || left.piece != bigram.left_piece ||
        right.piece != bigram.right_piece) {
      continue;  // one side has changed since the pair was queued
    }
    left.len += right.len;
    left.piece = bigram.result;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const int32_t token =
        s.piece >= 0 ? piece_token_[s.piece] : byte_token_[static_cast<uint8_t>(word[i])];
    if (token >= 0) {
      out->push_back(token);
    } else {
      AppendByteFallback(word.substr(i, s.len), out);
    }
  }
}

}  // namespace colibri::tokenizer
