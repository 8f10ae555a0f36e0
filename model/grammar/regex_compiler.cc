#include "model/grammar/regex_compiler.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace colibri::grammar {
namespace {

// Repetition counts above this are refused (a bound, not a semantic limit: the
// automaton would be that many copies long).
constexpr int kMaxRepeat = 1000;
constexpr int kMaxNesting = 200;

struct Node {
  enum Kind { kSet, kConcat, kAlt, kRepeat, kBegin, kEnd } kind;
  CodepointSet set;                            // kSet
  std::vector<std::unique_ptr<Node>> children;  // kConcat, kAlt, kRepeat (one)
  int min = 0;
  int max = -1;  // kRepeat; -1: unbounded
};

CodepointSet Digits() {
  CodepointSet s;
  s.Add('0', '9');
  return s;
}
CodepointSet WordChars() {
  CodepointSet s;
  s.Add('0', '9');
  s.Add('A', 'Z');
  s.Add('a', 'z');
  s.Add('_', '_');
  s.Normalize();
  return s;
}
CodepointSet Spaces() {
  CodepointSet s;
  s.Add(9, 13);
  s.Add(' ', ' ');
  s.Add(0xA0, 0xA0);
  s.Add(0x1680, 0x1680);
  s.Add(0x2000, 0x200A);
  s.Add(0x2028, 0x2029);
  s.Add(0x202F, 0x202F);
  s.Add(0x205F, 0x205F);
  s.Add(0x3000, 0x3000);
  s.Add(0xFEFF, 0xFEFF);
  s.Normalize();
  return s;
}
CodepointSet AnyButLineEnds() {
  CodepointSet s;
  s.Add('\n', '\n');
  s.Add('\r', '\r');
  s.Add(0x2028, 0x2029);
  s.Normalize();
  return s.Complement();
}

class Parser {
 public:
  explicit Parser(absl::string_view pattern) : pattern_(pattern) {}

  absl::StatusOr<std::unique_ptr<Node>> Parse() {
    COLIBRI_RETURN_IF_ERROR(Decode());
    COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<Node> node, ParseAlt(0));
    if (pos_ < cps_.size()) return Error("unbalanced ')'");
    return node;
  }

 private:
  absl::Status Decode() {
    size_t i = 0;
    while (i < pattern_.size()) {
      const auto b = static_cast<uint8_t>(pattern_[i]);
      int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + n > pattern_.size()) {
        return absl::InvalidArgumentError("pattern is not valid UTF-8");
      }
      uint32_t c = n == 1 ? b : (b & (0x7F >> n));
      for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<uint8_t>(pattern_[i + k]) & 0x3F);
      cps_.push_back(c);
      i += n;
    }
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern \"", pattern_, "\": ", what, " at character ", pos_));
  }
  bool AtEnd() const { return pos_ >= cps_.size(); }
  uint32_t Peek() const { return cps_[pos_]; }

  absl::StatusOr<std::unique_ptr<Node>> ParseAlt(int depth) {
    if (depth > kMaxNesting) return Error("groups nested too deeply");
    auto alt = std::make_unique<Node>();
    alt->kind = Node::kAlt;
    while (true) {
      COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<Node> branch, ParseConcat(depth));
      alt->children.push_back(std::move(branch));
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    return alt;
  }

  absl::StatusOr<std::unique_ptr<Node>> ParseConcat(int depth) {
    auto concat = std::make_unique<Node>();
    concat->kind = Node::kConcat;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<Node> atom, ParseAtom(depth));
      COLIBRI_ASSIGN_OR_RETURN(atom, ParseQuantifier(std::move(atom)));
      concat->children.push_back(std::move(atom));
    }
    return concat;
  }

  absl::StatusOr<int> ParseNumber() {
    if (AtEnd() || Peek() < '0' || Peek() > '9') return Error("expected a number");
    int value = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      value = value * 10 + static_cast<int>(Peek() - '0');
      if (value > kMaxRepeat) return Error(absl::StrCat("repetition above ", kMaxRepeat));
      ++pos_;
    }
    return value;
  }

  absl::StatusOr<std::unique_ptr<Node>> ParseQuantifier(std::unique_ptr<Node> atom) {
    int stacked = 0;
    while (!AtEnd()) {
      if (++stacked > 8) return Error("more than 8 quantifiers on one atom");
      int min = 0;
      int max = -1;
      const uint32_t c = Peek();
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        min = 1;
        ++pos_;
      } else if (c == '?') {
        max = 1;
        ++pos_;
      } else if (c == '{') {
        const size_t start = pos_;
        ++pos_;
        if (AtEnd() || Peek() < '0' || Peek() > '9') {
          pos_ = start;  // a literal '{', as ECMA's Annex B allows
          return atom;
        }
        COLIBRI_ASSIGN_OR_RETURN(min, ParseNumber());
        max = min;
        if (!AtEnd() && Peek() == ',') {
          ++pos_;
          max = -1;
          if (!AtEnd() && Peek() != '}') {
            COLIBRI_ASSIGN_OR_RETURN(max, ParseNumber());
          }
        }
        if (AtEnd() || Peek() != '}') return Error("unterminated {m,n}");
        ++pos_;
        if (max >= 0 && max < min) return Error("{m,n} with n < m");
      } else {
        return atom;
      }
      if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: same strings
      if (atom->kind == Node::kBegin || atom->kind == Node::kEnd) {
        return Error("quantified anchor");
      }
      auto repeat = std::make_unique<Node>();
      repeat->kind = Node::kRepeat;
      repeat->min = min;
      repeat->max = max;
      repeat->children.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  static std::unique_ptr<Node> SetNode(CodepointSet set) {
    auto node = std::make_unique<Node>();
    node->kind = Node::kSet;
    set.Normalize();
    node->set = std::move(set);
    return node;
  }

  absl::StatusOr<uint32_t> ParseHex(int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      if (AtEnd()) return Error("short hex escape");
      const uint32_t c = Peek();
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        return Error("bad hex escape");
      }
      value = value * 16 + d;
      ++pos_;
    }
    return value;
  }

  // After a '\': the set it stands for. `in_class` allows \b (backspace).
  absl::StatusOr<CodepointSet> ParseEscape(bool in_class) {
    if (AtEnd()) return Error("pattern ends in '\\'");
    const uint32_t c = Peek();
    ++pos_;
    CodepointSet s;
    switch (c) {
      case 'd': return Digits();
      case 'D': return Digits().Complement();
      case 'w': return WordChars();
      case 'W': return WordChars().Complement();
      case 's': return Spaces();
      case 'S': return Spaces().Complement();
      case 'n': s.Add('\n', '\n'); return s;
      case 't': s.Add('\t', '\t'); return s;
      case 'r': s.Add('\r', '\r'); return s;
      case 'f': s.Add('\f', '\f'); return s;
      case 'v': s.Add('\v', '\v'); return s;
      case '0': s.Add(0, 0); return s;
      case 'x': {
        COLIBRI_ASSIGN_OR_RETURN(uint32_t v, ParseHex(2));
        s.Add(v, v);
        return s;
      }
      case 'u': {
        COLIBRI_ASSIGN_OR_RETURN(uint32_t v, ParseHex(4));
        s.Add(v, v);
        return s;
      }
      case 'b':
        if (in_class) {
          s.Add(8, 8);
          return s;
        }
        return Error("word boundary \\b is not supported");
      case 'B': return Error("\\B is not supported");
      case 'p':
      case 'P': return Error("Unicode property escapes are not supported");
      case 'c': return Error("\\c escapes are not supported");
      case 'k': return Error("backreferences are not supported");
      default:
        if (c >= '1' && c <= '9') return Error("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          return Error(absl::StrCat("unknown escape \\", std::string(1, static_cast<char>(c))));
        }
        s.Add(c, c);
        return s;
    }
  }

  absl::StatusOr<CodepointSet> ParseClass() {
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointSet set;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      if (Peek() == ']' && !first) break;
      if (Peek() == ']' && first) break;  // "[]" matches nothing, "[^]" anything
      first = false;
      CodepointSet item;
      bool single = false;
      uint32_t lo = 0;
      if (Peek() == '\\') {
        ++pos_;
        COLIBRI_ASSIGN_OR_RETURN(item, ParseEscape(/*in_class=*/true));
        item.Normalize();
        single = item.ranges.size() == 1 && item.ranges[0].first == item.ranges[0].second;
        lo = single ? item.ranges[0].first : 0;
      } else {
        lo = Peek();
        ++pos_;
        item.Add(lo, lo);
        single = true;
      }
      if (single && pos_ + 1 < cps_.size() && Peek() == '-' && cps_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (Peek() == '\\') {
          ++pos_;
          COLIBRI_ASSIGN_OR_RETURN(CodepointSet end, ParseEscape(true));
          end.Normalize();
          if (end.ranges.size() != 1 || end.ranges[0].first != end.ranges[0].second) {
            return Error("class range ends in a class escape");
          }
          hi = end.ranges[0].first;
        } else {
          hi = Peek();
          ++pos_;
        }
        if (hi < lo) return Error("class range out of order");
        item = CodepointSet();
        item.Add(lo, hi);
      }
      for (const auto& r : item.ranges) set.Add(r.first, r.second);
    }
    ++pos_;  // ']'
    set.Normalize();
    return negate ? set.Complement() : set;
  }

  absl::StatusOr<std::unique_ptr<Node>> ParseAtom(int depth) {
    const uint32_t c = Peek();
    ++pos_;
    switch (c) {
      case '(': {
        if (!AtEnd() && Peek() == '?') {
          ++pos_;
          if (AtEnd()) return Error("unterminated group");
          if (Peek() == ':') {
            ++pos_;
          } else if (Peek() == '<' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' &&
                     cps_[pos_ + 1] != '!') {
            while (!AtEnd() && Peek() != '>') ++pos_;
            if (AtEnd()) return Error("unterminated group name");
            ++pos_;
          } else {
            return Error("lookaround is not supported");
          }
        }
        COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<Node> inner, ParseAlt(depth + 1));
        if (AtEnd() || Peek() != ')') return Error("missing ')'");
        ++pos_;
        return inner;
      }
      case '[': {
        COLIBRI_ASSIGN_OR_RETURN(CodepointSet set, ParseClass());
        return SetNode(std::move(set));
      }
      case '.': return SetNode(AnyButLineEnds());
      case '\\': {
        COLIBRI_ASSIGN_OR_RETURN(CodepointSet set, ParseEscape(false));
        return SetNode(std::move(set));
      }
      case '^':
      case '$': {
        auto node = std::make_unique<Node>();
        node->kind = c == '^' ? Node::kBegin : Node::kEnd;
        return node;
      }
      case '*':
      case '+':
      case '?': --pos_; return Error("nothing to repeat");
      default: {
        CodepointSet s;
        s.Add(c, c);
        return SetNode(std::move(s));
      }
    }
  }

  absl::string_view pattern_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

class Emitter {
 public:
  explicit Emitter(ByteNfa* nfa) : nfa_(nfa) {}

  absl::StatusOr<Fragment> Emit(const Node& node) {
    switch (node.kind) {
      case Node::kSet: return nfa_->JsonStringChar(node.set);
      case Node::kConcat: {
        COLIBRI_ASSIGN_OR_RETURN(Fragment f, nfa_->Empty());
        for (const auto& child : node.children) {
          COLIBRI_ASSIGN_OR_RETURN(Fragment c, Emit(*child));
          f = nfa_->Concat(f, c);
        }
        return f;
      }
      case Node::kAlt: {
        std::vector<Fragment> parts;
        for (const auto& child : node.children) {
          COLIBRI_ASSIGN_OR_RETURN(Fragment c, Emit(*child));
          parts.push_back(c);
        }
        if (parts.size() == 1) return parts[0];
        return nfa_->Alternate(parts);
      }
      case Node::kRepeat: {
        const Node& child = *node.children[0];
        COLIBRI_ASSIGN_OR_RETURN(Fragment f, nfa_->Empty());
        for (int i = 0; i < node.min; ++i) {
          COLIBRI_ASSIGN_OR_RETURN(Fragment c, Emit(child));
          f = nfa_->Concat(f, c);
        }
        if (node.max < 0) {
          COLIBRI_ASSIGN_OR_RETURN(Fragment c, Emit(child));
          COLIBRI_ASSIGN_OR_RETURN(Fragment star, nfa_->Star(c));
          return nfa_->Concat(f, star);
        }
        for (int i = node.min; i < node.max; ++i) {
          COLIBRI_ASSIGN_OR_RETURN(Fragment c, Emit(child));
          COLIBRI_ASSIGN_OR_RETURN(Fragment opt, nfa_->Optional(c));
          f = nfa_->Concat(f, opt);
        }
        return f;
      }
      case Node::kBegin:
      case Node::kEnd: break;
    }
    return absl::InvalidArgumentError("pattern: anchors ^ and $ are only supported at the "
                                      "start and end of a top-level alternative");
  }

  // Any string body: the unanchored sides of a pattern.
  absl::StatusOr<Fragment> AnyText() {
    CodepointSet all;
    all.Add(0, 0x10FFFF);
    all.Normalize();
    COLIBRI_ASSIGN_OR_RETURN(Fragment c, nfa_->JsonStringChar(all));
    return nfa_->Star(c);
  }

 private:
  ByteNfa* nfa_;
};

absl::StatusOr<Fragment> CompileTop(absl::string_view pattern, ByteNfa* nfa, bool anchored) {
  Parser parser(pattern);
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<Node> root, parser.Parse());
  Emitter emitter(nfa);
  std::vector<Fragment> branches;
  for (std::unique_ptr<Node>& branch : root->children) {
    std::vector<std::unique_ptr<Node>>& items = branch->children;
    bool begins = anchored;
    bool ends = anchored;
    // ^ may repeat at the start ("^^a" is "^a"); likewise $ at the end.
    while (!items.empty() && items.front()->kind == Node::kBegin) {
      begins = true;
      items.erase(items.begin());
    }
    while (!items.empty() && items.back()->kind == Node::kEnd) {
      ends = true;
      items.pop_back();
    }
    COLIBRI_ASSIGN_OR_RETURN(Fragment f, emitter.Emit(*branch));
    if (!begins) {
      COLIBRI_ASSIGN_OR_RETURN(Fragment any, emitter.AnyText());
      f = nfa->Concat(any, f);
    }
    if (!ends) {
      COLIBRI_ASSIGN_OR_RETURN(Fragment any, emitter.AnyText());
      f = nfa->Concat(f, any);
    }
    branches.push_back(f);
  }
  if (branches.size() == 1) return branches[0];
  return nfa->Alternate(branches);
}

}  // namespace

absl::StatusOr<Fragment> CompileRegex(absl::string_view pattern, ByteNfa* nfa) {
  return CompileTop(pattern, nfa, /*anchored=*/false);
}

absl::StatusOr<Fragment> CompileAnchoredRegex(absl::string_view pattern, ByteNfa* nfa) {
  return CompileTop(pattern, nfa, /*anchored=*/true);
}

}  // namespace colibri::grammar
