// Range checks shared by the command lines of the three binaries (CLI11
// validators), and the parse step that turns every usage error into exit
// status 2. Header-only, for main.cc files (which have CLI11's include path).
//
//   app.add_option("--threads", threads)->check(colibri::cli::kThreadCount);
//   app.add_option("--listen", listen)->check(colibri::cli::ListenAddress());
//   if (int code = colibri::cli::Parse(app, argc, argv); code >= 0) return code;
#ifndef COLIBRI_COMMON_CLI_CHECKS_H_
#define COLIBRI_COMMON_CLI_CHECKS_H_

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace colibri::cli {

// Worker threads: 0 (meaning the physical cores) up to 1024.
inline const CLI::Range kThreadCount(0, 1024);
// Context positions asked for on a command line (0: the default); commands
// also cap it at the model's context length.
inline const CLI::Range kContextSize(0, 1 << 24);
// Prompt tokens per batch.
inline const CLI::Range kBatchSize(1, 1 << 16);
// Tokens a client asks a server to generate (the server's default limit).
inline const CLI::Range kTokenCount(0, 1 << 20);
// Concurrent sessions of a server.
inline const CLI::Range kSessionCount(1, 256);
// Copies of each expert.
inline const CLI::Range kReplicaCount(1, 64);
// Experts predicted per token (0: the model's top-k).
inline const CLI::Range kExpertCount(0, 4096);
// A non-negative duration in seconds, up to a week.
inline const CLI::Range kSeconds(0.0, 7 * 24 * 3600.0);
// Most drafted tokens per speculative verify step (coordinator::kMaxDraftTokens).
inline const CLI::Range kDraftTokens(1, 64);
// A sampling probability.
inline const CLI::Range kProbability(0.0, 1.0);

// The port of "HOST:PORT" (IPv6 as "[ADDR]:PORT"): digits only, in
// [min_port, 65535]. Empty string when it is fine, else the reason.
inline std::string CheckHostPort(const std::string& address, int min_port) {
  const size_t colon = address.rfind(':');
  const size_t bracket = address.rfind(']');
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket)) {
    return "'" + address + "' has no :PORT";
  }
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < min_port ||
      std::stoi(port) > 65535) {
    return "port '" + port + "' of '" + address + "' is not in [" + std::to_string(min_port) +
           ", 65535]";
  }
  return "";
}

// A server's listen address: HOST:PORT with port 0 (the OS picks) to 65535,
// or a unix:PATH socket (a non-empty path).
inline CLI::Validator ListenAddress() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value.rfind("unix:", 0) == 0) {
          return value.size() > 5 ? "" : "unix: needs a socket path";
        }
        return CheckHostPort(value, 0);
      },
      "HOST:PORT");
}

// An address to connect to: HOST:PORT with port 1 to 65535.
inline CLI::Validator ConnectAddress() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value.rfind("unix:", 0) == 0) return "";
        return CheckHostPort(value, 1);
      },
      "HOST:PORT");
}

// Parses the command line. Returns -1 to go on, 0 after printing --help, or
// 2 after printing a usage error (unknown flag, a value out of range, a
// missing required flag) to stderr.
inline int Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return -1;
}

// A list of token ids separated by commas ("1,2,3"; spaces around an id are
// allowed). Fills *ids and returns "" when it is fine, else the reason: an
// empty place in the list ("1,,2", "1,", ""), or a piece that is not a 32-bit
// integer.
inline std::string ParseTokenIds(const std::string& text, std::vector<int32_t>* ids) {
  ids->clear();
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    piece = absl::StripAsciiWhitespace(piece);
    if (piece.empty()) return "empty token id in '" + text + "'";
    int32_t id = 0;
    if (!absl::SimpleAtoi(piece, &id)) return "not a token id: '" + std::string(piece) + "'";
    ids->push_back(id);
  }
  return "";
}

}  // namespace colibri::cli

#endif  // COLIBRI_COMMON_CLI_CHECKS_H_
