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
  masked_.resize(logits.size());
  const std::vector<uint64_t>& words = mask->words();
  const size_t n = logits.size();
  bool any = false;
  // A word at a time: whole runs of 64 allowed (string text) or refused
  // tokens are one copy or one fill.
  for (size_t w = 0; w * 64 < n; ++w) {
    const size_t begin = w * 64;
    const size_t end = std::min(n, begin + 64);
    const uint64_t bits = w < words.size() ? words[w] : 0;
    if (bits == 0) {
      std::fill(masked_.begin() + begin, masked_.begin() + end, kNegInf);
      continue;
    }
    any = true;
    if (bits == ~uint64_t{0}) {
      std::copy(logits.begin() + begin, logits.begin() + end, masked_.begin() + begin);
      continue;
    }
    for (size_t id = begin; id < end; ++id) {
      masked_[id] = ((bits >> (id - begin)) & 1) != 0 ? logits[id] : kNegInf;
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
