#include "model/grammar/grammar_matcher.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace colibri::grammar {

size_t TokenBitmask::Count() const {
  size_t n = 0;
  for (uint64_t w : words_) n += static_cast<size_t>(__builtin_popcountll(w));
  return n;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                               std::shared_ptr<const TokenTrie> trie,
                               const MatcherOptions& options)
    : grammar_(std::move(grammar)),
      trie_(std::move(trie)),
      options_(options),
      dfa_(*grammar_, options.max_dfa_states),
      state_(dfa_.start()) {
  walk_.assign(trie_->max_depth() + 1, LazyDfa::kDead);
}

absl::Status GrammarMatcher::CheckOverflow() const {
  if (!dfa_.overflowed()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the grammar's automaton needs more than ", options_.max_dfa_states, " states"));
}

absl::StatusOr<const TokenBitmask*> GrammarMatcher::ComputeMask() {
  if (finished_) return absl::FailedPreconditionError("the text has ended");
  auto it = masks_.find(state_);
  if (it != masks_.end()) return it->second.get();
  if (masks_.size() >= options_.max_cached_masks) masks_.clear();
  auto mask = std::make_unique<TokenBitmask>(trie_->n_vocab());
  const std::vector<TokenTrie::Node>& nodes = trie_->nodes();
  const std::vector<int32_t>& ids = trie_->token_ids();
  walk_[0] = state_;
  const size_t n = nodes.size();
  size_t i = 1;
  while (i < n) {
    const TokenTrie::Node& node = nodes[i];
    const int32_t next = dfa_.Next(walk_[node.depth - 1], node.byte);
    if (next == LazyDfa::kDead) {
      i = node.subtree_end;
      continue;
    }
    walk_[node.depth] = next;
    for (uint32_t k = 0; k < node.n_tokens; ++k) mask->Allow(ids[node.first_token + k]);
    ++i;
  }
  if (absl::Status s = CheckOverflow(); !s.ok()) return s;
  if (dfa_.IsAccepting(state_)) {
    for (int32_t id : trie_->end_of_generation()) mask->Allow(id);
  }
  const TokenBitmask* out = mask.get();
  masks_.emplace(state_, std::move(mask));
  return out;
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
