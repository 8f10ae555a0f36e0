#include "model/grammar/grammar_matcher.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace colibri::grammar {

size_t TokenBitmask::Count() const {
  size_t n = 0;
  for (uint64_t w : words_) n += static_cast<size_t>(__builtin_popcountll(w));
  return n;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                               std::shared_ptr<const TokenTrie> trie, const MatcherOptions& options)
    : grammar_(std::move(grammar)),
      trie_(std::move(trie)),
      options_(options),
      dfa_(*grammar_, options.max_dfa_states),
      loose_(*grammar_, options.max_dfa_states, /*track_keys=*/false),
      state_(dfa_.start()) {
  walk_.assign(trie_->max_depth() + 1, LazyDfa::kDead);
  exact_.assign(trie_->max_depth() + 1, 0);
  bytes_.assign(trie_->max_depth() + 1, 0);
}

absl::Status GrammarMatcher::CheckOverflow() const {
  if (!dfa_.overflowed() && !loose_.overflowed()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the grammar's automaton needs more than ", options_.max_dfa_states, " states"));
}

absl::StatusOr<const TokenBitmask*> GrammarMatcher::ComputeMask() {
  if (finished_) return absl::FailedPreconditionError("the text has ended");
  auto it = masks_.find(state_);
  if (it != masks_.end()) return it->second.get();
  const int32_t loose = LooseState();
  if (loose != kNoLoose) {
    auto shared = loose_masks_.find(loose);
    if (shared != loose_masks_.end()) return shared->second.get();
  }
  if (masks_.size() + loose_masks_.size() >= options_.max_cached_masks) {
    masks_.clear();
    loose_masks_.clear();
  }
  ++masks_computed_;
  auto mask = std::make_unique<TokenBitmask>(trie_->n_vocab());
  const int level = loose != kNoLoose ? PlainLevel(loose_, loose, &loose_plain_level_)
                                      : PlainLevel(dfa_, state_, &plain_level_);
  bool exact = loose == kNoLoose;
  if (level == kUnbounded) {
    mask->AllowAll(trie_->plain_all());
  } else {
    mask->AllowAll(trie_->plain_upto(level));
    exact |= Walk(trie_->plain(), loose, level, mask.get());
  }
  exact |= Walk(trie_->other(), loose, -1, mask.get());
  if (absl::Status s = CheckOverflow(); !s.ok()) return s;
  if (dfa_.IsAccepting(state_)) {
    for (int32_t id : trie_->end_of_generation()) mask->Allow(id);
  }
  const TokenBitmask* out = mask.get();
  if (exact) {
    masks_.emplace(state_, std::move(mask));
  } else {
    loose_masks_.emplace(loose, std::move(mask));
  }
  return out;
}

int32_t GrammarMatcher::LooseState() {
  if (loose_of_.size() <= static_cast<size_t>(state_)) {
    loose_of_.resize(static_cast<size_t>(state_) + 1, -2);
  }
  int32_t& loose = loose_of_[state_];
  if (loose == -2) {
    bool key_step = false;
    const int32_t s = loose_.Import(dfa_, state_, &key_step);
    loose = key_step || s == LazyDfa::kDead ? kNoLoose : s;
  }
  return loose;
}

bool GrammarMatcher::Walk(const TokenTrie::Layout& layout, int32_t loose, int skip_chars,
                          TokenBitmask* mask) {
  const bool plain = &layout == &trie_->plain();
  const std::vector<TokenTrie::Node>& nodes = layout.nodes;
  const std::vector<int32_t>& ids = layout.token_ids;
  bool used_exact = loose == kNoLoose;
  walk_[0] = used_exact ? state_ : loose;
  exact_[0] = used_exact ? 1 : 0;
  const size_t n = nodes.size();
  size_t i = 1;
  while (i < n) {
    const TokenTrie::Node& node = nodes[i];
    if (static_cast<int>(node.max_chars) <= skip_chars) {
      i = node.subtree_end;  // allowed already
      continue;
    }
    const size_t d = node.depth;
    bytes_[d] = node.byte;
    bool exact = exact_[d - 1] != 0;
    int32_t next;
    if (exact) {
      next = dfa_.Next(walk_[d - 1], node.byte);
    } else {
      next = loose_.Next(walk_[d - 1], node.byte);
      if (next != LazyDfa::kDead && loose_.KeyStep(walk_[d - 1], node.byte)) {
        // A key move: this subtree is decided on the exact automaton, from
        // the text's state along the bytes so far.
        exact = used_exact = true;
        next = state_;
        for (size_t k = 1; k <= d && next != LazyDfa::kDead; ++k) next = dfa_.Next(next, bytes_[k]);
      }
    }
    if (next == LazyDfa::kDead) {
      i = node.subtree_end;
      continue;
    }
    walk_[d] = next;
    exact_[d] = exact ? 1 : 0;
    for (uint32_t k = 0; k < node.n_tokens; ++k) mask->Allow(ids[node.first_token + k]);
    // No byte leads on: the children would all be refused.
    i = (exact ? dfa_ : loose_).HasExit(next, plain) ? i + 1 : node.subtree_end;
  }
  return used_exact;
}

int GrammarMatcher::PlainLevel(LazyDfa& dfa, int32_t state, std::vector<int16_t>* levels) {
  if (static_cast<size_t>(state) < levels->size() && (*levels)[state] >= 0) {
    return (*levels)[state];
  }
  if (dfa.PlainUniversal(state)) return kUnbounded;
  // One character of plain text at a time, in every UTF-8 spelling: places
  // in a character are 0 boundary; 1..3 continuation bytes still due; 4 after
  // E0 (A0..BF next), 5 after ED (80..9F), 6 after F0 (90..BF), 7 after F4
  // (80..8F).
  struct Step {
    uint8_t lo, hi, to;
  };
  static const std::vector<Step> kSteps[8] = {
      {{0x20, 0x21, 0}, {0x23, 0x5B, 0}, {0x5D, 0x7F, 0}, {0xC2, 0xDF, 1}, {0xE0, 0xE0, 4},
       {0xE1, 0xEC, 2}, {0xED, 0xED, 5}, {0xEE, 0xEF, 2}, {0xF0, 0xF0, 6}, {0xF1, 0xF3, 3},
       {0xF4, 0xF4, 7}},
      {{0x80, 0xBF, 0}},
      {{0x80, 0xBF, 1}},
      {{0x80, 0xBF, 2}},
      {{0xA0, 0xBF, 1}},
      {{0x80, 0x9F, 1}},
      {{0x90, 0xBF, 2}},
      {{0x80, 0x8F, 2}}};
  // States after each whole number of characters; each is explored once (a
  // state met again has its continuations explored at a smaller depth).
  absl::flat_hash_set<int32_t> seen = {state};
  std::vector<int32_t> frontier = {state};
  int level = 0;
  bool dead = false;
  // Past this many states (patterns searched anywhere in the text give a new
  // state per partial match) the levels proven so far are the answer: a walk
  // of the longer tokens is cheaper than proving more. Object keys beside
  // declared names need about one state per character of the names.
  constexpr size_t kMaxExplored = 1024;
  while (!dead && !frontier.empty() && level < TokenTrie::kPlainLevels &&
         seen.size() <= kMaxExplored) {
    std::vector<int32_t> next_frontier;
    for (int32_t from : frontier) {
      absl::flat_hash_set<int64_t> inside;  // (state, place) within the character
      std::vector<std::pair<int32_t, uint8_t>> todo = {{from, 0}};
      while (!todo.empty() && !dead) {
        const auto [s, place] = todo.back();
        todo.pop_back();
        for (const Step& step : kSteps[place]) {
          for (int b = step.lo; b <= step.hi && !dead; ++b) {
            const int32_t t = dfa.Next(s, static_cast<uint8_t>(b));
            if (t == LazyDfa::kDead ||
                dfa.KeyStep(s, static_cast<uint8_t>(b), /*hard_only=*/true)) {
              dead = true;
            } else if (step.to == 0) {
              if (seen.insert(t).second) next_frontier.push_back(t);
            } else if (inside.insert(int64_t{t} * 8 + step.to).second) {
              todo.emplace_back(t, step.to);
            }
          }
        }
      }
      if (dead) break;
    }
    if (!dead) ++level;
    frontier = std::move(next_frontier);
  }
  const int result = !dead && frontier.empty() ? kUnbounded : level;
  if (levels->size() <= static_cast<size_t>(state)) {
    levels->resize(static_cast<size_t>(state) + 1, -1);
  }
  (*levels)[state] = static_cast<int16_t>(result);
  return result;
}

absl::Status GrammarMatcher::AcceptToken(int32_t id) {
  if (finished_) return absl::FailedPreconditionError("the text has ended");
  if (trie_->IsEndOfGeneration(id)) {
    if (!IsAccepting()) {
      return absl::InvalidArgumentError(
          absl::StrCat("end-of-generation token ", id, " before the text is complete"));
    }
    finished_ = true;
    return absl::OkStatus();
  }
  const std::string& piece = trie_->piece(id);
  if (piece.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", id, " has no text the grammar could accept"));
  }
  absl::Status status = AcceptBytes(piece);
  if (!status.ok() && status.code() == absl::StatusCode::kInvalidArgument) {
    return absl::InvalidArgumentError(absl::StrCat("token ", id, ": ", status.message()));
  }
  return status;
}

absl::Status GrammarMatcher::AcceptBytes(absl::string_view bytes) {
  if (finished_) return absl::FailedPreconditionError("the text has ended");
  int32_t s = state_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    s = dfa_.Next(s, static_cast<uint8_t>(bytes[i]));
    if (s == LazyDfa::kDead) {
      if (absl::Status overflow = CheckOverflow(); !overflow.ok()) return overflow;
      return absl::InvalidArgumentError(
          absl::StrCat("the grammar refuses byte ", i, " (0x",
                       absl::Hex(static_cast<uint8_t>(bytes[i]), absl::kZeroPad2), ")"));
    }
  }
  state_ = s;
  return absl::OkStatus();
}

bool GrammarMatcher::CanAccept(absl::string_view bytes) {
  int32_t s = state_;
  for (char c : bytes) {
    s = dfa_.Next(s, static_cast<uint8_t>(c));
    if (s == LazyDfa::kDead) return false;
  }
  return true;
}

std::string GrammarMatcher::ForcedBytes(size_t max_bytes) {
  std::string out;
  int32_t s = state_;
  while (out.size() < max_bytes && !dfa_.IsAccepting(s)) {
    int next_byte = -1;
    int32_t next_state = LazyDfa::kDead;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa_.Next(s, static_cast<uint8_t>(b));
      if (t == LazyDfa::kDead) continue;
      if (next_byte >= 0) return out;  // two ways on
      next_byte = b;
      next_state = t;
    }
    if (next_byte < 0) break;
    out.push_back(static_cast<char>(next_byte));
    s = next_state;
  }
  return out;
}

void GrammarMatcher::Reset() {
  state_ = dfa_.start();
  finished_ = false;
}

}  // namespace colibri::grammar
