// `--config FILE` for a CLI11 command line: the file (common/config_file.h)
// gives values for the same options as the long flags, and a flag on the
// command line wins over the file.
#ifndef COLIBRI_COMMON_CLI_CONFIG_H_
#define COLIBRI_COMMON_CLI_CONFIG_H_

#include "CLI/CLI.hpp"

namespace colibri {

// Adds `--config FILE` to `app`, the root of a command line, and makes it
// accepted after a subcommand too (`colibri-coordinator serve --config F`).
// Call it once, after every option and subcommand is defined and before
// parsing. At parse time a key outside any section applies to the root app or,
// when the root has no such option, to the subcommand given on the command
// line; a key under `[name]` applies to subcommand `name`. A key that matches
// no option, or a syntax error, fails the parse like any other command-line
// error (CLI11_PARSE prints it and returns CLI::ExitCodes::ConfigError) with a
// message naming the file, the line and the key. The values go through each
// option's own checks. `--help` is handled after the file is read, so
// `--config F --help` checks F. Not thread-safe (as CLI::App): call from main.
void AddConfigFileOption(CLI::App* app);

}  // namespace colibri

#endif  // COLIBRI_COMMON_CLI_CONFIG_H_
