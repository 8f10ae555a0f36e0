#include "model/grammar/grammar_compose.h"

#include <algorithm>
#include <map>
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
    for (OpEdge op : from[i].ops) {
      op.to += base;
      if (op.op == StackOp::kCall) op.ret += base;  // kKey's ret is a flag, not a state
      nfa->AddOp(s, op);
    }
    if (from[i].plain_universal) nfa->MarkPlainUniversal(s);
  }
  return Fragment{base + grammar.start, base + grammar.accept};
}

// Any valid UTF-8 text of min..max code points (max < 0: unbounded).
absl::StatusOr<Fragment> TextRun(int min, int max, ByteNfa* nfa) {
  if (min < 0 || (max >= 0 && max < min)) {
    return absl::InvalidArgumentError(
        absl::StrCat("text bounds must be 0 <= min <= max, got ", min, " and ", max));
  }
  CodepointSet any;
  any.Add(0, 0x10FFFF);
  any.Normalize();
  COLIBRI_ASSIGN_OR_RETURN(Fragment whole, nfa->Empty());
  for (int i = 0; i < min; ++i) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment c, nfa->Utf8(any));
    whole = nfa->Concat(whole, c);
  }
  if (max < 0) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment c, nfa->Utf8(any));
    COLIBRI_ASSIGN_OR_RETURN(Fragment more, nfa->Star(c));
    return nfa->Concat(whole, more);
  }
  // (c (c (...)?)?)? from the last optional character back.
  COLIBRI_ASSIGN_OR_RETURN(Fragment tail, nfa->Empty());
  for (int i = min; i < max; ++i) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment c, nfa->Utf8(any));
    COLIBRI_ASSIGN_OR_RETURN(tail, nfa->Optional(nfa->Concat(c, tail)));
  }
  return nfa->Concat(whole, tail);
}

// Every byte string that contains none of `patterns`: a deterministic
// automaton whose state is the longest suffix read so far that is a proper
// prefix of a pattern (Aho-Corasick without output links: a pattern ending
// at a byte is a suffix of that state's string plus the byte).
absl::StatusOr<Fragment> Avoiding(const std::vector<std::string>& patterns, ByteNfa* nfa) {
  std::map<std::string, StateId> prefixes;
  std::vector<std::string> order;
  for (const std::string& p : patterns) {
    if (p.empty()) return absl::InvalidArgumentError("an excluded string is empty");
    for (size_t n = 0; n < p.size(); ++n) {
      if (prefixes.emplace(p.substr(0, n), 0).second) order.push_back(p.substr(0, n));
    }
  }
  for (const std::string& s : order) {
    COLIBRI_ASSIGN_OR_RETURN(prefixes[s], nfa->AddState());
  }
  COLIBRI_ASSIGN_OR_RETURN(const StateId out, nfa->AddState());
  const auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(),
                                                  suffix) == 0;
  };
  for (const std::string& s : order) {
    const StateId from = prefixes[s];
    nfa->AddEpsilon(from, out);
    // Successive bytes with the same successor share one edge.
    int run_lo = -1;
    StateId run_to = 0;
    for (int b = 0; b <= 256; ++b) {
      bool allowed = false;
      StateId to = 0;
      if (b < 256) {
        const std::string next = s + static_cast<char>(b);
        allowed = true;
        for (const std::string& p : patterns) allowed = allowed && !ends_with(next, p);
        if (allowed) {
          for (size_t k = std::min(next.size(), s.size() + 1);; --k) {
            auto it = prefixes.find(next.substr(next.size() - k));
            if (it != prefixes.end()) {
              to = it->second;
              break;
            }
          }
        }
      }
      if (run_lo >= 0 && (!allowed || to != run_to)) {
        nfa->AddEdge(from, static_cast<uint8_t>(run_lo), static_cast<uint8_t>(b - 1), run_to);
        run_lo = -1;
      }
      if (allowed && run_lo < 0) {
        run_lo = b;
        run_to = to;
      }
    }
  }
  return Fragment{prefixes[""], out};
}

absl::StatusOr<Fragment> Piece(const GrammarPart& part, ByteNfa* nfa,
                               uint64_t* max_call_level) {
  Fragment piece;
  if (part.grammar != nullptr) {
    COLIBRI_ASSIGN_OR_RETURN(piece, CopyInto(*part.grammar, nfa, max_call_level));
  } else if (part.text) {
    COLIBRI_ASSIGN_OR_RETURN(piece, TextRun(part.text_min, part.text_max, nfa));
  } else {
    COLIBRI_ASSIGN_OR_RETURN(piece, nfa->Literal(part.literal));
  }
  if (part.excluding.empty()) return piece;
  COLIBRI_ASSIGN_OR_RETURN(Fragment allowed, Avoiding(part.excluding, nfa));
  return nfa->Intersect(piece, allowed);
}

absl::StatusOr<Fragment> Sequence(const GrammarSequence& parts, ByteNfa* nfa,
                                  uint64_t* max_call_level) {
  COLIBRI_ASSIGN_OR_RETURN(Fragment whole, nfa->Empty());
  for (const GrammarPart& part : parts) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment piece, Piece(part, nfa, max_call_level));
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
