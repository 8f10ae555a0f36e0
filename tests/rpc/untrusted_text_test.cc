#include "rpc/untrusted_text.h"

#include <string>

#include "gtest/gtest.h"

namespace colibri::rpc {
namespace {

TEST(UntrustedTextTest, KeepsPrintableAsciiAndEscapesTheRest) {
  EXPECT_EQ(EscapeUntrusted("model 'abc' v1.2"), "model 'abc' v1.2");
  EXPECT_EQ(EscapeUntrusted("a\nb"), "a\\x0ab");
  EXPECT_EQ(EscapeUntrusted("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(EscapeUntrusted("caf\xc3\xa9"), "caf\\xc3\\xa9");
  EXPECT_EQ(EscapeUntrusted(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(EscapeUntrusted("back\\slash"), "back\\\\slash");
}

TEST(UntrustedTextTest, CutsLongInputs) {
  EXPECT_EQ(EscapeUntrusted(std::string(1000, 'a'), 4), "aaaa...(1000 bytes)");
  EXPECT_EQ(EscapeUntrusted("abcd", 4), "abcd");
}

}  // namespace
}  // namespace colibri::rpc
