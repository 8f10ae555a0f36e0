// Config files of the three binaries (`--config FILE`): a small subset of TOML
// whose keys are the long flag names without the leading "--".
//
//   # a comment (also after a value)
//   listen = "0.0.0.0:7070"         # a string: double quotes, escapes \" \\ \n \t
//   ram-budget = "8G"
//   io-threads = 4                   # a number (integer or decimal), written as is
//   insecure = false                 # a flag: true or false
//   nodes = ["a:7070", "b:7070"]    # a list; it may go on over several lines,
//                                    # with comments and a trailing comma
//   [generate]                       # the keys below belong to a subcommand
//   temp = 0.7
//
// Keys are letters, digits, '-' and '_'; each key appears once per section.
// Everything else (tables of tables, multi-line strings, dates, inline tables)
// is rejected with the line it is on.
#ifndef COLIBRI_COMMON_CONFIG_FILE_H_
#define COLIBRI_COMMON_CONFIG_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri {

struct ConfigEntry {
  std::string section;              // "" before any [section] header
  std::string key;                  // e.g. "ram-budget"
  std::vector<std::string> values;  // one for a scalar, any number for a list
  bool is_list = false;
  int line = 0;  // 1-based line of the key in the file
};

// Parses `text`, the contents of the file `source` (used only in messages).
// InvalidArgument naming `source:line` and what is wrong on a syntax error or
// a repeated key.
absl::StatusOr<std::vector<ConfigEntry>> ParseConfigText(absl::string_view text,
                                                         absl::string_view source);

// Reads and parses the file at `path`: NotFound / PermissionDenied when it
// cannot be read, otherwise as ParseConfigText.
absl::StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path);

}  // namespace colibri

#endif  // COLIBRI_COMMON_CONFIG_FILE_H_
