#include "model/tokenizer/special_token_splitter.h"

#include <utility>
#include <vector>

namespace colibri::tokenizer {
namespace {

// isspace() in the C locale.
bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) : vocab_(vocab) {
  for (Candidates* c : {&all_, &user_defined_}) {
    c->root.fill(-1);
    c->nodes.emplace_back();
  }
  for (int32_t id : vocab.special_tokens()) {
    Insert(all_, vocab.text(id), static_cast<int32_t>(all_.tokens.size()));
    all_.tokens.push_back(id);
    if ((vocab.attr(id) & (kAttrControl | kAttrUnknown)) == 0) {
      Insert(user_defined_, vocab.text(id), static_cast<int32_t>(user_defined_.tokens.size()));
      user_defined_.tokens.push_back(id);
    }
  }
}

void SpecialTokenSplitter::Insert(Candidates& c, absl::string_view text, int32_t index) {
  int32_t node = c.root[static_cast<uint8_t>(text[0])];
  if (node < 0) {
    node = static_cast<int32_t>(c.nodes.size());
    c.nodes.emplace_back();
    c.root[static_cast<uint8_t>(text[0])] = node;
  }
  for (size_t i = 1; i < text.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(text[i]);
    int32_t child = -1;
    for (const auto& [b, n] : c.nodes[node].next) {
      if (b == byte) child = n;
    }
    if (child < 0) {
      child = static_cast<int32_t>(c.nodes.size());
      c.nodes.emplace_back();
      c.nodes[node].next.emplace_back(byte, child);
    }
    node = child;
  }
  c.nodes[node].candidate = index;
}

std::vector<int32_t> SpecialTokenSplitter::Present(const Candidates& c,
                                                   absl::string_view text) const {
  std::vector<bool> hit(c.tokens.size(), false);
  size_t n_hit = 0;
  for (size_t p = 0; p < text.size() && n_hit < hit.size(); ++p) {
    int32_t node = c.root[static_cast<uint8_t>(text[p])];
    size_t q = p + 1;
    while (node >= 0) {
      const Node& cur = c.nodes[node];
      if (cur.candidate >= 0 && !hit[cur.candidate]) {
        hit[cur.candidate] = true;
        ++n_hit;
      }
      if (q == text.size()) break;
      const uint8_t byte = static_cast<uint8_t>(text[q++]);
      node = -1;
      for (const auto& [b, n] : cur.next) {
        if (b == byte) node = n;
      }
    }
  }
  std::vector<int32_t> present;
  for (size_t i = 0; i < hit.size(); ++i) {
    if (hit[i]) present.push_back(static_cast<int32_t>(i));
  }
  return present;
}

std::vector<Fragment> SpecialTokenSplitter::Split(absl::string_view text,
                                                  bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back(Fragment{-1, 0, text.size()});
  const Candidates& c = parse_special ? all_ : user_defined_;
  if (c.tokens.empty()) return fragments;

  std::vector<Fragment> next;
  // Only tokens occurring somewhere in `text` can split anything; the rest are
  // skipped, which leaves llama.cpp's token-by-token order intact.
  for (const int32_t index : Present(c, text)) {
    const int32_t token = c.tokens[index];
    const absl::string_view special = vocab_.text(token);
    const uint32_t attr = vocab_.attr(token);
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t cur = f.offset;
      const size_t end = f.offset + f.length;
      const absl::string_view window = text.substr(0, end);
      while (true) {
        const size_t match = window.find(special, cur);
        if (match == absl::string_view::npos) {
          if (end > cur) next.push_back(Fragment{-1, cur, end - cur});
          break;
        }
        size_t left = match - cur;
        if (attr & kAttrLstrip) {
          while (left > 0 && IsAsciiSpace(text[cur + left - 1])) --left;
        }
        if (left > 0) next.push_back(Fragment{-1, cur, left});
        next.push_back(Fragment{token, 0, 0});
        cur = match + special.size();
        if (attr & kAttrRstrip) {
          while (cur < end && IsAsciiSpace(text[cur])) ++cur;
        }
        if (cur >= end) break;
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace colibri::tokenizer
