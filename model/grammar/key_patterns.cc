#include "model/grammar/key_patterns.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace colibri::grammar {
namespace {

// The patterns' deterministic automaton: each state a sorted set of NFA
// states, its transitions as disjoint byte ranges, and the patterns whose
// final state it holds.
struct PatternDfa {
  struct Range {
    uint8_t lo, hi;
    int32_t to;
  };
  std::vector<std::vector<StateId>> sets;
  std::vector<std::vector<Range>> rows;
  std::vector<uint64_t> matched;
};

absl::StatusOr<PatternDfa> Determinize(const ByteNfa& nfa, const std::vector<Fragment>& patterns,
                                       size_t max_states) {
  const std::vector<NfaState>& states = nfa.states();
  PatternDfa dfa;
  absl::flat_hash_map<std::vector<StateId>, int32_t> ids;
  std::vector<bool> seen(nfa.size(), false);
  // Interns the epsilon closure of `seeds`.
  auto intern = [&](std::vector<StateId> todo) -> absl::StatusOr<int32_t> {
    std::vector<StateId> set;
    for (StateId s : todo) seen[s] = true;
    while (!todo.empty()) {
      const StateId s = todo.back();
      todo.pop_back();
      set.push_back(s);
      if (!states[s].ops.empty()) {
        return absl::InvalidArgumentError("a key pattern cannot use stack moves");
      }
      for (StateId t : states[s].epsilon) {
        if (!seen[t]) {
          seen[t] = true;
          todo.push_back(t);
        }
      }
    }
    for (StateId s : set) seen[s] = false;
    std::sort(set.begin(), set.end());
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    if (dfa.sets.size() >= max_states) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the patterns' deterministic automaton needs more than ", max_states, " states"));
    }
    uint64_t matched = 0;
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (std::binary_search(set.begin(), set.end(), patterns[i].out)) matched |= uint64_t{1} << i;
    }
    const auto id = static_cast<int32_t>(dfa.sets.size());
    ids.emplace(set, id);
    dfa.sets.push_back(std::move(set));
    dfa.rows.emplace_back();
    dfa.matched.push_back(matched);
    return id;
  };
  std::vector<StateId> starts;
  for (const Fragment& p : patterns) starts.push_back(p.in);
  if (absl::StatusOr<int32_t> start = intern(starts); !start.ok()) return start.status();
  for (size_t d = 0; d < dfa.sets.size(); ++d) {
    std::vector<ByteEdge> edges;
    for (StateId s : dfa.sets[d]) {
      edges.insert(edges.end(), states[s].edges.begin(), states[s].edges.end());
    }
    std::vector<int> cuts = {0, 256};
    for (const ByteEdge& e : edges) {
      cuts.push_back(e.lo);
      cuts.push_back(e.hi + 1);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<PatternDfa::Range> row;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int lo = cuts[c];
      const int hi = cuts[c + 1] - 1;
      std::vector<StateId> seeds;
      for (const ByteEdge& e : edges) {
        if (lo >= e.lo && lo <= e.hi && !seen[e.to]) {
          seen[e.to] = true;
          seeds.push_back(e.to);
        }
      }
      for (StateId s : seeds) seen[s] = false;
      // The empty set is a state too: no pattern matches from there on.
      absl::StatusOr<int32_t> to = intern(std::move(seeds));
      if (!to.ok()) return to.status();
      if (!row.empty() && row.back().to == *to && row.back().hi + 1 == lo) {
        row.back().hi = static_cast<uint8_t>(hi);
      } else {
        row.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), *to});
      }
    }
    dfa.rows[d] = std::move(row);
  }
  return dfa;
}

}  // namespace

absl::StatusOr<std::vector<KeyClass>> SplitKeysByPatterns(ByteNfa* nfa,
                                                          const std::vector<Fragment>& patterns,
                                                          bool with_unmatched,
                                                          size_t max_dfa_states) {
  if (patterns.size() > 16) {
    return absl::ResourceExhaustedError("more than 16 key patterns to tell apart");
  }
  absl::StatusOr<PatternDfa> made = Determinize(*nfa, patterns, max_dfa_states);
  if (!made.ok()) return made.status();
  const PatternDfa& dfa = *made;
  const size_t n = dfa.sets.size();
  std::vector<std::vector<int32_t>> sources(n);  // reversed transitions
  for (size_t d = 0; d < n; ++d) {
    for (const PatternDfa::Range& r : dfa.rows[d]) sources[r.to].push_back(static_cast<int32_t>(d));
  }
  std::vector<uint64_t> classes(dfa.matched);
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  std::vector<KeyClass> out;
  for (uint64_t matched : classes) {
    if (matched == 0 && !with_unmatched) continue;
    // Only states from which a key of the class can still be completed, so
    // that no byte of the class's automaton leads to a dead end.
    std::vector<bool> live(n, false);
    std::vector<int32_t> todo;
    for (size_t d = 0; d < n; ++d) {
      if (dfa.matched[d] == matched) {
        live[d] = true;
        todo.push_back(static_cast<int32_t>(d));
      }
    }
    while (!todo.empty()) {
      const int32_t d = todo.back();
      todo.pop_back();
      for (int32_t s : sources[d]) {
        if (!live[s]) {
          live[s] = true;
          todo.push_back(s);
        }
      }
    }
    if (!live[0]) continue;  // state 0 is the start
    std::vector<StateId> copy(n, 0);
    for (size_t d = 0; d < n; ++d) {
      if (!live[d]) continue;
      absl::StatusOr<StateId> s = nfa->AddState();
      if (!s.ok()) return s.status();
      copy[d] = *s;
    }
    absl::StatusOr<StateId> end = nfa->AddState();
    if (!end.ok()) return end.status();
    for (size_t d = 0; d < n; ++d) {
      if (!live[d]) continue;
      for (const PatternDfa::Range& r : dfa.rows[d]) {
        if (live[r.to]) nfa->AddEdge(copy[d], r.lo, r.hi, copy[r.to]);
      }
      if (dfa.matched[d] == matched) nfa->AddEpsilon(copy[d], *end);
    }
    out.push_back({matched, Fragment{copy[0], *end}});
  }
  return out;
}

}  // namespace colibri::grammar
