// Helpers of the grammar tests: a small synthetic vocabulary, and acceptance of
// a text by the byte-level reference (an NFA walk), the lazy DFA, and the token
// path (each token of a greedy tokenization allowed by the mask at its step).
#ifndef COLIBRI_TESTS_MODEL_GRAMMAR_GRAMMAR_TEST_UTIL_H_
#define COLIBRI_TESTS_MODEL_GRAMMAR_GRAMMAR_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "model/grammar/grammar_matcher.h"
#include "model/grammar/json_schema_compiler.h"
#include "model/grammar/token_trie.h"

namespace colibri::grammar::testing {

// Every single byte (ids 0..255), some multi-byte pieces of JSON text, an
// empty control piece and an end-of-generation token (the last id).
inline std::shared_ptr<const TokenTrie> SmallVocabulary() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"{\"", "\":", "\",", "\"}", "true", "false", "null", "ab", "abc",
                        "\"a", "12", "},", "\xC3\xA9", "\xC3", "\\u00", " the", "\"name\":\"",
                        "\"]", "[\"", "2024-", "-01", "xyz\"", "\xE4\xB8\xAD\xE6\x96",
                        "aaaaaaaa"}) {
    pieces.push_back(p);
  }
  pieces.push_back("");  // a control token
  pieces.push_back("");  // end of generation
  const auto eog = static_cast<int32_t>(pieces.size() - 1);
  return TokenTrie::FromPieces(pieces, {eog});
}

// Greedy longest-match tokenization over `trie`'s pieces.
inline std::vector<int32_t> Tokenize(const TokenTrie& trie, const std::string& text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at < text.size()) {
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t id = 0; id < trie.n_vocab(); ++id) {
      const std::string& p = trie.piece(id);
      if (!p.empty() && p.size() > best_len && text.compare(at, p.size(), p) == 0) {
        best = id;
        best_len = p.size();
      }
    }
    ids.push_back(best);
    at += best_len;
  }
  return ids;
}

struct Verdicts {
  bool reference;  // NFA walk
  bool dfa;        // GrammarMatcher::AcceptBytes
  bool tokens;     // masks of a greedy tokenization
};

inline Verdicts Check(const std::shared_ptr<const CompiledGrammar>& grammar,
                      const std::shared_ptr<const TokenTrie>& trie, const std::string& text) {
  Verdicts v;
  v.reference = GrammarAccepts(*grammar, text);
  GrammarMatcher bytes(grammar, trie, MatcherOptions());
  v.dfa = bytes.AcceptBytes(text).ok() && bytes.IsAccepting();
  GrammarMatcher tokens(grammar, trie, MatcherOptions());
  v.tokens = true;
  for (int32_t id : Tokenize(*trie, text)) {
    absl::StatusOr<const TokenBitmask*> mask = tokens.ComputeMask();
    if (!mask.ok() || !(*mask)->Allowed(id) || !tokens.AcceptToken(id).ok()) {
      v.tokens = false;
      break;
    }
  }
  v.tokens = v.tokens && tokens.IsAccepting();
  return v;
}

}  // namespace colibri::grammar::testing

#endif  // COLIBRI_TESTS_MODEL_GRAMMAR_GRAMMAR_TEST_UTIL_H_
