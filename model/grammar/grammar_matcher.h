// Constrained decoding over a CompiledGrammar: which tokens may come next (a
// bitset over the vocabulary), advancing with the sampled token, and the bytes
// the grammar forces next (for drafts).
//
//   auto trie = TokenTrie::Build(tokenizer);                  // once per vocabulary
//   COLIBRI_ASSIGN_OR_RETURN(auto grammar, CompileJsonSchema(schema, {}));  // per request
//   GrammarMatcher matcher(grammar, trie, {});                // per generation
//   COLIBRI_ASSIGN_OR_RETURN(const TokenBitmask* mask, matcher.ComputeMask());
//   ... sample among mask->Allowed(id) ...
//   COLIBRI_RETURN_IF_ERROR(matcher.AcceptToken(id));
//
// Masks are cached per automaton state, so a state seen again costs a lookup.
// They are walked on a second automaton that does not keep object key sets
// (LazyDfa track_keys false), whose states are shared by every key set, and
// only tokens that pass a key move are checked on the exact automaton; a mask
// no such token decided is cached for the shared state.
// Thread-safety: a GrammarMatcher is not thread-safe (one per generation); the
// grammar and the trie it holds are immutable and may be shared.
#ifndef COLIBRI_MODEL_GRAMMAR_GRAMMAR_MATCHER_H_
#define COLIBRI_MODEL_GRAMMAR_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/byte_nfa.h"
#include "model/grammar/lazy_dfa.h"
#include "model/grammar/token_trie.h"

namespace colibri::grammar {

// One bit per token id.
class TokenBitmask {
 public:
  explicit TokenBitmask(int32_t n_vocab)
      : n_vocab_(n_vocab), words_((static_cast<size_t>(n_vocab) + 63) / 64, 0) {}
  bool Allowed(int32_t id) const {
    return id >= 0 && id < n_vocab_ && ((words_[id >> 6] >> (id & 63)) & 1) != 0;
  }
  void Allow(int32_t id) { words_[id >> 6] |= uint64_t{1} << (id & 63); }
  // Allows every token set in `words` (same layout as words()).
  void AllowAll(const std::vector<uint64_t>& words) {
    for (size_t i = 0; i < words_.size() && i < words.size(); ++i) words_[i] |= words[i];
  }
  size_t Count() const;
  int32_t n_vocab() const { return n_vocab_; }
  // [ceil(n_vocab / 64)], bit i of word w is token 64 * w + i.
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  int32_t n_vocab_;
  std::vector<uint64_t> words_;
};

struct MatcherOptions {
  // Automaton states built at most; past it ComputeMask/Accept* answer
  // ResourceExhausted. The bound holds for each of the matcher's two automata
  // (exact and key-blind); a state costs 1.25 KiB of tables (both automata
  // at the default bound: about 640 MiB).
  // Default: 262144.
  size_t max_dfa_states = 262144;
  // Masks kept (one per automaton state seen, of either automaton); the cache
  // is emptied when full.
  // Each costs n_vocab / 8 bytes (19 KiB for a 151k vocabulary).
  // Default: 2048.
  size_t max_cached_masks = 2048;
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                 std::shared_ptr<const TokenTrie> trie, const MatcherOptions& options);
  GrammarMatcher(const GrammarMatcher&) = delete;
  GrammarMatcher& operator=(const GrammarMatcher&) = delete;

  // The tokens allowed next: those whose bytes the grammar can continue with,
  // plus the end-of-generation tokens when the text so far is complete. The
  // pointer stays valid until the next call of a non-const method.
  // ResourceExhausted when the automaton outgrows MatcherOptions; FailedPrecondition
  // after an end-of-generation token.
  absl::StatusOr<const TokenBitmask*> ComputeMask();

  // Advances by token `id`. InvalidArgument (nothing changes) when the grammar
  // refuses its bytes; an end-of-generation token ends the text and is
  // accepted only when IsAccepting().
  absl::Status AcceptToken(int32_t id);
  // Advances by raw bytes. InvalidArgument (nothing changes) when refused.
  absl::Status AcceptBytes(absl::string_view bytes);
  // Would these bytes be accepted next (no change)?
  bool CanAccept(absl::string_view bytes);

  // The text so far is a complete instance.
  bool IsAccepting() const { return dfa_.IsAccepting(state_); }
  // An end-of-generation token was accepted.
  bool IsFinished() const { return finished_; }
  // The bytes every continuation starts with, up to `max_bytes` (stops where
  // the text could also end): keys, punctuation, enum tails for drafts.
  std::string ForcedBytes(size_t max_bytes);

  // Back to the start of the grammar; caches are kept.
  void Reset();

  // Where the matcher is in the text: its automaton state and whether an
  // end-of-generation token ended it. Generations that share one matcher
  // (its automaton and its masks) each keep their own Position and set it
  // before every other call; a Position is valid only for the matcher that
  // gave it.
  struct Position {
    int32_t state = 0;
    bool finished = false;
  };
  Position position() const { return {state_, finished_}; }
  void set_position(Position p) {
    state_ = p.state;
    finished_ = p.finished;
  }
  // Masks ComputeMask computed (not found in its cache) so far.
  uint64_t masks_computed() const { return masks_computed_; }
  // The automaton outgrew MatcherOptions::max_dfa_states: every later
  // ComputeMask fails.
  bool overflowed() const { return dfa_.overflowed() || loose_.overflowed(); }
  // Forgets the cached masks (for benchmarks of the walk).
  void ClearMaskCache() {
    masks_.clear();
    loose_masks_.clear();
  }

  size_t dfa_states() const { return dfa_.size(); }

 private:
  absl::Status CheckOverflow() const;
  // The most characters of plain string text (TokenTrie) that the automaton
  // takes in any spelling from `state`: 0..TokenTrie::kPlainLevels, or
  // kUnbounded. Remembered per state.
  static constexpr int kUnbounded = 255;
  // On `dfa` (a transition through a hard key move counts as refused: soft
  // ones never leave plain text without a way on), cached in
  // `levels`.
  int PlainLevel(LazyDfa& dfa, int32_t state, std::vector<int16_t>* levels);
  // Sets the bits of the tokens of `layout` the automaton takes from state_
  // (walked from `loose` on loose_, or from state_ on dfa_ when `loose` is
  // kNoLoose), skipping subtrees whose tokens have at most `skip_chars`
  // characters. Returns whether a token needed the exact automaton.
  bool Walk(const TokenTrie::Layout& layout, int32_t loose, int skip_chars, TokenBitmask* mask);
  static constexpr int32_t kNoLoose = -1;
  // loose_'s state for state_, or kNoLoose when its positions differ in more
  // than key sets.
  int32_t LooseState();

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  MatcherOptions options_;
  LazyDfa dfa_;    // exact: the text's state
  LazyDfa loose_;  // without key sets: the masks' walks
  int32_t state_;
  bool finished_ = false;
  uint64_t masks_computed_ = 0;
  absl::flat_hash_map<int32_t, std::unique_ptr<TokenBitmask>> masks_;        // by dfa_ state
  absl::flat_hash_map<int32_t, std::unique_ptr<TokenBitmask>> loose_masks_;  // by loose_ state
  std::vector<int32_t> loose_of_;           // [dfa_ state] LooseState(), -2 unknown
  std::vector<int32_t> walk_;               // [trie depth] state (loose_ or dfa_, see exact_)
  std::vector<uint8_t> exact_;              // [trie depth] walk_ holds a dfa_ state
  std::vector<uint8_t> bytes_;              // [trie depth] the byte leading there
  std::vector<int16_t> plain_level_;        // [dfa_ state] PlainLevel, -1 unknown
  std::vector<int16_t> loose_plain_level_;  // [loose_ state] PlainLevel, -1 unknown
};

}  // namespace colibri::grammar

#endif  // COLIBRI_MODEL_GRAMMAR_GRAMMAR_MATCHER_H_
