// A generation's grammar constraint as the scheduler applies it: the logits
// of the tokens the grammar refuses next set to -inf before sampling, the
// sampled token fed to the grammar after it, and the tokens the grammar
// forces next offered as drafts (grammar::GrammarMatcher over a TokenTrie of
// the served vocabulary).
//
// The generations of one grammar share one matcher (SharedGrammar): its lazy
// automaton, its mask per automaton state and its forced tokens per state
// are computed once for all of them, so a server answering many requests
// with one schema pays for each mask once. Each generation keeps only its
// position in the text (GrammarMatcher::Position). GrammarCache finds the
// shared matcher of a grammar by its content, since every request compiles
// its own CompiledGrammar.
//
// Thread-safety: none. SharedGrammar, GrammarCache, TokenConstraint and
// ForcedTokenDrafter are used on the scheduler's stepping thread only; the
// grammar, the trie and the tokenizer are immutable and shared.
#ifndef COLIBRI_COORDINATOR_GENERATION_TOKEN_CONSTRAINT_H_
#define COLIBRI_COORDINATOR_GENERATION_TOKEN_CONSTRAINT_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/grammar/grammar_matcher.h"
#include "model/grammar/token_trie.h"
#include "model/speculative/drafter.h"
#include "model/tokenizer/tokenizer.h"

namespace colibri::coordinator {

// One grammar's matcher, shared by the generations of that grammar, and the
// tokens it forces from each automaton state (for drafts).
struct SharedGrammar {
  // Bounds per grammar: at most 16 MiB of automaton transitions, 512 masks
  // (3.2 MiB at a 50k vocabulary, 9.5 MiB at 151k; the mask cache restarts
  // when full) and 4096 states in each token map, so a hostile grammar
  // fails its generations (ResourceExhausted) instead of growing without
  // bound.
  SharedGrammar(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                std::shared_ptr<const grammar::TokenTrie> trie);

  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::shared_ptr<const grammar::TokenTrie> trie;
  grammar::GrammarMatcher matcher;
  // Automaton state where the grammar forces bytes -> the first token of the
  // tokenizer's spelling of them (-1: none, or no bytes are forced there).
  absl::flat_hash_map<int32_t, int32_t> spelled;
  // Such a state -> the token last sampled there by a generation of this
  // grammar: how the model spells the forced text, which is drafted there
  // instead of the tokenizer's spelling.
  absl::flat_hash_map<int32_t, int32_t> sampled;
};

// The SharedGrammar of each grammar recently used, by content. Keeps at most
// `capacity` grammars (least recently used dropped first; generations that
// still hold one keep it alive), and replaces one whose automaton overflowed.
class GrammarCache {
 public:
  struct Stats {
    int64_t hits = 0;    // For() found the grammar's matcher
    int64_t misses = 0;  // For() made a new one
    int64_t grammars = 0;
  };

  // Default capacity: 8 grammars.
  explicit GrammarCache(std::shared_ptr<const grammar::TokenTrie> trie, size_t capacity = 8);

  // The matcher shared by every generation of `grammar` (equal automata are
  // one grammar).
  std::shared_ptr<SharedGrammar> For(std::shared_ptr<const grammar::CompiledGrammar> grammar);
  const Stats& stats() const { return stats_; }

 private:
  struct Entry {
    uint64_t hash;
    std::shared_ptr<SharedGrammar> shared;
  };
  std::shared_ptr<const grammar::TokenTrie> trie_;
  size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
  Stats stats_;
};

// Content hash and equality of compiled grammars (their automata).
uint64_t GrammarHash(const grammar::CompiledGrammar& g);
bool SameGrammar(const grammar::CompiledGrammar& a, const grammar::CompiledGrammar& b);

class TokenConstraint {
 public:
  // Starts at the beginning of the grammar. `tokenizer` (borrowed, outlives
  // this) spells the forced bytes for ForcedTokens.
  TokenConstraint(std::shared_ptr<SharedGrammar> shared, const tokenizer::Tokenizer* tokenizer);

  // `logits` ([n_vocab] of the model, which may be longer than the trie's
  // vocabulary: ids past it are refused) with every token the grammar refuses
  // next at -inf. The span stays valid until the next call. ResourceExhausted
  // when the grammar's automaton outgrows its bounds (SharedGrammar);
  // FailedPrecondition when no token of the vocabulary can continue the text.
  absl::StatusOr<absl::Span<const float>> Apply(absl::Span<const float> logits);
  // Advances by the sampled token `id` (one Apply allowed), and remembers it
  // in SharedGrammar::sampled where the grammar forces bytes. Internal when
  // the grammar refuses it (Apply gave it -inf: a sampler that picks such a
  // token is a bug).
  absl::Status Accept(int32_t id);
  // The text is a complete instance and nothing but an end-of-generation
  // token may follow (or one was accepted): the generation is over.
  absl::StatusOr<bool> Complete();
  // Replaces *tokens with at most `max_tokens` tokens that spell the bytes
  // the grammar forces next (keys, punctuation, enum tails), one state at a
  // time: the token a generation of this grammar last sampled at that state,
  // else the first token of the tokenizer's spelling of the forced bytes;
  // each one allowed after the ones before it. Empty where the grammar leaves
  // a choice. Does not move the position.
  void ForcedTokens(int max_tokens, std::vector<int32_t>* tokens);

  // Masks this generation computed (the others came from the shared cache).
  int64_t masks_computed() const { return masks_computed_; }

 private:
  // Sets the shared matcher to this generation's position.
  grammar::GrammarMatcher& Matcher();
  // SharedGrammar::spelled of the matcher's state, computed once.
  int32_t SpelledAt(grammar::GrammarMatcher& matcher);

  std::shared_ptr<SharedGrammar> shared_;
  const tokenizer::Tokenizer* tokenizer_;
  grammar::GrammarMatcher::Position position_;
  int64_t masks_computed_ = 0;
  std::vector<float> masked_;  // [n_vocab] Apply's output
};

// Drafts of a constrained generation: the tokens its grammar forces next
// (TokenConstraint::ForcedTokens). The constraint advances with the sampled
// tokens only, so a rejected draft never moves it. `constraint` is borrowed
// and outlives the drafter.
class ForcedTokenDrafter : public speculative::Drafter {
 public:
  explicit ForcedTokenDrafter(TokenConstraint* constraint) : constraint_(constraint) {}
  void Accept(absl::Span<const int32_t> tokens) override { (void)tokens; }
  void Propose(int max_tokens, std::vector<int32_t>* draft) override {
    constraint_->ForcedTokens(max_tokens, draft);
  }

 private:
  TokenConstraint* constraint_;
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_TOKEN_CONSTRAINT_H_
