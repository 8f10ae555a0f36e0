#include "model/chat_template/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "model/chat_template/utf8.h"

namespace colibri::chat_template {
namespace {

bool IsNameStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool strip_next = false;  // after -%}, -}}, -#}: drop all leading whitespace
    bool trim_next = false;   // after %} or #}: drop one newline (trim_blocks)
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t start = FindTagStart(pos);
      std::string text = src_.substr(pos, start - pos);
      const size_t text_offset = pos;
      if (strip_next) {
        size_t i = 0;
        while (i < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
        text.erase(0, i);
      } else if (trim_next && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
      strip_next = trim_next = false;
      if (start == src_.size()) {
        Emit(Token::Type::kText, std::move(text), text_offset);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char modifier = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && absl::ascii_isspace(static_cast<unsigned char>(text.back()))) {
          text.pop_back();
        }
      } else if (modifier != '+' && kind != '{') {
        // lstrip_blocks: spaces and tabs between the line start and the tag
        // (judged on the source, before trim_blocks took a newline).
        const size_t nl = start == 0 ? std::string::npos : src_.rfind('\n', start - 1);
        const size_t line_start = nl == std::string::npos || nl < text_offset
                                      ? (LineStartsAt(text_offset) ? text_offset : start)
                                      : nl + 1;
        bool blank = true;
        for (size_t i = line_start; i < start; ++i) {
          if (src_[i] != ' ' && src_[i] != '\t') blank = false;
        }
        if (blank) text.erase(text.size() - std::min(text.size(), start - line_start));
      }
      Emit(Token::Type::kText, std::move(text), text_offset);
      pos = start + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t end = src_.find("#}", pos);
        if (end == std::string::npos) return Error(start, "unterminated comment");
        if (end > pos && src_[end - 1] == '-') {
          strip_next = true;
        } else if (!(end > pos && src_[end - 1] == '+')) {
          trim_next = true;
        }
        pos = end + 2;
        continue;
      }
      const bool block = kind == '%';
      Emit(block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", start);
      absl::StatusOr<size_t> end = LexExpression(pos, block, &strip_next, &trim_next);
      if (!end.ok()) return end.status();
      if (block && IsRawBlockStart()) {
        absl::StatusOr<size_t> after = LexRaw(*end, &strip_next, &trim_next);
        if (!after.ok()) return after.status();
        end = after;
      }
      pos = *end;
    }
    Emit(Token::Type::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  // The offset of the next "{{", "{%" or "{#" at or after pos, or src_.size().
  size_t FindTagStart(size_t pos) const {
    while (true) {
      pos = src_.find('{', pos);
      if (pos == std::string::npos || pos + 1 >= src_.size()) return src_.size();
      const char next = src_[pos + 1];
      if (next == '{' || next == '%' || next == '#') return pos;
      ++pos;
    }
  }

  bool LineStartsAt(size_t offset) const { return offset == 0 || src_[offset - 1] == '\n'; }

  void Position(size_t offset, int* line, int* column) const {
    *line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++*line;
        line_start = i + 1;
      }
    }
    *column = static_cast<int>(offset - line_start) + 1;
  }

  absl::Status Error(size_t offset, absl::string_view what) const {
    int line, column;
    Position(offset, &line, &column);
    return absl::InvalidArgumentError(
        absl::StrCat("template syntax error at line ", line, ", column ", column, ": ", what));
  }

  void Emit(Token::Type type, std::string text, size_t offset) {
    if (type == Token::Type::kText && text.empty()) return;
    Token t;
    t.type = type;
    t.text = std::move(text);
    // Positions are computed incrementally: tokens come in source order.
    while (line_scan_ < offset && line_scan_ < src_.size()) {
      if (src_[line_scan_] == '\n') {
        ++line_;
        line_start_ = line_scan_ + 1;
      }
      ++line_scan_;
    }
    t.line = line_;
    t.column = static_cast<int>(offset - line_start_) + 1;
    tokens_.push_back(std::move(t));
  }

  // Lexes the inside of a tag starting at pos; returns the offset after its
  // closing delimiter.
  absl::StatusOr<size_t> LexExpression(size_t pos, bool block, bool* strip_next, bool* trim_next) {
    const char close = block ? '%' : '}';
    int depth = 0;
    while (true) {
      while (pos < src_.size() && absl::ascii_isspace(static_cast<unsigned char>(src_[pos]))) ++pos;
      if (pos >= src_.size())
        return Error(pos, block ? "unterminated '{%' tag" : "unterminated '{{' tag");
      const char c = src_[pos];
      if (depth == 0) {
        size_t p = pos;
        char modifier = '\0';
        if ((c == '-' || c == '+') && p + 1 < src_.size() && src_[p + 1] == close) {
          modifier = c;
          ++p;
        }
        if (p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}') {
          Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", pos);
          if (modifier == '-') {
            *strip_next = true;
          } else if (block && modifier != '+') {
            *trim_next = true;
          }
          return p + 2;
        }
      }
      if (IsNameStart(c)) {
        size_t end = pos;
        while (end < src_.size() && IsNameChar(src_[end])) ++end;
        Emit(Token::Type::kName, src_.substr(pos, end - pos), pos);
        pos = end;
      } else if (absl::ascii_isdigit(c)) {
        absl::StatusOr<size_t> end = LexNumber(pos);
        if (!end.ok()) return end.status();
        pos = *end;
      } else if (c == '\'' || c == '"') {
        absl::StatusOr<size_t> end = LexString(pos);
        if (!end.ok()) return end.status();
        pos = *end;
      } else {
        static constexpr absl::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (absl::string_view two : kTwo) {
          if (src_.compare(pos, 2, two.data(), two.size()) == 0) op = std::string(two);
        }
        if (op.empty()) {
          if (absl::string_view("+-*/%~<>=()[]{},.:|").find(c) == absl::string_view::npos) {
            return Error(pos, absl::StrCat("unexpected character '", std::string(1, c), "'"));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        Emit(Token::Type::kOperator, op, pos);
        pos += op.size();
      }
    }
  }

  absl::StatusOr<size_t> LexNumber(size_t pos) {
    size_t end = pos;
    bool is_float = false;
    while (end < src_.size() && (absl::ascii_isdigit(src_[end]) || src_[end] == '_')) ++end;
    if (end + 1 < src_.size() && src_[end] == '.' && absl::ascii_isdigit(src_[end + 1])) {
      is_float = true;
      ++end;
      while (end < src_.size() && (absl::ascii_isdigit(src_[end]) || src_[end] == '_')) ++end;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && absl::ascii_isdigit(src_[e])) {
        is_float = true;
        end = e;
        while (end < src_.size() && absl::ascii_isdigit(src_[end])) ++end;
      }
    }
    std::string digits;
    for (size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') digits += src_[i];
    }
    Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, digits, pos);
    errno = 0;
    if (is_float) {
      tokens_.back().float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      tokens_.back().int_value = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error(pos, "integer literal out of range");
    }
    return end;
  }

  absl::StatusOr<size_t> LexString(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t i = pos + 1;
    while (true) {
      if (i >= src_.size()) return Error(pos, "unterminated string");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        value += c;
        ++i;
        continue;
      }
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case 'a':
          value += '\a';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) return Error(i - 2, "truncated escape in string");
          const std::string hex = src_.substr(i, n);
          for (char h : hex) {
            if (!absl::ascii_isxdigit(h)) return Error(i - 2, "bad escape in string");
          }
          const unsigned long cp = std::strtoul(hex.c_str(), nullptr, 16);
          if (cp > 0x10FFFF) return Error(i - 2, "escape out of the Unicode range");
          AppendUtf8(static_cast<uint32_t>(cp), &value);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = e - '0';
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) {
              cp = cp * 8 + (src_[i++] - '0');
            }
            AppendUtf8(cp, &value);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    Emit(Token::Type::kString, std::move(value), pos);
    return i + 1;
  }

  // After "{%": is the tag just lexed "{% raw %}"?
  bool IsRawBlockStart() const {
    const size_t n = tokens_.size();
    return n >= 3 && tokens_[n - 1].type == Token::Type::kBlockEnd &&
           tokens_[n - 2].type == Token::Type::kName && tokens_[n - 2].text == "raw" &&
           tokens_[n - 3].type == Token::Type::kBlockBegin;
  }

  // The body of {% raw %}...{% endraw %} as one text token.
  absl::StatusOr<size_t> LexRaw(size_t pos, bool* strip_next, bool* trim_next) {
    tokens_.resize(tokens_.size() - 3);
    size_t search = pos;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) return Error(pos, "missing {% endraw %}");
      size_t p = open + 2;
      const bool strip_before = p < src_.size() && src_[p] == '-';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      while (p < src_.size() && absl::ascii_isspace(static_cast<unsigned char>(src_[p]))) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && absl::ascii_isspace(static_cast<unsigned char>(src_[p]))) ++p;
      char modifier = '\0';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) modifier = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) return Error(open, "malformed {% endraw %}");
      std::string text = src_.substr(pos, open - pos);
      if (*strip_next) {
        size_t i = 0;
        while (i < text.size() && absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
        text.erase(0, i);
      } else if (*trim_next && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
      if (strip_before) {
        while (!text.empty() && absl::ascii_isspace(static_cast<unsigned char>(text.back()))) {
          text.pop_back();
        }
      }
      Emit(Token::Type::kText, std::move(text), pos);
      *strip_next = modifier == '-';
      *trim_next = modifier != '-' && modifier != '+';
      return p + 2;
    }
  }

  std::string src_;
  std::vector<Token> tokens_;
  size_t line_scan_ = 0;
  size_t line_start_ = 0;
  int line_ = 1;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source) {
  // Jinja normalises newlines to "\n" and drops one trailing newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).Run();
}

}  // namespace colibri::chat_template
