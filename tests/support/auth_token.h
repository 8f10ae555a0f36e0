// Auth tokens for tests: random, of the length the binaries require
// (rpc/auth_token.h), so tests never rely on a guessable one. Header-only.
#ifndef COLIBRI_TESTS_SUPPORT_AUTH_TOKEN_H_
#define COLIBRI_TESTS_SUPPORT_AUTH_TOKEN_H_

#include <fstream>
#include <random>
#include <string>

namespace colibri::testing {

// 64 random hex digits, as `openssl rand -hex 32` makes. Thread-safe.
inline std::string RandomAuthToken() {
  std::random_device device;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 64; ++i) token += kHex[device() % 16];
  return token;
}

// Writes a fresh RandomAuthToken() and a newline to `path` (replacing the
// file); returns the token.
inline std::string WriteAuthTokenFile(const std::string& path) {
  const std::string token = RandomAuthToken();
  std::ofstream(path) << token << "\n";
  return token;
}

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_AUTH_TOKEN_H_
