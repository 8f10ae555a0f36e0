#include "model/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/custom_splitters.h"
#include "model/tokenizer/unicode_util.h"

namespace colibri::tokenizer {
namespace {

constexpr char kGpt2Regex[] =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr char kLlama3RegexCi[] =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr char kLlama3Regex[] =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Collapsed code units standing for non-ASCII code points.
constexpr uint32_t kCollapsedOther = 0xD0;
constexpr uint32_t kCollapsedWhitespace = 0x0B;

struct Category {
  const char* name;  // as written in a regex
  uint16_t flag;
};
constexpr Category kCategories[] = {
    {"\\p{N}", kCpNumber},  {"\\p{L}", kCpLetter},  {"\\p{P}", kCpPunctuation},
    {"\\p{M}", kCpMark},    {"\\p{S}", kCpSymbol},  {"\\p{Lu}", kCpLetter},
    {"\\p{Ll}", kCpLetter}, {"\\p{Lt}", kCpLetter}, {"\\p{Lm}", kCpLetter},
    {"\\p{Lo}", kCpLetter},
};

uint32_t CollapsedUnit(uint16_t category_flag) {
  switch (category_flag) {
    case kCpNumber:
      return 0xD1;
    case kCpLetter:
      return 0xD2;
    case kCpPunctuation:
      return 0xD3;
    case kCpMark:
      return 0xD4;
    case kCpSymbol:
      return 0xD5;
    default:
      return kCollapsedOther;
  }
}

// The ASCII members of each category, as llama.cpp's k_ucat_map spells them
// (its \p{S} leaves out '~').
const char* AsciiClass(uint16_t category_flag) {
  switch (category_flag) {
    case kCpNumber:
      return "0-9";
    case kCpLetter:
      return "A-Za-z";
    case kCpPunctuation:
      return "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}";
    case kCpSymbol:
      return "\\$\\+<->^`\\|";
    default:
      return "";
  }
}

bool UsesCategories(absl::string_view regex) {
  for (const Category& c : kCategories) {
    if (regex.find(c.name) != absl::string_view::npos) return true;
  }
  return false;
}

// llama.cpp's rewrite of a regex for the collapsed text: \p{X} becomes the
// category's code unit plus its ASCII members, bracketed unless already inside [].
absl::StatusOr<std::vector<uint32_t>> CollapseRegex(absl::string_view regex) {
  std::vector<uint32_t> out;
  bool inside = false;
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (static_cast<uint8_t>(c) >= 0x80) {
      return absl::InvalidArgumentError(
          absl::StrCat("regex mixes unicode categories and non-ASCII characters: ", regex));
    }
    if (c == '[' && (i == 0 || regex[i - 1] != '\\')) {
      out.push_back('[');
      inside = true;
      continue;
    }
    if (inside && c == ']' && regex[i - 1] != '\\') {
      out.push_back(']');
      inside = false;
      continue;
    }
    if (c == '\\' && i + 3 < regex.size() && regex[i + 1] == 'p' && regex[i + 2] == '{') {
      const size_t close = regex.find('}', i + 3);
      if (close != absl::string_view::npos && close <= i + 10) {
        const absl::string_view name = regex.substr(i, close - i + 1);
        const Category* found = nullptr;
        for (const Category& cat : kCategories) {
          if (name == cat.name) found = &cat;
        }
        if (found != nullptr) {
          if (!inside) out.push_back('[');
          out.push_back(CollapsedUnit(found->flag));
          for (const char* p = AsciiClass(found->flag); *p != '\0'; ++p) out.push_back(*p);
          if (!inside) out.push_back(']');
          i = close;
          continue;
        }
      }
    }
    out.push_back(static_cast<uint8_t>(c));
  }
  return out;
}

std::vector<uint32_t> Utf8ToUnits(absl::string_view s) {
  std::vector<uint32_t> out;
  DecodeUtf8(s, &out);
  return out;
}

std::string Pcre2Message(int error) {
  std::array<PCRE2_UCHAR, 256> message{};
  pcre2_get_error_message(error, message.data(), message.size());
  std::string text;
  for (PCRE2_UCHAR c : message) {
    if (c == 0) break;
    AppendUtf8(c, &text);
  }
  return text;
}

// Appends `len` to `out` unless it is zero.
inline void Emit(size_t len, std::vector<uint32_t>* out) {
  if (len > 0) out->push_back(static_cast<uint32_t>(len));
}

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { kGpt2, kLlama3, kCollapsed, kRaw };
  Kind kind = Kind::kRaw;
  pcre2_code* code = nullptr;

  ~Step() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    absl::Span<const std::string> regexes) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  for (const std::string& regex : regexes) {
    auto step = std::make_unique<Step>();
    std::vector<uint32_t> pattern;
    if (regex == kGpt2Regex) {
      step->kind = Step::Kind::kGpt2;
    } else if (regex == kLlama3Regex || regex == kLlama3RegexCi) {
      step->kind = Step::Kind::kLlama3;
    } else if (UsesCategories(regex)) {
      step->kind = Step::Kind::kCollapsed;
      auto collapsed = CollapseRegex(regex);
      if (!collapsed.ok()) return collapsed.status();
      pattern = *std::move(collapsed);
      pre->needs_collapsed_ = true;
    } else {
      step->kind = Step::Kind::kRaw;
      pattern = Utf8ToUnits(regex);
      pre->needs_raw_ = true;
    }
    if (!pattern.empty()) {
      int error = 0;
      PCRE2_SIZE error_offset = 0;
      // ECMAScript '$' matches only at the very end.
      step->code = pcre2_compile(pattern.data(), pattern.size(), PCRE2_DOLLAR_ENDONLY, &error,
                                 &error_offset, nullptr);
      if (step->code == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex '", regex,
                                                       "' does not compile at ", error_offset, ": ",
                                                       Pcre2Message(error)));
      }
      // Without JIT support the interpreter runs; same results, slower.
      pcre2_jit_compile(step->code, PCRE2_JIT_COMPLETE);
    }
    pre->steps_.push_back(std::move(step));
  }
  return pre;
}

namespace {

// RAII holders for PCRE2's per-call state.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

// Matches once; on a JIT stack overflow retries with a large JIT stack.
int Match(const pcre2_code* code, const uint32_t* subject, size_t length, size_t start,
          uint32_t options, MatchState* state) {
  int rc = pcre2_match(code, subject, length, start, options, state->data, state->context);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT && state->jit_stack == nullptr) {
    state->jit_stack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, nullptr);
    state->context = pcre2_match_context_create(nullptr);
    if (state->jit_stack == nullptr || state->context == nullptr) return rc;
    pcre2_jit_stack_assign(state->context, nullptr, state->jit_stack);
    rc = pcre2_match(code, subject, length, start, options, state->data, state->context);
  }
  return rc;
}

// Splits the piece `subject[0, length)` into matches and the text between them,
// as std::regex_iterator does.
absl::Status SplitByRegex(const pcre2_code* code, const uint32_t* subject, size_t length,
                          MatchState* state, std::vector<uint32_t>* out) {
  size_t last = 0;   // end of the previous match
  size_t start = 0;  // where the next search starts
  uint32_t options = 0;
  while (start <= length) {
    const int rc = Match(code, subject, length, start, options, state);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // No non-empty match at an empty match's position: move on one unit.
      options = 0;
      ++start;
      continue;
    }
    if (rc < 0) {
      return absl::InternalError(absl::StrCat("pre-tokenizer regex failed: ", Pcre2Message(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state->data);
    const size_t match_begin = ovector[0];
    const size_t match_end = ovector[1];
    Emit(match_begin - last, out);
    Emit(match_end - match_begin, out);
    last = match_end;
    start = match_end;
    options = match_end == match_begin ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  Emit(length - last, out);
  return absl::OkStatus();
}

}  // namespace

absl::Status PreTokenizer::Split(absl::Span<const uint32_t> cps,
                                 std::vector<uint32_t>* word_lengths) const {
  const size_t n = cps.size();
  if (n == 0) return absl::OkStatus();
  std::vector<uint16_t> flags(n);  // [n]
  for (size_t i = 0; i < n; ++i) flags[i] = CodepointFlags(cps[i]);

  std::vector<uint32_t> collapsed;  // [n]: ASCII as is, others by category
  if (needs_collapsed_) {
    collapsed.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (cps[i] < 0x80) {
        collapsed[i] = cps[i];
      } else if (flags[i] & kCpWhitespace) {
        collapsed[i] = kCollapsedWhitespace;
      } else {
        collapsed[i] = CollapsedUnit(flags[i] & kCpCategoryMask);
      }
    }
  }
  std::vector<uint32_t> raw;  // [n]: code points, non-ASCII whitespace as 0x0B
  if (needs_raw_) {
    raw.assign(cps.begin(), cps.end());
    for (size_t i = 0; i < n; ++i) {
      if (raw[i] >= 0x80 && (flags[i] & kCpWhitespace)) raw[i] = kCollapsedWhitespace;
    }
  }

  std::vector<uint32_t> pieces = {static_cast<uint32_t>(n)};
  std::vector<uint32_t> next;
  MatchState state;
  for (const auto& step : steps_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    if (step->code != nullptr && state.data == nullptr) {
      // Every step has few capture groups; 16 pairs is plenty (the ovector keeps
      // only what fits, which is all SplitByRegex reads).
      state.data = pcre2_match_data_create(16, nullptr);
      if (state.data == nullptr) return absl::ResourceExhaustedError("out of memory for PCRE2");
    }
    size_t begin = 0;
    for (const uint32_t len : pieces) {
      const size_t end = begin + len;
      switch (step->kind) {
        case Step::Kind::kGpt2:
          SplitGpt2(cps.data(), flags.data(), begin, end, &next);
          break;
        case Step::Kind::kLlama3:
          SplitLlama3(cps.data(), flags.data(), begin, end, &next);
          break;
        case Step::Kind::kCollapsed:
        case Step::Kind::kRaw: {
          const uint32_t* subject =
              (step->kind == Step::Kind::kCollapsed ? collapsed.data() : raw.data()) + begin;
          absl::Status status = SplitByRegex(step->code, subject, len, &state, &next);
          if (!status.ok()) return status;
          break;
        }
      }
      begin = end;
    }
    pieces.swap(next);
  }
  word_lengths->insert(word_lengths->end(), pieces.begin(), pieces.end());
  return absl::OkStatus();
}

}  // namespace colibri::tokenizer
