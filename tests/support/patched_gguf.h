// Copies of the fixture GGUF files with one metadata value patched in place:
// hostile headers over real tensor tables, for the tests of what a loader does
// with counts the file cannot back.
#ifndef COLIBRI_TESTS_SUPPORT_PATCHED_GGUF_H_
#define COLIBRI_TESTS_SUPPORT_PATCHED_GGUF_H_

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/paths.h"

namespace colibri::testing {

// Writes <TempDir>/<out_name>: fixture models/<model> with the uint32 value of
// metadata key `key` set to `value`. Returns the path, or "" when the
// fixture is absent, the key is not stored as a uint32 or the copy cannot be
// written (the test then fails or skips; see the caller).
inline std::string PatchedFixture(const std::string& model, const std::string& key,
                                  uint32_t value, const std::string& out_name) {
  const std::string dir = FixturesDir();
  if (dir.empty()) return "";
  std::ifstream in(dir + "/models/" + model, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return "";
  // A metadata entry: uint64 key length, the key, uint32 value type (4 is
  // uint32), the value.
  std::string entry(8, '\0');
  for (int i = 0; i < 8; ++i) entry[i] = static_cast<char>(uint64_t{key.size()} >> (8 * i));
  entry += key;
  entry += std::string("\x04\0\0\0", 4);
  const size_t at = bytes.find(entry);
  if (at == std::string::npos || at + entry.size() + 4 > bytes.size()) return "";
  for (int i = 0; i < 4; ++i) bytes[at + entry.size() + i] = static_cast<char>(value >> (8 * i));
  const std::string path = ::testing::TempDir() + "/" + out_name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out.good() ? path : "";
}

}  // namespace colibri::testing

#endif  // COLIBRI_TESTS_SUPPORT_PATCHED_GGUF_H_
