// What `colibri-coordinator run` prints: valid UTF-8 whatever bytes the model
// emits (as serve sends them).
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // cut short
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

TEST(RunOutputTest, IsValidUtf8WhateverTheModelEmits) {
  if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
  // Near-uniform sampling over a byte-level vocabulary: with this seed the
  // model emits byte tokens that are not UTF-8 on their own.
  const testing::CommandResult r = testing::RunCommand(
      {testing::BinaryPath("coordinator/colibri-coordinator"), "run", "--model",
       testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf", "--prompt", "Hello",
       "--n-predict", "500", "--temp", "100", "--seed", "1", "--ignore-eos", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(r.out.size(), 500u);
  EXPECT_TRUE(IsValidUtf8(r.out)) << r.out;
}

}  // namespace
}  // namespace colibri
