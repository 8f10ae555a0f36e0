// A status line of a long operation (ingest of experts, import): on a
// terminal it is rewritten in place ("\r" TEXT, then the rest of the old
// line erased), the last state ends with a newline; anywhere else (a log
// file, journald, a pipe) every update is a line of its own, with no
// carriage return or escape sequence.
//
// Thread-safety: not thread-safe; callers that share `out` serialize.
#ifndef COLIBRI_COMMON_PROGRESS_LINE_H_
#define COLIBRI_COMMON_PROGRESS_LINE_H_

#include <ostream>
#include <string>

namespace colibri {

class ProgressLine {
 public:
  // `out` is borrowed; null writes nothing. `in_place`: rewrite one line
  // (a terminal: see StderrIsTerminal).
  ProgressLine(std::ostream* out, bool in_place) : out_(out), in_place_(in_place) {}

  // The operation's state so far.
  void Update(const std::string& text);
  // The final state: stays on the screen.
  void Finish(const std::string& text);

 private:
  std::ostream* const out_;
  const bool in_place_;
};

// Whether stderr is a terminal (where progress lines go in place).
bool StderrIsTerminal();

}  // namespace colibri

#endif  // COLIBRI_COMMON_PROGRESS_LINE_H_
