#include "model/grammar/json_primitives.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/grammar/regex_compiler.h"

namespace colibri::grammar {
namespace {

CodepointSet AllCodepoints() {
  CodepointSet all;
  all.Add(0, 0x10FFFF);
  all.Normalize();
  return all;
}

absl::StatusOr<Fragment> Digit(ByteNfa* nfa) { return nfa->ByteRange('0', '9'); }

// `count` copies of a digit.
absl::StatusOr<Fragment> DigitRun(ByteNfa* nfa, size_t count) {
  COLIBRI_ASSIGN_OR_RETURN(Fragment f, nfa->Empty());
  for (size_t i = 0; i < count; ++i) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment d, Digit(nfa));
    f = nfa->Concat(f, d);
  }
  return f;
}

// Decimal strings of one length between lo and hi (same length, lo <= hi).
absl::StatusOr<Fragment> SameLength(ByteNfa* nfa, absl::string_view lo, absl::string_view hi) {
  if (lo.empty()) return nfa->Empty();
  const bool lo_min = lo.substr(1).find_first_not_of('0') == absl::string_view::npos;
  const bool hi_max = hi.substr(1).find_first_not_of('9') == absl::string_view::npos;
  if (lo[0] == hi[0]) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment head, nfa->Literal(lo.substr(0, 1)));
    COLIBRI_ASSIGN_OR_RETURN(Fragment tail, SameLength(nfa, lo.substr(1), hi.substr(1)));
    return nfa->Concat(head, tail);
  }
  std::vector<Fragment> parts;
  char first = lo[0];
  char last = hi[0];
  const std::string nines(lo.size() - 1, '9');
  const std::string zeros(lo.size() - 1, '0');
  if (!lo_min) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment head, nfa->Literal(lo.substr(0, 1)));
    COLIBRI_ASSIGN_OR_RETURN(Fragment tail, SameLength(nfa, lo.substr(1), nines));
    parts.push_back(nfa->Concat(head, tail));
    ++first;
  }
  if (!hi_max) --last;
  if (first <= last) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment head, nfa->ByteRange(first, last));
    COLIBRI_ASSIGN_OR_RETURN(Fragment tail, DigitRun(nfa, lo.size() - 1));
    parts.push_back(nfa->Concat(head, tail));
  }
  if (!hi_max) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment head, nfa->Literal(hi.substr(0, 1)));
    COLIBRI_ASSIGN_OR_RETURN(Fragment tail, SameLength(nfa, zeros, hi.substr(1)));
    parts.push_back(nfa->Concat(head, tail));
  }
  return nfa->Alternate(parts);
}

// Non-negative integers in [lo, hi] without leading zeros; hi nullopt: no bound.
absl::StatusOr<Fragment> NaturalRange(ByteNfa* nfa, uint64_t lo, std::optional<uint64_t> hi) {
  if (hi && lo > *hi) return nfa->Nothing();
  const std::string lo_text = std::to_string(lo);
  const size_t hi_len = hi ? std::to_string(*hi).size() : lo_text.size();
  std::vector<Fragment> parts;
  for (size_t len = lo_text.size(); len <= hi_len; ++len) {
    std::string from = len == lo_text.size() ? lo_text : "1" + std::string(len - 1, '0');
    std::string to = std::string(len, '9');
    if (hi && len == hi_len) to = std::to_string(*hi);
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, SameLength(nfa, from, to));
    parts.push_back(f);
  }
  if (!hi) {
    // Longer than lo: [1-9] then at least lo's length of digits.
    COLIBRI_ASSIGN_OR_RETURN(Fragment head, nfa->ByteRange('1', '9'));
    COLIBRI_ASSIGN_OR_RETURN(Fragment run, DigitRun(nfa, lo_text.size()));
    COLIBRI_ASSIGN_OR_RETURN(Fragment more, Digit(nfa));
    COLIBRI_ASSIGN_OR_RETURN(Fragment star, nfa->Star(more));
    parts.push_back(nfa->Concat(nfa->Concat(head, run), star));
  }
  return nfa->Alternate(parts);
}

absl::StatusOr<Fragment> AnyNumber(ByteNfa* nfa) {
  return CompileAnchoredRegex("-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", nfa);
}

// A magnitude N(.F)? (no sign, no exponent) with lo <= / < m <= / < hi.
absl::StatusOr<Fragment> Magnitude(ByteNfa* nfa, std::optional<NumberBound> lo,
                                   std::optional<NumberBound> hi) {
  std::vector<Fragment> parts;
  auto with_fraction = [&](uint64_t from, std::optional<uint64_t> to,
                           absl::string_view fraction) -> absl::Status {
    COLIBRI_ASSIGN_OR_RETURN(Fragment n, NaturalRange(nfa, from, to));
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, CompileAnchoredRegex(fraction, nfa));
    parts.push_back(nfa->Concat(n, f));
    return absl::OkStatus();
  };
  // The integer parts whose every fraction fits.
  const uint64_t core_lo =
      lo ? static_cast<uint64_t>(lo->value) + (lo->inclusive ? 0 : 1) : 0;
  std::optional<uint64_t> core_hi;
  if (hi) core_hi = static_cast<uint64_t>(hi->value);  // N <= hi - 1 below
  if (!hi || *core_hi >= 1) {
    std::optional<uint64_t> top;
    if (hi) top = *core_hi - 1;
    if (!top || core_lo <= *top) {
      COLIBRI_RETURN_IF_ERROR(with_fraction(core_lo, top, "(?:\\.[0-9]+)?"));
    }
  }
  // N == lo with a non-zero fraction (lo exclusive).
  if (lo && !lo->inclusive && (!hi || lo->value < hi->value)) {
    const auto v = static_cast<uint64_t>(lo->value);
    COLIBRI_RETURN_IF_ERROR(with_fraction(v, v, "\\.[0-9]*[1-9][0-9]*"));
  }
  // N == hi with a zero fraction (hi inclusive).
  if (hi && hi->inclusive &&
      (!lo || hi->value > lo->value || (hi->value == lo->value && lo->inclusive))) {
    const auto v = static_cast<uint64_t>(hi->value);
    COLIBRI_RETURN_IF_ERROR(with_fraction(v, v, "(?:\\.0+)?"));
  }
  if (parts.empty()) return nfa->Nothing();
  return nfa->Alternate(parts);
}

}  // namespace

absl::StatusOr<Fragment> Quoted(ByteNfa* nfa, Fragment body) {
  COLIBRI_ASSIGN_OR_RETURN(Fragment open, nfa->Literal("\""));
  COLIBRI_ASSIGN_OR_RETURN(Fragment close, nfa->Literal("\""));
  return nfa->Concat(nfa->Concat(open, body), close);
}

absl::StatusOr<Fragment> JsonString(ByteNfa* nfa, uint64_t min_length,
                                    std::optional<uint64_t> max_length) {
  COLIBRI_ASSIGN_OR_RETURN(Fragment body, JsonStringBody(nfa, min_length, max_length));
  return Quoted(nfa, body);
}

absl::StatusOr<Fragment> JsonStringBody(ByteNfa* nfa, uint64_t min_length,
                                        std::optional<uint64_t> max_length) {
  if (max_length && *max_length < min_length) return nfa->Nothing();
  // Every copy costs states: refuse before the budget does, with a clearer message.
  const uint64_t copies = max_length ? *max_length : min_length + 1;
  if (copies > nfa->max_states() / 8) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a length bound of ", copies, " characters is too large to enforce"));
  }
  const CodepointSet all = AllCodepoints();
  COLIBRI_ASSIGN_OR_RETURN(Fragment body, nfa->Empty());
  for (uint64_t i = 0; i < min_length; ++i) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment c, nfa->JsonStringChar(all));
    body = nfa->Concat(body, c);
  }
  if (!max_length) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment c, nfa->JsonStringChar(all));
    COLIBRI_ASSIGN_OR_RETURN(Fragment star, nfa->Star(c));
    body = nfa->Concat(body, star);
  } else if (*max_length > min_length) {
    // A chain of optional characters, each position with its own way out, so
    // that a state's closure stays small whatever the bound.
    COLIBRI_ASSIGN_OR_RETURN(Fragment end, nfa->Empty());
    StateId at = body.out;
    for (uint64_t i = min_length; i < *max_length; ++i) {
      nfa->AddEpsilon(at, end.in);
      COLIBRI_ASSIGN_OR_RETURN(Fragment c, nfa->JsonStringChar(all));
      nfa->AddEpsilon(at, c.in);
      at = c.out;
    }
    nfa->AddEpsilon(at, end.in);
    body = Fragment{body.in, end.out};
  }
  return body;
}

absl::StatusOr<Fragment> JsonFormatBody(ByteNfa* nfa, absl::string_view format) {
  static constexpr absl::string_view kDate =
      "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-"
      "(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))";
  static constexpr absl::string_view kTime =
      "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):"
      "[0-5][0-9])";
  static constexpr absl::string_view kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  static constexpr absl::string_view kOctet = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  std::string regex;
  if (format == "date") {
    regex = std::string(kDate);
  } else if (format == "time") {
    regex = std::string(kTime);
  } else if (format == "date-time") {
    regex = absl::StrCat(kDate, "[Tt]", kTime);
  } else if (format == "uuid") {
    regex = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  } else if (format == "email") {
    const std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    regex = absl::StrCat(atom, "(?:\\.", atom, ")*@", kLabel, "(?:\\.", kLabel, ")+");
  } else if (format == "ipv4") {
    regex = absl::StrCat("(?:", kOctet, "\\.){3}", kOctet);
  } else if (format == "uri") {
    // RFC 3986: a scheme, then "//" and an authority (userinfo, a registered
    // name, possibly empty as in file:///, or an IP literal in brackets, a
    // port) and an absolute path, or a rootless path; query and fragment.
    const std::string pchar = "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
    const std::string userinfo = "(?:[A-Za-z0-9._~!$&'()*+,;=:-]|%[0-9A-Fa-f]{2})*";
    const std::string reg_name = "(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*";
    const std::string authority = absl::StrCat("(?:", userinfo, "@)?(?:", reg_name,
                                               "|\\[[0-9A-Fa-f:.]+\\])(?::[0-9]*)?");
    const std::string tail = absl::StrCat("(?:\\?(?:", pchar, "|[/?])*)?(?:#(?:", pchar, "|[/?])*)?");
    regex = absl::StrCat("(?:[Hh][Tt][Tt][Pp][Ss]?://", kLabel, "(?:\\.", kLabel,
                         ")*(?::[0-9]{1,5})?(?:/", pchar, "*)*|[A-Za-z][A-Za-z0-9+.-]*://",
                         authority, "(?:/", pchar, "*)*|[A-Za-z][A-Za-z0-9+.-]*:", pchar,
                         "+(?:/", pchar, "*)*)", tail);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("format \"", format, "\" is not supported (supported: date, time, "
                     "date-time, uuid, email, ipv4, uri)"));
  }
  return CompileAnchoredRegex(regex, nfa);
}

absl::StatusOr<Fragment> JsonStringExceptBody(ByteNfa* nfa,
                                              const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    for (char c : name) {
      const auto b = static_cast<uint8_t>(c);
      if (b < 0x20 || b >= 0x7F || c == '"' || c == '\\') {
        return absl::InvalidArgumentError(absl::StrCat(
            "property name \"", name,
            "\" is not plain ASCII: other keys cannot be kept apart from it"));
      }
    }
  }
  // A trie of the names; leaving it (or ending off a name) frees the key.
  struct TrieNode {
    StateId state;
    bool is_name = false;
    std::vector<std::pair<char, size_t>> children;
  };
  std::vector<TrieNode> trie;
  COLIBRI_ASSIGN_OR_RETURN(StateId root, nfa->AddState());
  trie.push_back({root});
  for (const std::string& name : names) {
    size_t at = 0;
    for (char c : name) {
      size_t next = 0;
      for (const auto& [byte, child] : trie[at].children) {
        if (byte == c) next = child;
      }
      if (next == 0) {
        COLIBRI_ASSIGN_OR_RETURN(StateId s, nfa->AddState());
        trie.push_back({s});
        next = trie.size() - 1;
        trie[at].children.emplace_back(c, next);
        nfa->AddEdge(trie[at].state, static_cast<uint8_t>(c), static_cast<uint8_t>(c), s);
      }
      at = next;
    }
    trie[at].is_name = true;
  }
  COLIBRI_ASSIGN_OR_RETURN(Fragment close, nfa->Empty());
  COLIBRI_ASSIGN_OR_RETURN(Fragment any, nfa->JsonStringChar(AllCodepoints()));
  COLIBRI_ASSIGN_OR_RETURN(Fragment free_tail, nfa->Star(any));
  nfa->AddEpsilon(free_tail.out, close.in);
  // Any character goes on from the free tail and from every trie node (to a
  // child or off the trie), so plain text never dies in a key body.
  nfa->MarkPlainUniversal(free_tail.in);
  nfa->MarkPlainUniversal(any.in);
  for (const TrieNode& node : trie) {
    nfa->MarkPlainUniversal(node.state);
    if (!node.is_name) nfa->AddEpsilon(node.state, close.in);
    CodepointSet others = AllCodepoints();
    CodepointSet taken;
    for (const auto& [byte, child] : node.children) {
      taken.Add(static_cast<uint8_t>(byte), static_cast<uint8_t>(byte));
    }
    taken.Normalize();
    if (!taken.ranges.empty()) others = taken.Complement();
    COLIBRI_ASSIGN_OR_RETURN(Fragment leave, nfa->JsonStringChar(others));
    nfa->AddEpsilon(node.state, leave.in);
    nfa->AddEpsilon(leave.out, free_tail.in);
  }
  return Fragment{root, close.out};
}

absl::StatusOr<Fragment> JsonInteger(ByteNfa* nfa, std::optional<int64_t> lo,
                                     std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) return nfa->Nothing();
  std::vector<Fragment> parts;
  // Non-negative part.
  if (!hi || *hi >= 0) {
    const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> to;
    if (hi) to = static_cast<uint64_t>(*hi);
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, NaturalRange(nfa, from, to));
    parts.push_back(f);
  }
  // Negative part: '-' and a magnitude of at least 1.
  if (!lo || *lo < 0) {
    const uint64_t from = hi && *hi < 0 ? 0 - static_cast<uint64_t>(*hi) : 1;
    std::optional<uint64_t> to;
    if (lo) to = 0 - static_cast<uint64_t>(*lo);
    COLIBRI_ASSIGN_OR_RETURN(Fragment minus, nfa->Literal("-"));
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, NaturalRange(nfa, from, to));
    parts.push_back(nfa->Concat(minus, f));
  }
  return nfa->Alternate(parts);
}

absl::StatusOr<Fragment> JsonNumber(ByteNfa* nfa, std::optional<NumberBound> lo,
                                    std::optional<NumberBound> hi) {
  if (!lo && !hi) return AnyNumber(nfa);
  std::vector<Fragment> parts;
  // x >= 0, written without sign.
  if (!hi || hi->value > 0 || (hi->value == 0 && hi->inclusive)) {
    std::optional<NumberBound> m_lo;
    if (lo && lo->value >= 0) m_lo = lo;
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, Magnitude(nfa, m_lo, hi));
    parts.push_back(f);
  }
  // x < 0: '-' and a magnitude m > 0 with -m within the bounds.
  if (!lo || lo->value < 0) {
    std::optional<NumberBound> m_lo = NumberBound{0, false};
    if (hi && hi->value < 0) m_lo = NumberBound{-hi->value, hi->inclusive};
    std::optional<NumberBound> m_hi;
    if (lo) m_hi = NumberBound{-lo->value, lo->inclusive};
    COLIBRI_ASSIGN_OR_RETURN(Fragment minus, nfa->Literal("-"));
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, Magnitude(nfa, m_lo, m_hi));
    parts.push_back(nfa->Concat(minus, f));
  }
  if (parts.empty()) return nfa->Nothing();
  return nfa->Alternate(parts);
}

absl::StatusOr<StateId> JsonAnyValueEntry(ByteNfa* nfa) {
  COLIBRI_ASSIGN_OR_RETURN(const StateId entry, nfa->AddState());
  COLIBRI_ASSIGN_OR_RETURN(const StateId exit, nfa->AddState());
  nfa->AddOp(exit, OpEdge{StackOp::kReturn, exit, 0, 0});
  auto link = [&](Fragment f) {
    nfa->AddEpsilon(entry, f.in);
    nfa->AddEpsilon(f.out, exit);
  };
  for (absl::string_view word : {"null", "true", "false"}) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, nfa->Literal(word));
    link(f);
  }
  COLIBRI_ASSIGN_OR_RETURN(Fragment number, AnyNumber(nfa));
  link(number);
  COLIBRI_ASSIGN_OR_RETURN(Fragment string, JsonString(nfa, 0, std::nullopt));
  link(string);
  // Arrays and objects: open, then close or members separated by commas, each
  // member's value a call one level deeper returning to `done`.
  for (const bool object : {false, true}) {
    COLIBRI_ASSIGN_OR_RETURN(Fragment open, nfa->Literal(object ? "{" : "["));
    COLIBRI_ASSIGN_OR_RETURN(Fragment close, nfa->Literal(object ? "}" : "]"));
    COLIBRI_ASSIGN_OR_RETURN(Fragment comma, nfa->Literal(","));
    COLIBRI_ASSIGN_OR_RETURN(const StateId member, nfa->AddState());
    COLIBRI_ASSIGN_OR_RETURN(const StateId done, nfa->AddState());
    link(Fragment{open.in, close.out});
    nfa->AddEpsilon(open.out, close.in);
    nfa->AddEpsilon(open.out, member);
    nfa->AddEpsilon(comma.out, member);
    nfa->AddEpsilon(done, comma.in);
    nfa->AddEpsilon(done, close.in);
    StateId value = member;
    if (object) {
      COLIBRI_ASSIGN_OR_RETURN(Fragment key, JsonString(nfa, 0, std::nullopt));
      COLIBRI_ASSIGN_OR_RETURN(Fragment colon, nfa->Literal(":"));
      nfa->AddEpsilon(member, key.in);
      nfa->Concat(key, colon);
      value = colon.out;
    }
    nfa->AddOp(value, OpEdge{StackOp::kCall, entry, done, 1});
  }
  return entry;
}

absl::StatusOr<Fragment> JsonAnyValueCall(ByteNfa* nfa, StateId entry) {
  COLIBRI_ASSIGN_OR_RETURN(const StateId in, nfa->AddState());
  COLIBRI_ASSIGN_OR_RETURN(const StateId out, nfa->AddState());
  nfa->AddOp(in, OpEdge{StackOp::kCall, entry, out, 0});
  return Fragment{in, out};
}

}  // namespace colibri::grammar
