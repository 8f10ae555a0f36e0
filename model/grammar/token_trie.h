// The vocabulary as byte tries laid out in preorder, so that a walk that
// refuses a byte skips the node's whole subtree with one jump. Built once per
// vocabulary and shared by every matcher.
//
// A token's bytes are Tokenizer::TokenToPiece(id, render_special = false):
// byte-level BPE and SentencePiece vocabularies alike. Control tokens (empty
// pieces) are in no trie; the end-of-generation tokens are kept apart.
//
// The tokens are split in two tries. Plain tokens are text of a JSON string
// body that needs no escape (no '"', '\', control characters), valid UTF-8
// whose last character may be cut short: inside a string most of them are
// allowed at once, so their masks by length in characters are precomputed
// (plain_upto) and a walk only enters the subtrees of longer ones. The other
// tokens (punctuation, quotes, digits after quotes, ...) are walked.
//
// Thread-safety: immutable after construction; safe to share between threads.
#ifndef COLIBRI_MODEL_GRAMMAR_TOKEN_TRIE_H_
#define COLIBRI_MODEL_GRAMMAR_TOKEN_TRIE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::grammar {

// True when `bytes` is plain JSON string text (see above).
bool IsPlainStringText(absl::string_view bytes);

class TokenTrie {
 public:
  // Plain-token lengths (in characters) with a precomputed mask: 0..kPlainLevels.
  static constexpr int kPlainLevels = 32;

  struct Node {
    uint32_t subtree_end;  // index one past the node's last descendant
    uint32_t first_token;  // into the layout's token_ids
    uint16_t n_tokens;     // tokens whose bytes end here
    uint16_t depth;        // root: 0
    uint8_t byte;          // the byte leading here (root: unused)
    uint8_t max_chars;     // longest token below, in characters (capped at 255)
  };
  struct Layout {
    std::vector<Node> nodes;  // preorder; [0] is the root
    std::vector<int32_t> token_ids;
  };

  static std::unique_ptr<TokenTrie> Build(const tokenizer::Tokenizer& tokenizer);
  // From explicit pieces (piece i is token i; empty pieces are left out) and
  // end-of-generation ids: for tests.
  static std::unique_ptr<TokenTrie> FromPieces(const std::vector<std::string>& pieces,
                                               std::vector<int32_t> end_of_generation);

  const Layout& plain() const { return plain_; }
  const Layout& other() const { return other_; }
  // The plain tokens of at most `chars` characters (0..kPlainLevels), and all
  // plain tokens. [ceil(n_vocab / 64)] words, bit i of word w is token 64w + i.
  const std::vector<uint64_t>& plain_upto(int chars) const { return plain_upto_[chars]; }
  const std::vector<uint64_t>& plain_all() const { return plain_all_; }

  // The bytes of token `id` ("" for control tokens and ids out of range).
  const std::string& piece(int32_t id) const;
  const std::vector<int32_t>& end_of_generation() const { return end_of_generation_; }
  bool IsEndOfGeneration(int32_t id) const;
  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  size_t max_depth() const { return max_depth_; }

 private:
  TokenTrie() = default;
  void Build();
  Layout BuildLayout(std::vector<int32_t> ids);

  std::vector<std::string> pieces_;  // [n_vocab]
  std::vector<int32_t> end_of_generation_;
  Layout plain_;
  Layout other_;
  std::vector<std::vector<uint64_t>> plain_upto_;  // [kPlainLevels + 1]
  std::vector<uint64_t> plain_all_;
  size_t max_depth_ = 0;
};

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_TOKEN_TRIE_H_
