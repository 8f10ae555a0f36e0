#include "common/config_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace colibri {
namespace {

bool IsKeyChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; }

// Reads one value at the start of `*rest` (a quoted string or a bare word)
// into `*out` and advances `*rest` past it. The error says what is wrong.
bool ReadScalar(absl::string_view* rest, std::string* out, std::string* error) {
  absl::string_view s = *rest;
  out->clear();
  if (s.empty()) {
    *error = "missing value";
    return false;
  }
  if (s[0] == '"') {
    size_t i = 1;
    for (; i < s.size() && s[i] != '"'; ++i) {
      if (s[i] != '\\') {
        out->push_back(s[i]);
        continue;
      }
      if (++i == s.size()) break;
      switch (s[i]) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 't':
          out->push_back('\t');
          break;
        default:
          *error = absl::StrCat("unsupported escape '\\", std::string(1, s[i]), "' in a string");
          return false;
      }
    }
    if (i >= s.size()) {
      *error = "unterminated string";
      return false;
    }
    rest->remove_prefix(i + 1);
    return true;
  }
  // A bare word: number or boolean, up to a separator.
  size_t i = 0;
  while (i < s.size() && s[i] != ',' && s[i] != ']' && s[i] != '#' && !absl::ascii_isspace(s[i])) {
    ++i;
  }
  const absl::string_view word = s.substr(0, i);
  bool number = !word.empty();
  for (char c : word) {
    if (!absl::ascii_isdigit(c) && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' &&
        c != '_') {
      number = false;
    }
  }
  if (!(number || word == "true" || word == "false")) {
    *error = word.empty() ? "missing value"
                          : absl::StrCat("'", word,
                                         "' is not a value (strings need double quotes; numbers, "
                                         "true and false are bare)");
    return false;
  }
  for (char c : word) {
    if (c != '_') out->push_back(c);
  }
  rest->remove_prefix(i);
  return true;
}

// What may follow a value on its line: spaces and a comment.
bool OnlyCommentLeft(absl::string_view rest) {
  rest = absl::StripLeadingAsciiWhitespace(rest);
  return rest.empty() || rest[0] == '#';
}

}  // namespace

absl::StatusOr<std::vector<ConfigEntry>> ParseConfigText(absl::string_view text,
                                                         absl::string_view source) {
  std::vector<ConfigEntry> entries;
  std::set<std::pair<std::string, std::string>> seen;
  std::string section;
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  // Lines numbered from 1; a list may go on over the lines after its key's.
  size_t index = 0;
  int line_number = 0;
  const auto line_at = [&lines](size_t i) {
    absl::string_view line = lines[i];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return absl::StripAsciiWhitespace(line);
  };
  for (; index < lines.size(); ++index) {
    line_number = static_cast<int>(index) + 1;
    auto fail = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_number, ": ", what));
    };
    absl::string_view rest = line_at(index);
    if (rest.empty() || rest[0] == '#') continue;
    if (rest[0] == '[') {
      const size_t close = rest.find(']');
      if (close == absl::string_view::npos) return fail("unterminated section header");
      const absl::string_view name = absl::StripAsciiWhitespace(rest.substr(1, close - 1));
      if (name.empty() || !std::all_of(name.begin(), name.end(), IsKeyChar)) {
        return fail(absl::StrCat("bad section name '", name, "'"));
      }
      if (!OnlyCommentLeft(rest.substr(close + 1))) return fail("text after the section header");
      section = std::string(name);
      continue;
    }
    ConfigEntry entry;
    entry.section = section;
    entry.line = line_number;
    size_t k = 0;
    while (k < rest.size() && IsKeyChar(rest[k])) ++k;
    entry.key = std::string(rest.substr(0, k));
    rest = absl::StripLeadingAsciiWhitespace(rest.substr(k));
    if (entry.key.empty() || rest.empty() || rest[0] != '=') {
      return fail("expected 'key = value'");
    }
    rest = absl::StripLeadingAsciiWhitespace(rest.substr(1));
    std::string error;
    if (!rest.empty() && rest[0] == '[') {
      entry.is_list = true;
      rest.remove_prefix(1);
      // After a value without a comma, only the closing ']' may come.
      bool want_close = false;
      while (true) {
        rest = absl::StripLeadingAsciiWhitespace(rest);
        if (rest.empty() || rest[0] == '#') {  // the list goes on on the next line
          if (index + 1 == lines.size()) {
            line_number = entry.line;
            return fail(absl::StrCat("key '", entry.key, "': the list has no closing ']'"));
          }
          rest = line_at(++index);
          line_number = static_cast<int>(index) + 1;
          continue;
        }
        if (rest[0] == ']') break;
        if (want_close) {
          return fail(absl::StrCat("key '", entry.key, "': expected ',' or ']' in the list"));
        }
        std::string value;
        if (!ReadScalar(&rest, &value, &error)) {
          return fail(absl::StrCat("key '", entry.key, "': ", error));
        }
        entry.values.push_back(std::move(value));
        rest = absl::StripLeadingAsciiWhitespace(rest);
        if (!rest.empty() && rest[0] == ',') {
          rest.remove_prefix(1);
        } else {
          want_close = true;
        }
      }
      rest.remove_prefix(1);
    } else {
      std::string value;
      if (!ReadScalar(&rest, &value, &error)) {
        return fail(absl::StrCat("key '", entry.key, "': ", error));
      }
      entry.values.push_back(std::move(value));
    }
    if (!OnlyCommentLeft(rest)) {
      return fail(absl::StrCat("key '", entry.key, "': unexpected text after the value"));
    }
    if (!seen.emplace(entry.section, entry.key).second) {
      return fail(absl::StrCat("key '", entry.key, "' given twice"));
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string message =
        absl::StrCat("cannot read config file ", path, ": ", std::strerror(err));
    return err == EACCES ? absl::PermissionDeniedError(message) : absl::NotFoundError(message);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseConfigText(text.str(), path);
}

}  // namespace colibri
