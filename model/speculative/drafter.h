// Drafters for speculative decoding: cheap guesses of the tokens that follow a
// sequence, which the generation loop then verifies with the model in one
// forward (coordinator/generation/generation_scheduler.h). A guess only costs time: the
// verification keeps the output exactly what plain decoding gives, whatever
// a drafter proposes.
//
// Implementations: NgramDrafter (prompt lookup, model/speculative/
// ngram_drafter.h). A draft model or a model's own MTP / NextN layer fit the
// same interface: they see the same history and propose the same way.
//
// Thread-safety: none; one drafter per sequence.
#ifndef COLIBRI_MODEL_SPECULATIVE_DRAFTER_H_
#define COLIBRI_MODEL_SPECULATIVE_DRAFTER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace colibri::speculative {

class Drafter {
 public:
  virtual ~Drafter() = default;

  // Appends tokens to the sequence the drafter continues: the prompt first,
  // then each generated token once it is final (never a rejected draft).
  virtual void Accept(absl::Span<const int32_t> tokens) = 0;

  // Replaces *draft with at most max_tokens tokens guessed to follow the
  // sequence accepted so far (empty when the drafter has no guess or
  // max_tokens <= 0).
  virtual void Propose(int max_tokens, std::vector<int32_t>* draft) = 0;

  // Whether Propose runs a model, so that its time grows with max_tokens and
  // counts in what a draft costs (a caller then asks only for the drafts it
  // will evaluate). Default: false (a lookup, nearly free).
  virtual bool ProposeIsCostly() const { return false; }
};

}  // namespace colibri::speculative

#endif  // COLIBRI_MODEL_SPECULATIVE_DRAFTER_H_
