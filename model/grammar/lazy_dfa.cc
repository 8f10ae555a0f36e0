#include "model/grammar/lazy_dfa.h"

#include <algorithm>

namespace colibri::grammar {

LazyDfa::LazyDfa(const CompiledGrammar& grammar, size_t max_states)
    : grammar_(grammar), max_states_(std::max<size_t>(max_states, 2)) {
  mark_.assign(grammar_.nfa.size(), 0);
  // State 0 is the dead state: every byte leads back to it.
  sets_.emplace_back();
  accepting_.push_back(false);
  exits_.push_back(0);
  transitions_.assign(256, kDead);
  ids_[{}] = kDead;
  start_ = Intern({grammar_.start});
}

int32_t LazyDfa::Intern(const std::vector<StateId>& seeds) {
  const std::vector<NfaState>& states = grammar_.nfa.states();
  ++stamp_;
  todo_.clear();
  std::vector<StateId> kept;
  for (StateId s : seeds) {
    if (mark_[s] != stamp_) {
      mark_[s] = stamp_;
      todo_.push_back(s);
    }
  }
  while (!todo_.empty()) {
    const StateId s = todo_.back();
    todo_.pop_back();
    if (!states[s].edges.empty() || s == grammar_.accept) kept.push_back(s);
    for (StateId t : states[s].epsilon) {
      if (mark_[t] != stamp_) {
        mark_[t] = stamp_;
        todo_.push_back(t);
      }
    }
  }
  std::sort(kept.begin(), kept.end());
  auto it = ids_.find(kept);
  if (it != ids_.end()) return it->second;
  if (sets_.size() >= max_states_) {
    overflowed_ = true;
    return kDead;
  }
  const auto id = static_cast<int32_t>(sets_.size());
  accepting_.push_back(std::binary_search(kept.begin(), kept.end(), grammar_.accept));
  exits_.push_back(0);
  transitions_.resize(transitions_.size() + 256, -1);
  ids_.emplace(kept, id);
  sets_.push_back(std::move(kept));
  return id;
}

void LazyDfa::ComputeRow(int32_t state) {
  const std::vector<NfaState>& states = grammar_.nfa.states();
  std::vector<ByteEdge> edges;
  for (StateId s : sets_[state]) {
    edges.insert(edges.end(), states[s].edges.begin(), states[s].edges.end());
  }
  // Class boundaries: every edge starts a class and ends one.
  std::vector<int> cuts = {0, 256};
  for (const ByteEdge& e : edges) {
    cuts.push_back(e.lo);
    cuts.push_back(e.hi + 1);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // Rows of states interned below are appended: index by offset, not pointer.
  const size_t row = static_cast<size_t>(state) * 256;
  uint8_t exits = 0;
  std::vector<StateId> seeds;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int lo = cuts[c];
    const int hi = cuts[c + 1] - 1;
    seeds.clear();
    for (const ByteEdge& e : edges) {
      if (lo >= e.lo && lo <= e.hi) seeds.push_back(e.to);
    }
    const int32_t next = seeds.empty() ? kDead : Intern(seeds);
    // An overflow answers kDead for now without making it the grammar's answer
    // for good: overflowed() stays true and the matcher fails.
    for (int b = lo; b <= hi; ++b) {
      transitions_[row + static_cast<size_t>(b)] = next;
      if (next == kDead) continue;
      exits |= kAnyExit;
      if (b >= 0x20 && b != '"' && b != '\\') exits |= kPlainExit;
    }
  }
  exits_[state] = exits;
}

}  // namespace colibri::grammar
