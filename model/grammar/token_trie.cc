#include "model/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

namespace colibri::grammar {

namespace {

// Characters of UTF-8 text (a character cut short counts).
int CountChars(absl::string_view bytes) {
  int n = 0;
  for (char c : bytes) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

bool IsPlainStringText(absl::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (b < 0x80) {
      if (b < 0x20 || b == '"' || b == '\\') return false;
      ++i;
      continue;
    }
    // The second byte's range for each lead byte; later bytes are 80..BF.
    int n;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      n = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    for (int k = 1; k < n; ++k) {
      if (i + k >= bytes.size()) return true;  // cut short at the end: a prefix
      const auto c = static_cast<uint8_t>(bytes[i + k]);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

std::unique_ptr<TokenTrie> TokenTrie::Build(const tokenizer::Tokenizer& tokenizer) {
  std::vector<std::string> pieces(static_cast<size_t>(tokenizer.n_vocab()));
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tokenizer.n_vocab(); ++id) {
    if (tokenizer.IsEndOfGeneration(id)) eog.push_back(id);
    if (tokenizer.IsControl(id)) continue;
    pieces[static_cast<size_t>(id)] = tokenizer.TokenToPiece(id, /*render_special=*/false);
  }
  return FromPieces(pieces, std::move(eog));
}

std::unique_ptr<TokenTrie> TokenTrie::FromPieces(const std::vector<std::string>& pieces,
                                                 std::vector<int32_t> end_of_generation) {
  std::unique_ptr<TokenTrie> trie(new TokenTrie());
  trie->pieces_ = pieces;
  std::sort(end_of_generation.begin(), end_of_generation.end());
  trie->end_of_generation_ = std::move(end_of_generation);
  trie->Build();
  return trie;
}

void TokenTrie::Build() {
  std::vector<int32_t> plain, other;
  const size_t words = (pieces_.size() + 63) / 64;
  plain_upto_.assign(kPlainLevels + 1, std::vector<uint64_t>(words, 0));
  plain_all_.assign(words, 0);
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const std::string& piece = pieces_[id];
    if (piece.empty() || IsEndOfGeneration(static_cast<int32_t>(id))) continue;
    if (!IsPlainStringText(piece)) {
      other.push_back(static_cast<int32_t>(id));
      continue;
    }
    plain.push_back(static_cast<int32_t>(id));
    const uint64_t bit = uint64_t{1} << (id & 63);
    plain_all_[id >> 6] |= bit;
    const int chars = CountChars(piece);
    for (int level = chars; level <= kPlainLevels; ++level) plain_upto_[level][id >> 6] |= bit;
  }
  plain_ = BuildLayout(std::move(plain));
  other_ = BuildLayout(std::move(other));
}

TokenTrie::Layout TokenTrie::BuildLayout(std::vector<int32_t> order) {
  Layout layout;
  std::vector<Node>& nodes_ = layout.nodes;
  std::vector<int32_t>& token_ids_ = layout.token_ids;
  std::sort(order.begin(), order.end(), [this](int32_t a, int32_t b) {
    return pieces_[a] != pieces_[b] ? pieces_[a] < pieces_[b] : a < b;
  });
  nodes_.push_back(Node{0, 0, 0, 0, 0, 0});
  std::vector<uint32_t> path = {0};  // node indices from the root
  const std::string* previous = nullptr;
  for (int32_t id : order) {
    const std::string& piece = pieces_[id];
    size_t common = 0;
    if (previous != nullptr) {
      const size_t limit = std::min(previous->size(), piece.size());
      while (common < limit && (*previous)[common] == piece[common]) ++common;
    }
    while (path.size() > common + 1) {
      nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t i = common; i < piece.size(); ++i) {
      nodes_.push_back(Node{0, static_cast<uint32_t>(token_ids_.size()), 0,
                            static_cast<uint16_t>(i + 1), static_cast<uint8_t>(piece[i]), 0});
      path.push_back(static_cast<uint32_t>(nodes_.size() - 1));
    }
    const auto chars = static_cast<uint8_t>(std::min(CountChars(piece), 255));
    for (uint32_t at : path) nodes_[at].max_chars = std::max(nodes_[at].max_chars, chars);
    Node& end = nodes_[path.back()];
    if (end.n_tokens == 0) end.first_token = static_cast<uint32_t>(token_ids_.size());
    ++end.n_tokens;
    token_ids_.push_back(id);
    max_depth_ = std::max(max_depth_, piece.size());
    previous = &piece;
  }
  while (!path.empty()) {
    nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
  return layout;
}

const std::string& TokenTrie::piece(int32_t id) const {
  static const std::string kNone;
  if (id < 0 || id >= n_vocab()) return kNone;
  return pieces_[static_cast<size_t>(id)];
}

bool TokenTrie::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

}  // namespace colibri::grammar
