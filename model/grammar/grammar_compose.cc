#include "model/grammar/grammar_compose.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::grammar {
namespace {

// Copies `grammar`'s automaton into `nfa` (its states renumbered after the
// ones there) and returns the copy's entry and accept states as a fragment.
// The copy's accept state may have edges of its own (the source's accept
// state is not required to be a sink), which Thompson linking tolerates: an
// epsilon out of it adds continuations, it never removes any. Stack moves are
// copied along; `*max_call_level` becomes the smaller of it and the source's.
absl::StatusOr<Fragment> CopyInto(const CompiledGrammar& grammar, ByteNfa* nfa,
                                  uint64_t* max_call_level) {
  *max_call_level = std::min(*max_call_level, grammar.max_call_level);
  const std::vector<NfaState>& from = grammar.nfa.states();
  if (nfa->size() + from.size() > nfa->max_states()) {
    return absl::ResourceExhaustedError(absl::StrCat("the composed grammar needs more than ",
                                                     nfa->max_states(), " automaton states"));
  }
  const StateId base = static_cast<StateId>(nfa->size());
  for (size_t i = 0; i < from.size(); ++i) COLIBRI_RETURN_IF_ERROR(nfa->AddState().status());
  for (size_t i = 0; i < from.size(); ++i) {
    const StateId s = base + static_cast<StateId>(i);
    for (const ByteEdge& e : from[i].edges) nfa->AddEdge(s, e.lo, e.hi, base + e.to);
    for (StateId t : from[i].epsilon) nfa->AddEpsilon(s, base + t);
    if (from[i].plain_universal) nfa->MarkPlainUniversal(s);
    for (OpEdge op : from[i].ops) {
      op.to += base;
      if (op.op == StackOp::kCall) op.ret += base;  // kKey's ret is a flag, not a state
      nfa->AddOp(s, op);
    }
  }
  return Fragment{base + grammar.start, base + grammar.accept};
}

absl::StatusOr<Fragment> Sequence(const GrammarSequence& parts, ByteNfa* nfa,
                                  uint64_t* max_call_level) {
  COLIBRI_ASSIGN_OR_RETURN(Fragment whole, nfa->Empty());
  for (const GrammarPart& part : parts) {
    Fragment piece;
    if (part.grammar != nullptr) {
      COLIBRI_ASSIGN_OR_RETURN(piece, CopyInto(*part.grammar, nfa, max_call_level));
    } else {
      COLIBRI_ASSIGN_OR_RETURN(piece, nfa->Literal(part.literal));
    }
    whole = nfa->Concat(whole, piece);
  }
  return whole;
}

absl::StatusOr<Fragment> Union(const std::vector<GrammarSequence>& alternatives, ByteNfa* nfa,
                               uint64_t* max_call_level) {
  std::vector<Fragment> parts;
  for (const GrammarSequence& sequence : alternatives) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, Sequence(sequence, nfa, max_call_level));
    parts.push_back(f);
  }
  return nfa->Alternate(parts);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> ComposeGrammar(
    const std::vector<GrammarSequence>& alternatives, const ComposeOptions& options) {
  if (alternatives.empty()) return absl::InvalidArgumentError("a grammar needs an alternative");
  if (options.min_repeats < 1 || options.max_repeats < options.min_repeats) {
    return absl::InvalidArgumentError(absl::StrCat("repeat bounds must be 1 <= min <= max, got ",
                                                   options.min_repeats, " and ",
                                                   options.max_repeats));
  }
  ByteNfa nfa(options.max_nfa_states);
  uint64_t max_call_level = CompiledGrammar(ByteNfa(0)).max_call_level;
  // Each repetition is a fresh copy of the union: the automaton of r
  // repetitions is r times the union's, and a repetition past min_repeats
  // is optional along with every later one.
  COLIBRI_ASSIGN_OR_RETURN(Fragment whole, Union(alternatives, &nfa, &max_call_level));
  for (int r = 1; r < options.min_repeats; ++r) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment sep, nfa.Literal(options.separator));
    COLIBRI_ASSIGN_OR_RETURN(Fragment next, Union(alternatives, &nfa, &max_call_level));
    whole = nfa.Concat(whole, nfa.Concat(sep, next));
  }
  // Optional tail, built from the last repetition back: (sep U tail?)?
  if (options.max_repeats > options.min_repeats) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment tail, nfa.Empty());
    bool has_tail = false;
    for (int r = options.min_repeats; r < options.max_repeats; ++r) {
      COLIBRI_ASSIGN_OR_RETURN(Fragment sep, nfa.Literal(options.separator));
      COLIBRI_ASSIGN_OR_RETURN(Fragment next, Union(alternatives, &nfa, &max_call_level));
      Fragment step = nfa.Concat(sep, next);
      if (has_tail) step = nfa.Concat(step, tail);
      COLIBRI_ASSIGN_OR_RETURN(tail, nfa.Optional(step));
      has_tail = true;
    }
    whole = nfa.Concat(whole, tail);
  }
  if (!NfaAcceptsSomething(nfa, whole.in, whole.out)) {
    return absl::InvalidArgumentError("the composed grammar accepts nothing");
  }
  auto grammar = std::make_shared<CompiledGrammar>(std::move(nfa));
  grammar->start = whole.in;
  grammar->accept = whole.out;
  grammar->max_call_level = max_call_level;
  return std::shared_ptr<const CompiledGrammar>(std::move(grammar));
}

}  // namespace colibri::grammar
