#include "model/grammar/lazy_dfa.h"

#include <algorithm>

namespace colibri::grammar {

LazyDfa::LazyDfa(const CompiledGrammar& grammar, size_t max_states, bool track_keys)
    : grammar_(grammar), max_states_(std::max<size_t>(max_states, 2)), track_keys_(track_keys) {
  stacks_.push_back(StackNode{-1, Frame{kNoReturn, 0}});
  // State 0 is the dead state: every byte leads back to it.
  sets_.emplace_back();
  accepting_.push_back(false);
  universal_.push_back(false);
  exits_.push_back(0);
  transitions_.assign(256, kDead);
  key_steps_.assign(256, 0);
  ids_[{}] = kDead;
  start_ = Intern({Position(grammar_.start, 0)});
}

int32_t LazyDfa::Push(int32_t parent, Frame top) {
  auto [it, inserted] = stack_ids_.try_emplace(std::make_tuple(parent, top.ret, top.bits),
                                               static_cast<int32_t>(stacks_.size()));
  if (inserted) stacks_.push_back(StackNode{parent, top});
  return it->second;
}

int32_t LazyDfa::Intern(const std::vector<uint64_t>& seeds) {
  const std::vector<NfaState>& states = grammar_.nfa.states();
  seen_.clear();
  todo_.clear();
  key_step_ = 0;
  bool universal = false;
  std::vector<uint64_t> kept;
  auto visit = [&](StateId s, int32_t stack) {
    const uint64_t p = Position(s, stack);
    if (seen_.insert(p).second) todo_.push_back(p);
  };
  for (uint64_t p : seeds) visit(static_cast<StateId>(p >> 32), static_cast<int32_t>(p));
  while (!todo_.empty()) {
    const uint64_t p = todo_.back();
    todo_.pop_back();
    const auto s = static_cast<StateId>(p >> 32);
    const auto stack = static_cast<int32_t>(p & 0xFFFFFFFFu);
    const NfaState& state = states[s];
    universal |= state.plain_universal;
    if (!state.edges.empty() || (s == grammar_.accept && stack == 0)) kept.push_back(p);
    for (StateId t : state.epsilon) visit(t, stack);
    const StackNode node = stacks_[stack];  // a copy: Push() may grow stacks_
    const bool call_on_top = stack != 0 && node.top.ret != kNoReturn;
    const bool keys_on_top = stack != 0 && node.top.ret == kNoReturn;
    for (const OpEdge& op : state.ops) {
      switch (op.op) {
        case StackOp::kCall: {
          const uint64_t level = op.arg + (op.arg != 0 && call_on_top ? node.top.bits : 0);
          if (level <= grammar_.max_call_level) visit(op.to, Push(stack, Frame{op.ret, level}));
          break;
        }
        case StackOp::kReturn:
          if (call_on_top) visit(node.top.ret, node.parent);
          break;
        case StackOp::kOpenKeys:
          visit(op.to, Push(stack, Frame{kNoReturn, 0}));
          break;
        case StackOp::kKey:
          if (!keys_on_top) break;
          key_step_ |= op.ret == 1 ? kAny : kAny | kHard;
          if (!track_keys_) {
            visit(op.to, stack);
          } else if ((node.top.bits & op.arg) == 0) {
            visit(op.to, Push(node.parent, Frame{kNoReturn, node.top.bits | op.arg}));
          }
          break;
        case StackOp::kCloseKeys:
          if (!keys_on_top) break;
          key_step_ |= kAny | kHard;
          if (!track_keys_ || (node.top.bits & op.arg) == op.arg) visit(op.to, node.parent);
          break;
      }
    }
  }
  std::sort(kept.begin(), kept.end());
  auto it = ids_.find(kept);
  if (it != ids_.end()) {
    // Equal kept positions have the same continuations: a closure that met a
    // universal state proves it for the state.
    if (universal) universal_[it->second] = true;
    return it->second;
  }
  if (sets_.size() >= max_states_) {
    overflowed_ = true;
    return kDead;
  }
  const auto id = static_cast<int32_t>(sets_.size());
  accepting_.push_back(std::binary_search(kept.begin(), kept.end(), Position(grammar_.accept, 0)));
  universal_.push_back(universal);
  exits_.push_back(0);
  transitions_.resize(transitions_.size() + 256, -1);
  key_steps_.resize(key_steps_.size() + 256, 0);
  ids_.emplace(kept, id);
  sets_.push_back(std::move(kept));
  return id;
}

int32_t LazyDfa::ImportStack(const LazyDfa& other, int32_t stack) {
  if (stack == 0) return 0;
  auto it = imported_stacks_.find(stack);
  if (it != imported_stacks_.end()) return it->second;
  const StackNode& node = other.stacks_[stack];
  Frame top = node.top;
  if (top.ret == kNoReturn && !track_keys_) top.bits = 0;
  const int32_t id = Push(ImportStack(other, node.parent), top);
  imported_stacks_.emplace(stack, id);
  return id;
}

int32_t LazyDfa::Import(const LazyDfa& other, int32_t state, bool* key_step) {
  std::vector<uint64_t> seeds;
  for (uint64_t p : other.sets_[state]) {
    const auto stack = static_cast<int32_t>(p & 0xFFFFFFFFu);
    seeds.push_back(Position(static_cast<StateId>(p >> 32), ImportStack(other, stack)));
  }
  if (seeds.empty()) {
    *key_step = false;
    return kDead;
  }
  const int32_t id = Intern(seeds);
  *key_step = key_step_ != 0;
  return id;
}

void LazyDfa::ComputeRow(int32_t state) {
  const std::vector<NfaState>& states = grammar_.nfa.states();
  // Edges of every position, with the position's stack.
  struct StackEdge {
    ByteEdge edge;
    int32_t stack;
  };
  std::vector<StackEdge> edges;
  for (uint64_t p : sets_[state]) {
    const auto stack = static_cast<int32_t>(p & 0xFFFFFFFFu);
    for (const ByteEdge& e : states[p >> 32].edges) edges.push_back({e, stack});
  }
  // Class boundaries: every edge starts a class and ends one.
  std::vector<int> cuts = {0, 256};
  for (const StackEdge& e : edges) {
    cuts.push_back(e.edge.lo);
    cuts.push_back(e.edge.hi + 1);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // Rows of states interned below are appended: index by offset, not pointer.
  const size_t row = static_cast<size_t>(state) * 256;
  uint8_t exits = 0;
  std::vector<uint64_t> seeds;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int lo = cuts[c];
    const int hi = cuts[c + 1] - 1;
    seeds.clear();
    for (const StackEdge& e : edges) {
      if (lo >= e.edge.lo && lo <= e.edge.hi) seeds.push_back(Position(e.edge.to, e.stack));
    }
    const int32_t next = seeds.empty() ? kDead : Intern(seeds);
    const uint8_t key_step = seeds.empty() ? 0 : key_step_;
    // An overflow answers kDead for now without making it the grammar's answer
    // for good: overflowed() stays true and the matcher fails.
    for (int b = lo; b <= hi; ++b) {
      transitions_[row + static_cast<size_t>(b)] = next;
      key_steps_[row + static_cast<size_t>(b)] = key_step;
      if (next == kDead) continue;
      exits |= kAnyExit;
      if (b >= 0x20 && b != '"' && b != '\\') exits |= kPlainExit;
    }
  }
  exits_[state] = exits;
}

}  // namespace colibri::grammar
