#include "common/config_file.h"

// toml++ is compiled here and nowhere else: its implementation goes into this
// one translation unit (header-only mode, so the binaries do not depend on
// libtomlplusplus.so at run time), without exceptions (errors come back as a
// parse_result) and without its formatters, which nothing here uses.
#define TOML_EXCEPTIONS 0
#define TOML_HEADER_ONLY 1
#define TOML_ENABLE_FORMATTERS 0
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace colibri {
namespace {

// More dot-separated parts than this in one key is refused before toml++
// sees the file: it builds one nested table per part, recursively, so a key of
// a few hundred thousand parts would overflow the stack.
constexpr int kMaxKeyParts = 16;

bool IsKeyChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_'; }

// The line (1-based) of the first key with more than kMaxKeyParts parts, or 0.
// A rough lexer: it skips strings (all four kinds) and comments and counts the
// dots of each run of key characters, quoted keys and dots; anything else
// ends a run. A float such as 1.5 is a run of two parts.
int FindOverlongKey(absl::string_view text) {
  int line = 1;
  int dots = 0;
  size_t i = 0;
  const auto skip_to = [&](absl::string_view end, bool escapes) {
    while (i < text.size() && !absl::StartsWith(text.substr(i), end)) {
      if (text[i] == '\n') ++line;
      if (escapes && text[i] == '\\' && i + 1 < text.size()) {
        if (text[i + 1] == '\n') ++line;
        ++i;
      }
      ++i;
    }
    i = std::min(text.size(), i + end.size());
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      const bool multi_line = absl::StartsWith(text.substr(i), std::string(3, c));
      const std::string quote(multi_line ? 3 : 1, c);
      i += quote.size();
      skip_to(quote, c == '"');
      continue;
    }
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == '.') {
      if (++dots >= kMaxKeyParts) return line;
    } else if (!IsKeyChar(c) && c != ' ' && c != '\t') {
      dots = 0;
    }
    if (c == '\n') ++line;
    ++i;
  }
  return 0;
}

// The key whose value is on or around line `line` (1-based), for the message
// of a syntax error: the key of the last key/value line before it that starts
// outside brackets, "" after a [section] header or when there is none.
std::string KeyAround(absl::string_view text, int line) {
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  std::string key;
  int depth = 0;  // open '[' and '{' at the start of a line
  for (int n = 0; n < line && n < static_cast<int>(lines.size()); ++n) {
    const absl::string_view s = absl::StripAsciiWhitespace(lines[n]);
    if (depth == 0 && !s.empty() && s[0] != '#') {
      const size_t eq = s.find('=');
      if (s[0] == '[') {
        key.clear();
      } else if (eq != absl::string_view::npos && eq > 0) {
        key = std::string(absl::StripAsciiWhitespace(s.substr(0, eq)));
      } else {
        key.clear();
      }
    }
    bool quoted = false;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '"' && (i == 0 || s[i - 1] != '\\')) quoted = !quoted;
      if (quoted) continue;
      if (c == '#') break;
      if (c == '[' || c == '{') ++depth;
      if (c == ']' || c == '}') depth = std::max(0, depth - 1);
    }
  }
  return key;
}

// A scalar as the string CLI11 parses: strings as they are, integers in
// decimal, floats in the shortest form that reads back the same, booleans as
// true/false. False (with *error set) for dates, times, tables and arrays.
bool ScalarText(const toml::node& node, std::string* out, std::string* error) {
  if (const toml::value<std::string>* s = node.as_string()) {
    *out = s->get();
    return true;
  }
  if (const toml::value<int64_t>* i = node.as_integer()) {
    *out = std::to_string(i->get());
    return true;
  }
  if (const toml::value<double>* d = node.as_floating_point()) {
    char buffer[64];
    const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), d->get());
    *out = std::string(buffer, r.ptr);
    return true;
  }
  if (const toml::value<bool>* b = node.as_boolean()) {
    *out = b->get() ? "true" : "false";
    return true;
  }
  if (node.is_array()) {
    *error = "a list inside a list is not an option value";
  } else if (node.is_table()) {
    *error = "a table is not an option value (tables are [subcommand] sections)";
  } else {
    *error = "dates and times are not option values (write them as strings)";
  }
  return false;
}

struct Converter {
  absl::string_view source;
  std::vector<ConfigEntry>* entries;

  absl::Status Fail(const toml::node& node, absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", node.source().begin.line, ": key '", key, "': ", what));
  }

  // One key = value of `section` ("" at the top level).
  absl::Status Add(const std::string& section, const std::string& key, const toml::node& node) {
    const std::string shown = section.empty() ? key : absl::StrCat(section, ".", key);
    ConfigEntry entry;
    entry.section = section;
    entry.key = key;
    entry.line = static_cast<int>(node.source().begin.line);
    std::string error;
    if (const toml::array* list = node.as_array()) {
      if (node.is_array_of_tables() && !list->empty()) {
        return Fail(node, shown, "an array of tables is not an option value");
      }
      entry.is_list = true;
      for (const toml::node& item : *list) {
        std::string value;
        if (!ScalarText(item, &value, &error)) return Fail(item, shown, error);
        entry.values.push_back(std::move(value));
      }
    } else {
      std::string value;
      if (!ScalarText(node, &value, &error)) return Fail(node, shown, error);
      entry.values.push_back(std::move(value));
    }
    entries->push_back(std::move(entry));
    return absl::OkStatus();
  }

  absl::Status AddAll(const toml::table& root) {
    for (const auto& [key, node] : root) {
      const std::string name(key.str());
      if (const toml::table* section = node.as_table()) {
        for (const auto& [inner_key, inner] : *section) {
          if (inner.is_table()) {
            return Fail(inner, absl::StrCat(name, ".", std::string(inner_key.str())),
                        "sections do not nest: a section is one [subcommand]");
          }
          absl::Status status = Add(name, std::string(inner_key.str()), inner);
          if (!status.ok()) return status;
        }
        continue;
      }
      absl::Status status = Add("", name, node);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::StatusOr<std::vector<ConfigEntry>> ParseConfigText(absl::string_view text,
                                                         absl::string_view source) {
  if (text.size() > kMaxConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", text.size(),
                                                   " bytes; a config file has at most ",
                                                   kMaxConfigBytes, " bytes"));
  }
  if (const int line = FindOverlongKey(text); line != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", line, ": a dotted key of more than ", kMaxKeyParts, " parts"));
  }
  toml::parse_result parsed = toml::parse(std::string_view(text.data(), text.size()),
                                          std::string_view(source.data(), source.size()));
  if (!parsed) {
    const toml::parse_error& error = parsed.error();
    const int line = static_cast<int>(error.source().begin.line);
    const std::string what(error.description());
    // toml++ says "Error while parsing value: could not determine value type"
    // of a bare word such as 0.0.0.0:7070 or yes.
    std::string hint;
    if (absl::StrContains(what, "could not determine value type") ||
        absl::StrContains(what, "while parsing floating-point") ||
        absl::StrContains(what, "while parsing integer")) {
      hint = " (strings need double quotes; numbers, true and false are bare)";
    }
    const std::string key = KeyAround(text, line);
    return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ":",
                                                   key.empty() ? "" : " key '", key,
                                                   key.empty() ? "" : "':", " ", what, hint));
  }
  std::vector<ConfigEntry> entries;
  Converter converter{source, &entries};
  absl::Status status = converter.AddAll(parsed.table());
  if (!status.ok()) return status;
  // toml++ keeps keys sorted; the entries go in file order.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const ConfigEntry& a, const ConfigEntry& b) { return a.line < b.line; });
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
  // One byte more than allowed is enough for ParseConfigText to refuse it.
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return ParseConfigText(text, path);
}

}  // namespace colibri
