// The vocabulary as a byte trie, laid out in preorder so that a walk that
// refuses a byte skips the node's whole subtree with one jump. Built once per
// vocabulary and shared by every matcher.
//
// A token's bytes are Tokenizer::TokenToPiece(id, render_special = false):
// byte-level BPE and SentencePiece vocabularies alike. Control tokens (empty
// pieces) are not in the trie; the end-of-generation tokens are kept apart.
//
// Thread-safety: immutable after Build(); safe to share between threads.
#ifndef COLIBRI_MODEL_GRAMMAR_TOKEN_TRIE_H_
#define COLIBRI_MODEL_GRAMMAR_TOKEN_TRIE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace colibri::grammar {

class TokenTrie {
 public:
  struct Node {
    uint32_t subtree_end;  // index one past the node's last descendant
    uint32_t first_token;  // into token_ids()
    uint16_t n_tokens;     // tokens whose bytes end here
    uint16_t depth;        // root: 0
    uint8_t byte;          // the byte leading here (root: unused)
  };

  static std::unique_ptr<TokenTrie> Build(const tokenizer::Tokenizer& tokenizer);
  // From explicit pieces (piece i is token i; empty pieces are left out) and
  // end-of-generation ids: for tests.
  static std::unique_ptr<TokenTrie> FromPieces(const std::vector<std::string>& pieces,
                                               std::vector<int32_t> end_of_generation);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  // The bytes of token `id` ("" for control tokens and ids out of range).
  const std::string& piece(int32_t id) const;
  const std::vector<int32_t>& end_of_generation() const { return end_of_generation_; }
  bool IsEndOfGeneration(int32_t id) const;
  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  size_t max_depth() const { return max_depth_; }

 private:
  TokenTrie() = default;
  void BuildNodes();

  std::vector<std::string> pieces_;  // [n_vocab]
  std::vector<int32_t> end_of_generation_;
  std::vector<Node> nodes_;  // preorder; [0] is the root
  std::vector<int32_t> token_ids_;
  size_t max_depth_ = 0;
};

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_TOKEN_TRIE_H_
