#include "model/grammar/lazy_dfa.h"

#include <algorithm>

namespace colibri::grammar {

LazyDfa::LazyDfa(const CompiledGrammar& grammar, size_t max_states)
    : grammar_(grammar), max_states_(std::max<size_t>(max_states, 2)) {
  mark_.assign(grammar_.nfa.size(), 0);
  // State 0 is the dead state: every byte leads back to it.
  sets_.emplace_back();
  accepting_.push_back(false);
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
  transitions_.resize(transitions_.size() + 256, -1);
  ids_.emplace(kept, id);
  sets_.push_back(std::move(kept));
  return id;
}

int32_t LazyDfa::Compute(int32_t state, uint8_t byte) {
  const std::vector<NfaState>& states = grammar_.nfa.states();
  std::vector<StateId> seeds;
  for (StateId s : sets_[state]) {
    for (const ByteEdge& e : states[s].edges) {
      if (byte >= e.lo && byte <= e.hi) seeds.push_back(e.to);
    }
  }
  const int32_t next = seeds.empty() ? kDead : Intern(seeds);
  // An overflow answers kDead without remembering it, so the answer is not
  // taken for the grammar's.
  if (!overflowed_) transitions_[static_cast<size_t>(state) * 256 + byte] = next;
  return next;
}

}  // namespace colibri::grammar
