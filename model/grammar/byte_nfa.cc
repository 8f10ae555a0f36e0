#include "model/grammar/byte_nfa.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace colibri::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
// Continuation bytes at their lowest and highest.
constexpr uint8_t kMinTail[3] = {0x80, 0x80, 0x80};
constexpr uint8_t kMaxTail[3] = {0xBF, 0xBF, 0xBF};

// UTF-8 bytes of `c`; returns their count.
int EncodeUtf8(uint32_t c, uint8_t* out) {
  if (c < 0x80) {
    out[0] = static_cast<uint8_t>(c);
    return 1;
  }
  if (c < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  return 4;
}

bool AllBytesAre(const uint8_t* bytes, int n, uint8_t value) {
  for (int i = 0; i < n; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

}  // namespace

void CodepointSet::Normalize() {
  std::vector<std::pair<uint32_t, uint32_t>> clipped;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    // Surrogates cannot be encoded: cut them out.
    if (lo < 0xD800 && hi >= 0xD800) {
      if (hi > 0xDFFF) clipped.emplace_back(0xE000, hi);
      hi = 0xD7FF;
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi <= 0xDFFF) continue;
      lo = 0xE000;
    }
    clipped.emplace_back(lo, hi);
  }
  std::sort(clipped.begin(), clipped.end());
  ranges.clear();
  for (const auto& r : clipped) {
    if (!ranges.empty() && r.first <= ranges.back().second + 1) {
      ranges.back().second = std::max(ranges.back().second, r.second);
    } else {
      ranges.push_back(r);
    }
  }
}

CodepointSet CodepointSet::Complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.Add(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.Add(next, kMaxCodepoint);
  out.Normalize();
  return out;
}

bool CodepointSet::Contains(uint32_t c) const {
  for (const auto& [lo, hi] : ranges) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

absl::StatusOr<StateId> ByteNfa::AddState() {
  if (states_.size() >= max_states_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the grammar needs more than ", max_states_, " automaton states"));
  }
  states_.emplace_back();
  return static_cast<StateId>(states_.size() - 1);
}

absl::StatusOr<Fragment> ByteNfa::Empty() {
  absl::StatusOr<StateId> s = AddState();
  if (!s.ok()) return s.status();
  return Fragment{*s, *s};
}

absl::StatusOr<Fragment> ByteNfa::Nothing() {
  absl::StatusOr<StateId> in = AddState();
  if (!in.ok()) return in.status();
  absl::StatusOr<StateId> out = AddState();
  if (!out.ok()) return out.status();
  return Fragment{*in, *out};
}

absl::StatusOr<Fragment> ByteNfa::Literal(absl::string_view bytes) {
  absl::StatusOr<StateId> in = AddState();
  if (!in.ok()) return in.status();
  StateId at = *in;
  for (char c : bytes) {
    absl::StatusOr<StateId> next = AddState();
    if (!next.ok()) return next.status();
    const auto b = static_cast<uint8_t>(c);
    AddEdge(at, b, b, *next);
    at = *next;
  }
  return Fragment{*in, at};
}

absl::StatusOr<Fragment> ByteNfa::ByteRange(uint8_t lo, uint8_t hi) {
  absl::StatusOr<Fragment> f = Nothing();
  if (!f.ok()) return f;
  AddEdge(f->in, lo, hi, f->out);
  return f;
}

absl::StatusOr<Fragment> ByteNfa::Utf8(const CodepointSet& set) {
  absl::StatusOr<Fragment> f = Nothing();
  if (!f.ok()) return f;
  // Edges from `from` to `to` for the encodings between lo and hi (same length).
  absl::Status status;
  auto emit = [&](auto&& self, const uint8_t* lo, const uint8_t* hi, int n, StateId from) -> void {
    if (!status.ok()) return;
    if (n == 1) {
      AddEdge(from, lo[0], hi[0], f->out);
      return;
    }
    auto via = [&](uint8_t b_lo, uint8_t b_hi, const uint8_t* tail_lo, const uint8_t* tail_hi) {
      absl::StatusOr<StateId> mid = AddState();
      if (!mid.ok()) {
        status = mid.status();
        return;
      }
      AddEdge(from, b_lo, b_hi, *mid);
      self(self, tail_lo, tail_hi, n - 1, *mid);
    };
    if (lo[0] == hi[0]) {
      via(lo[0], lo[0], lo + 1, hi + 1);
      return;
    }
    uint8_t first = lo[0];
    uint8_t last = hi[0];
    if (!AllBytesAre(lo + 1, n - 1, 0x80)) {
      via(lo[0], lo[0], lo + 1, kMaxTail);
      ++first;
    }
    const bool hi_full = AllBytesAre(hi + 1, n - 1, 0xBF);
    if (!hi_full) --last;
    if (first <= last) via(first, last, kMinTail, kMaxTail);
    if (!hi_full) via(hi[0], hi[0], kMinTail, hi + 1);
  };
  static constexpr uint32_t kLengthEnds[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
  for (auto [lo, hi] : set.ranges) {
    for (uint32_t end : kLengthEnds) {
      if (lo > hi) break;
      if (lo > end) continue;
      const uint32_t piece_hi = std::min(hi, end);
      uint8_t lo_bytes[4];
      uint8_t hi_bytes[4];
      const int n = EncodeUtf8(lo, lo_bytes);
      EncodeUtf8(piece_hi, hi_bytes);
      emit(emit, lo_bytes, hi_bytes, n, f->in);
      lo = piece_hi + 1;
    }
  }
  if (!status.ok()) return status;
  return f;
}

absl::StatusOr<Fragment> ByteNfa::JsonStringChar(const CodepointSet& set) {
  CodepointSet raw;
  for (auto [lo, hi] : set.ranges) {
    // Cut out the control characters, '"' and '\', which need escapes.
    lo = std::max<uint32_t>(lo, 0x20);
    if (lo > hi) continue;
    raw.Add(lo, hi);
  }
  CodepointSet plain;
  for (const auto& [lo, hi] : raw.ranges) {
    uint32_t at = lo;
    for (uint32_t special : {uint32_t{'"'}, uint32_t{'\\'}}) {
      if (special >= at && special <= hi) {
        if (special > at) plain.Add(at, special - 1);
        at = special + 1;
      }
    }
    if (at <= hi) plain.Add(at, hi);
  }
  plain.Normalize();
  absl::StatusOr<Fragment> f = Utf8(plain);
  if (!f.ok()) return f;
  bool any_escape = false;
  for (uint32_t c = 0; c < 0x20 && !any_escape; ++c) any_escape = set.Contains(c);
  any_escape = any_escape || set.Contains('"') || set.Contains('\\');
  if (!any_escape) return f;
  absl::StatusOr<StateId> backslash = AddState();
  if (!backslash.ok()) return backslash.status();
  AddEdge(f->in, '\\', '\\', *backslash);
  if (set.Contains('"')) AddEdge(*backslash, '"', '"', f->out);
  if (set.Contains('\\')) AddEdge(*backslash, '\\', '\\', f->out);
  static constexpr std::pair<char, uint32_t> kShort[] = {
      {'b', 8}, {'t', 9}, {'n', 10}, {'f', 12}, {'r', 13}};
  for (const auto& [letter, c] : kShort) {
    if (set.Contains(c)) AddEdge(*backslash, letter, letter, f->out);
  }
  // \u00XX for the control characters.
  absl::StatusOr<Fragment> u00 = Literal("u00");
  if (!u00.ok()) return u00.status();
  AddEpsilon(*backslash, u00->in);
  for (uint32_t high = 0; high < 2; ++high) {
    absl::StatusOr<StateId> digit = AddState();
    if (!digit.ok()) return digit.status();
    bool used = false;
    for (uint32_t low = 0; low < 16; ++low) {
      if (!set.Contains(high * 16 + low)) continue;
      used = true;
      const char lower = static_cast<char>(low < 10 ? '0' + low : 'a' + low - 10);
      const char upper = static_cast<char>(low < 10 ? '0' + low : 'A' + low - 10);
      AddEdge(*digit, lower, lower, f->out);
      AddEdge(*digit, upper, upper, f->out);
    }
    if (used) {
      const char h = static_cast<char>('0' + high);
      AddEdge(u00->out, h, h, *digit);
    }
  }
  return f;
}

Fragment ByteNfa::Concat(Fragment a, Fragment b) {
  AddEpsilon(a.out, b.in);
  return Fragment{a.in, b.out};
}

absl::StatusOr<Fragment> ByteNfa::Alternate(const std::vector<Fragment>& parts) {
  absl::StatusOr<Fragment> f = Nothing();
  if (!f.ok()) return f;
  for (const Fragment& part : parts) {
    AddEpsilon(f->in, part.in);
    AddEpsilon(part.out, f->out);
  }
  return f;
}

absl::StatusOr<Fragment> ByteNfa::Star(Fragment a) {
  absl::StatusOr<Fragment> f = Nothing();
  if (!f.ok()) return f;
  AddEpsilon(f->in, a.in);
  AddEpsilon(f->in, f->out);
  AddEpsilon(a.out, a.in);
  AddEpsilon(a.out, f->out);
  return f;
}

absl::StatusOr<Fragment> ByteNfa::Optional(Fragment a) {
  absl::StatusOr<Fragment> f = Nothing();
  if (!f.ok()) return f;
  AddEpsilon(f->in, a.in);
  AddEpsilon(f->in, f->out);
  AddEpsilon(a.out, f->out);
  return f;
}

absl::StatusOr<Fragment> ByteNfa::Intersect(Fragment a, Fragment b) {
  absl::flat_hash_map<std::pair<StateId, StateId>, StateId> ids;
  std::vector<std::pair<StateId, StateId>> todo;
  absl::Status status;
  auto get = [&](StateId p, StateId q) -> StateId {
    auto it = ids.find({p, q});
    if (it != ids.end()) return it->second;
    absl::StatusOr<StateId> s = AddState();
    if (!s.ok()) {
      status = s.status();
      return 0;
    }
    ids.emplace(std::make_pair(p, q), *s);
    todo.emplace_back(p, q);
    return *s;
  };
  const StateId in = get(a.in, b.in);
  while (!todo.empty() && status.ok()) {
    const auto [p, q] = todo.back();
    todo.pop_back();
    const StateId s = ids[{p, q}];
    // Copies: get() appends states, which may move the vectors.
    const NfaState sp = states_[p];
    const NfaState sq = states_[q];
    for (StateId e : sp.epsilon) AddEpsilon(s, get(e, q));
    for (StateId e : sq.epsilon) AddEpsilon(s, get(p, e));
    if (!sq.ops.empty()) {
      return absl::InvalidArgumentError("text to exclude cannot itself use stack moves");
    }
    for (const OpEdge& op : sp.ops) {
      if (op.op == StackOp::kCall || op.op == StackOp::kReturn) {
        return absl::InvalidArgumentError(
            "a value of an unconstrained schema (free JSON nesting to any depth) cannot be "
            "kept from containing given text");
      }
      OpEdge paired = op;
      paired.to = get(op.to, q);
      if (status.ok()) AddOp(s, paired);
    }
    for (const ByteEdge& x : sp.edges) {
      for (const ByteEdge& y : sq.edges) {
        const uint8_t lo = std::max(x.lo, y.lo);
        const uint8_t hi = std::min(x.hi, y.hi);
        if (lo <= hi) {
          const StateId t = get(x.to, y.to);
          if (status.ok()) AddEdge(s, lo, hi, t);
        }
      }
    }
  }
  if (!status.ok()) return status;
  auto out = ids.find({a.out, b.out});
  if (out != ids.end()) return Fragment{in, out->second};
  absl::StatusOr<StateId> none = AddState();  // the ends never meet: nothing
  if (!none.ok()) return none.status();
  return Fragment{in, *none};
}

bool NfaAcceptsSomething(const ByteNfa& nfa, StateId start, StateId accept) {
  std::vector<bool> seen(nfa.size(), false);
  std::vector<StateId> todo = {start};
  seen[start] = true;
  while (!todo.empty()) {
    const StateId s = todo.back();
    todo.pop_back();
    if (s == accept) return true;
    ForEachSuccessor(nfa.states()[s], [&](StateId t) {
      if (!seen[t]) {
        seen[t] = true;
        todo.push_back(t);
      }
    });
  }
  return false;
}

}  // namespace colibri::grammar
