#include "common/progress_line.h"

#include <unistd.h>

namespace colibri {
namespace {

// Erases from the cursor to the end of the line (ANSI EL 0), so a shorter
// text does not leave the tail of a longer one behind.
constexpr char kEraseToEnd[] = "\x1b[K";

}  // namespace

void ProgressLine::Update(const std::string& text) {
  if (out_ == nullptr) return;
  if (in_place_) {
    *out_ << '\r' << text << kEraseToEnd << std::flush;
  } else {
    *out_ << text << '\n' << std::flush;
  }
}

void ProgressLine::Finish(const std::string& text) {
  if (out_ == nullptr) return;
  if (in_place_) *out_ << '\r';
  *out_ << text;
  if (in_place_) *out_ << kEraseToEnd;
  *out_ << '\n' << std::flush;
}

bool StderrIsTerminal() { return ::isatty(STDERR_FILENO) != 0; }

}  // namespace colibri
