#include "coordinator/generation/token_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::coordinator {
namespace {

grammar::MatcherOptions MatcherBounds() {
  grammar::MatcherOptions options;
  options.max_dfa_states = 16384;
  options.max_cached_masks = 512;
  return options;
}

// States SharedGrammar's token maps keep; a map restarts when full.
constexpr size_t kMaxTokenStates = 4096;
// Forced bytes spelled per state.
constexpr size_t kMaxForcedBytes = 64;

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

SharedGrammar::SharedGrammar(std::shared_ptr<const grammar::CompiledGrammar> g,
                             std::shared_ptr<const grammar::TokenTrie> t)
    : grammar(g), trie(t), matcher(std::move(g), std::move(t), MatcherBounds()) {}

uint64_t GrammarHash(const grammar::CompiledGrammar& g) {
  uint64_t h = Mix(Mix(0, g.start), g.accept);
  for (const grammar::NfaState& s : g.nfa.states()) {
    h = Mix(h, s.edges.size());
    for (const grammar::ByteEdge& e : s.edges)
      h = Mix(h, (uint64_t{e.lo} << 40) | (uint64_t{e.hi} << 32) | e.to);
    h = Mix(h, s.epsilon.size());
    for (grammar::StateId to : s.epsilon) h = Mix(h, to);
    h = Mix(h, s.ops.size());
    for (const grammar::OpEdge& op : s.ops) {
      h = Mix(Mix(Mix(h, static_cast<uint64_t>(op.op)), (uint64_t{op.to} << 32) | op.ret), op.arg);
    }
  }
  return Mix(h, g.max_call_level);
}

bool SameGrammar(const grammar::CompiledGrammar& a, const grammar::CompiledGrammar& b) {
  if (a.start != b.start || a.accept != b.accept || a.max_call_level != b.max_call_level) {
    return false;
  }
  const std::vector<grammar::NfaState>& x = a.nfa.states();
  const std::vector<grammar::NfaState>& y = b.nfa.states();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].epsilon != y[i].epsilon || x[i].edges.size() != y[i].edges.size() ||
        x[i].ops.size() != y[i].ops.size()) {
      return false;
    }
    for (size_t k = 0; k < x[i].ops.size(); ++k) {
      const grammar::OpEdge& e = x[i].ops[k];
      const grammar::OpEdge& f = y[i].ops[k];
      if (e.op != f.op || e.to != f.to || e.ret != f.ret || e.arg != f.arg) return false;
    }
    for (size_t k = 0; k < x[i].edges.size(); ++k) {
      const grammar::ByteEdge& e = x[i].edges[k];
      const grammar::ByteEdge& f = y[i].edges[k];
      if (e.lo != f.lo || e.hi != f.hi || e.to != f.to) return false;
    }
  }
  return true;
}

GrammarCache::GrammarCache(std::shared_ptr<const grammar::TokenTrie> trie, size_t capacity)
    : trie_(std::move(trie)), capacity_(std::max<size_t>(1, capacity)) {}

std::shared_ptr<SharedGrammar> GrammarCache::For(
    std::shared_ptr<const grammar::CompiledGrammar> grammar) {
  const uint64_t hash = GrammarHash(*grammar);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->hash != hash) continue;
    if (it->shared->grammar != grammar && !SameGrammar(*it->shared->grammar, *grammar)) continue;
    if (it->shared->matcher.overflowed()) {  // a fresh automaton for the next ones
      entries_.erase(it);
      break;
    }
    entries_.splice(entries_.begin(), entries_, it);
    ++stats_.hits;
    return it->shared;
  }
  ++stats_.misses;
  entries_.push_front({hash, std::make_shared<SharedGrammar>(std::move(grammar), trie_)});
  if (entries_.size() > capacity_) entries_.pop_back();
  stats_.grammars = static_cast<int64_t>(entries_.size());
  return entries_.front().shared;
}

TokenConstraint::TokenConstraint(std::shared_ptr<SharedGrammar> shared,
                                 const tokenizer::Tokenizer* tokenizer)
    : shared_(std::move(shared)), tokenizer_(tokenizer) {
  shared_->matcher.Reset();
  position_ = shared_->matcher.position();
}

grammar::GrammarMatcher& TokenConstraint::Matcher() {
  shared_->matcher.set_position(position_);
  return shared_->matcher;
}

absl::StatusOr<absl::Span<const float>> TokenConstraint::Apply(absl::Span<const float> logits) {
  grammar::GrammarMatcher& matcher = Matcher();
  const uint64_t computed = matcher.masks_computed();
  COLIBRI_ASSIGN_OR_RETURN(const grammar::TokenBitmask* mask, matcher.ComputeMask());
  masks_computed_ += static_cast<int64_t>(matcher.masks_computed() - computed);
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
  grammar::GrammarMatcher& matcher = Matcher();
  if (!position_.finished) {
    auto spelled = shared_->spelled.find(position_.state);
    if (spelled != shared_->spelled.end() && spelled->second >= 0) {
      if (shared_->sampled.size() >= kMaxTokenStates) shared_->sampled.clear();
      shared_->sampled[position_.state] = id;
    }
  }
  const absl::Status accepted = matcher.AcceptToken(id);
  if (!accepted.ok()) {
    return absl::InternalError(absl::StrCat(
        "constrained decoding: the grammar refused sampled token ", id, ": ", accepted.message()));
  }
  position_ = matcher.position();
  return absl::OkStatus();
}

absl::StatusOr<bool> TokenConstraint::Complete() {
  grammar::GrammarMatcher& matcher = Matcher();
  if (matcher.IsFinished()) return true;
  if (!matcher.IsAccepting()) return false;
  const uint64_t computed = matcher.masks_computed();
  COLIBRI_ASSIGN_OR_RETURN(const grammar::TokenBitmask* mask, matcher.ComputeMask());
  masks_computed_ += static_cast<int64_t>(matcher.masks_computed() - computed);
  size_t end_tokens = 0;
  for (int32_t id : shared_->trie->end_of_generation()) end_tokens += mask->Allowed(id) ? 1 : 0;
  return mask->Count() == end_tokens;
}

int32_t TokenConstraint::SpelledAt(grammar::GrammarMatcher& matcher) {
  const int32_t state = matcher.position().state;
  auto memo = shared_->spelled.find(state);
  if (memo != shared_->spelled.end()) return memo->second;
  int32_t first = -1;
  const std::string bytes = matcher.ForcedBytes(kMaxForcedBytes);
  if (!bytes.empty()) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(bytes, {});
    if (ids.ok() && !ids->empty()) {
      const std::string& piece = shared_->trie->piece(ids->front());
      // A prefix of the forced bytes, short of all of them when they were
      // cut (it might merge with the bytes after the cut).
      const bool whole = piece.size() == bytes.size() && bytes.size() == kMaxForcedBytes;
      if (!piece.empty() && !whole && bytes.compare(0, piece.size(), piece) == 0) {
        first = ids->front();
      }
    }
  }
  if (shared_->spelled.size() >= kMaxTokenStates) shared_->spelled.clear();
  shared_->spelled.emplace(state, first);
  return first;
}

void TokenConstraint::ForcedTokens(int max_tokens, std::vector<int32_t>* tokens) {
  tokens->clear();
  if (tokenizer_ == nullptr || position_.finished) return;
  grammar::GrammarMatcher& matcher = Matcher();
  while (static_cast<int>(tokens->size()) < max_tokens && !matcher.IsFinished()) {
    int32_t token = SpelledAt(matcher);
    if (token < 0) break;
    auto sampled = shared_->sampled.find(matcher.position().state);
    if (sampled != shared_->sampled.end()) token = sampled->second;
    if (shared_->trie->IsEndOfGeneration(token) || !matcher.AcceptToken(token).ok()) break;
    tokens->push_back(token);
  }
  matcher.set_position(position_);
}

}  // namespace colibri::coordinator
