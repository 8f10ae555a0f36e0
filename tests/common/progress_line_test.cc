#include "common/progress_line.h"

#include <sstream>

#include "gtest/gtest.h"

namespace colibri {
namespace {

TEST(ProgressLineTest, NotATerminalWritesPlainLines) {
  std::ostringstream out;
  ProgressLine line(&out, /*in_place=*/false);
  line.Update("ingest a: 1 of 4");
  line.Update("ingest a: 2 of 4");
  line.Finish("ingest a: 4 of 4, done");
  EXPECT_EQ(out.str(), "ingest a: 1 of 4\ningest a: 2 of 4\ningest a: 4 of 4, done\n");
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
  EXPECT_EQ(out.str().find('\x1b'), std::string::npos);
}

TEST(ProgressLineTest, OnATerminalRewritesOneLineAndEndsItWhenDone) {
  std::ostringstream out;
  ProgressLine line(&out, /*in_place=*/true);
  line.Update("ingest a: 1 of 4");
  line.Update("ingest a: 2 of 4");
  line.Finish("done");
  EXPECT_EQ(out.str(),
            "\ringest a: 1 of 4\x1b[K\ringest a: 2 of 4\x1b[K\rdone\x1b[K\n");
}

TEST(ProgressLineTest, NullStreamWritesNothing) {
  ProgressLine line(nullptr, true);
  line.Update("x");
  line.Finish("y");
}

}  // namespace
}  // namespace colibri
