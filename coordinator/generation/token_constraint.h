// A generation's grammar constraint as the scheduler applies it: the logits
// of the tokens the grammar refuses next set to -inf before sampling, and the
// sampled token fed to the grammar after it (grammar::GrammarMatcher over a
// TokenTrie of the served vocabulary).
//
// Thread-safety: none (one generation's state, on the stepping thread); the
// grammar and the trie are immutable and shared.
#ifndef COLIBRI_COORDINATOR_GENERATION_TOKEN_CONSTRAINT_H_
#define COLIBRI_COORDINATOR_GENERATION_TOKEN_CONSTRAINT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/grammar/grammar_matcher.h"
#include "model/grammar/token_trie.h"

namespace colibri::coordinator {

class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                  std::shared_ptr<const grammar::TokenTrie> trie);

  // `logits` ([n_vocab] of the model, which may be longer than the trie's
  // vocabulary: ids past it are refused) with every token the grammar refuses
  // next at -inf. The span stays valid until the next call. ResourceExhausted
  // when the grammar's automaton outgrows its bounds (16,384 DFA states; 512
  // masks cached, then the cache restarts); FailedPrecondition when
  // no token of the vocabulary can continue the text.
  absl::StatusOr<absl::Span<const float>> Apply(absl::Span<const float> logits);
  // Advances by the sampled token `id` (one Apply allowed). Internal when
  // the grammar refuses it (Apply gave it -inf: a sampler that picks such a
  // token is a bug).
  absl::Status Accept(int32_t id);
  // The text is a complete instance and nothing but an end-of-generation
  // token may follow (or one was accepted): the generation is over.
  absl::StatusOr<bool> Complete();

 private:
  grammar::GrammarMatcher matcher_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  std::vector<float> masked_;  // [n_vocab] Apply's output
};

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_GENERATION_TOKEN_CONSTRAINT_H_
