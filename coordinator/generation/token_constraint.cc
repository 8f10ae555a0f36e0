#include "coordinator/generation/token_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::coordinator {
namespace {

// A generation's automaton and mask cache on the stepping thread: at most
// 16 MiB of transitions and 512 masks (9.5 MiB at a 151k vocabulary), so a
// hostile grammar fails its own generation (ResourceExhausted) instead of
// growing without bound.
grammar::MatcherOptions MatcherBounds() {
  grammar::MatcherOptions options;
  options.max_dfa_states = 16384;
  options.max_cached_masks = 512;
  return options;
}

}  // namespace

TokenConstraint::TokenConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                 std::shared_ptr<const grammar::TokenTrie> trie)
    : matcher_(std::move(grammar), trie, MatcherBounds()), trie_(std::move(trie)) {}

absl::StatusOr<absl::Span<const float>> TokenConstraint::Apply(absl::Span<const float> logits) {
  COLIBRI_ASSIGN_OR_RETURN(const grammar::TokenBitmask* mask, matcher_.ComputeMask());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  masked_.assign(logits.size(), kNegInf);
  const std::vector<uint64_t>& words = mask->words();
  bool any = false;
  for (size_t w = 0; w < words.size(); ++w) {
    for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
      const size_t id = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
      if (id >= logits.size()) break;
      masked_[id] = logits[id];
      any = true;
    }
  }
  if (!any) {
    return absl::FailedPreconditionError(
        "constrained decoding: no token of the vocabulary continues the grammar here");
  }
  return absl::MakeConstSpan(masked_);
}

absl::Status TokenConstraint::Accept(int32_t id) {
  const absl::Status accepted = matcher_.AcceptToken(id);
  if (!accepted.ok()) {
    return absl::InternalError(
        absl::StrCat("constrained decoding: the grammar refused sampled token ", id, ": ",
                     accepted.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TokenConstraint::Complete() {
  if (matcher_.IsFinished()) return true;
  if (!matcher_.IsAccepting()) return false;
  COLIBRI_ASSIGN_OR_RETURN(const grammar::TokenBitmask* mask, matcher_.ComputeMask());
  size_t end_tokens = 0;
  for (int32_t id : trie_->end_of_generation()) end_tokens += mask->Allowed(id) ? 1 : 0;
  return mask->Count() == end_tokens;
}

}  // namespace colibri::coordinator
