#include "model/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

namespace colibri::grammar {

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
  trie->BuildNodes();
  return trie;
}

void TokenTrie::BuildNodes() {
  std::vector<int32_t> order;
  for (size_t id = 0; id < pieces_.size(); ++id) {
    if (!pieces_[id].empty() && !IsEndOfGeneration(static_cast<int32_t>(id))) {
      order.push_back(static_cast<int32_t>(id));
    }
  }
  std::sort(order.begin(), order.end(), [this](int32_t a, int32_t b) {
    return pieces_[a] != pieces_[b] ? pieces_[a] < pieces_[b] : a < b;
  });
  nodes_.push_back(Node{0, 0, 0, 0, 0});
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
                            static_cast<uint16_t>(i + 1), static_cast<uint8_t>(piece[i])});
      path.push_back(static_cast<uint32_t>(nodes_.size() - 1));
    }
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
