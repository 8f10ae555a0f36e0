// `--version` for the project's binaries: one line, "PROGRAM VERSION", where
// VERSION is `git describe --always --dirty` at configure time (or the
// project version without git; cmake/ColibriVersion.cmake). A target that
// includes this header links colibri_version.
#ifndef COLIBRI_COMMON_VERSION_FLAG_H_
#define COLIBRI_COMMON_VERSION_FLAG_H_

#include <string>

#include "CLI/CLI.hpp"
#include "colibri_version.h"

namespace colibri {

// "PROGRAM VERSION", e.g. "colibri-coordinator 0.1.0-12-gabcdef0".
inline std::string VersionLine(const std::string& program) {
  return program + " " + COLIBRI_VERSION_STRING;
}

// Adds `--version` to `app` (a root command line): parsing it throws
// CLI::CallForVersion, which CLI11_PARSE and cli::Parse turn into printing
// VersionLine(program) on stdout and exit code 0, before any required flag or
// subcommand is checked. Not thread-safe (as CLI::App): call from main.
inline void AddVersionFlag(CLI::App* app, const std::string& program) {
  app->set_version_flag("--version", VersionLine(program), "print the version and exit");
}

}  // namespace colibri

#endif  // COLIBRI_COMMON_VERSION_FLAG_H_
