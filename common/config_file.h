// Config files of the three binaries (`--config FILE`): TOML (parsed by
// toml++) whose keys are the long flag names without the leading "--".
//
//   # a comment (also after a value, and inside a list)
//   listen = "0.0.0.0:7070"         # a string: any TOML string, multi-line too
//   ram-budget = "8G"
//   io-threads = 4                   # a number (integer or float)
//   insecure = false                 # a flag: true or false
//   nodes = ["a:7070", "b:7070"]    # a list; it may go on over several lines,
//                                    # with comments and a trailing comma
//   [generate]                       # the keys below belong to a subcommand
//   temp = 0.7
//   serve.threads = 4                # also a subcommand's key (a dotted key)
//   run = { seed = 7 }               # and so is an inline table's
//
// A value is a scalar or a list of scalars; a section is one level deep
// (sections of sections, lists of lists, arrays of tables, dates and times
// are rejected naming the key and its line). Each key appears once per
// section. Files are at most kMaxConfigBytes; nesting is bounded, so hostile
// files get an error, never a crash.
#ifndef COLIBRI_COMMON_CONFIG_FILE_H_
#define COLIBRI_COMMON_CONFIG_FILE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colibri {

// Largest config file accepted.
inline constexpr size_t kMaxConfigBytes = 1 << 20;

struct ConfigEntry {
  std::string section;  // "" before any [section] header
  std::string key;      // e.g. "ram-budget"
  // One for a scalar, any number for a list: strings as written, integers in
  // decimal, floats in their shortest exact form, flags as true/false.
  std::vector<std::string> values;
  bool is_list = false;
  int line = 0;  // 1-based line of the key in the file
};

// Parses `text`, the contents of the file `source` (used only in messages).
// InvalidArgument naming `source:line`, the key when there is one, and what
// is wrong on a syntax error, a repeated key, a value that is no option value
// or a file that is too large.
absl::StatusOr<std::vector<ConfigEntry>> ParseConfigText(absl::string_view text,
                                                         absl::string_view source);

// Reads and parses the file at `path`: NotFound / PermissionDenied when it
// cannot be read, otherwise as ParseConfigText.
absl::StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path);

}  // namespace colibri

#endif  // COLIBRI_COMMON_CONFIG_FILE_H_
