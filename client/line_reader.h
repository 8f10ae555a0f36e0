// Where `colibri-client chat` reads its user lines from.
//
// StreamLineReader reads plain lines of a stream (a pipe or a file: no prompt,
// no editing). TerminalLineReader edits lines on a terminal with libedit
// (emacs keys, the arrows recall earlier lines) and keeps that history in a
// file between sessions. Ctrl-C at its prompt: an empty line ends the input,
// a line being typed is dropped and the prompt comes back.
//
// Thread-safety: one thread per reader.
#ifndef COLIBRI_CLIENT_LINE_READER_H_
#define COLIBRI_CLIENT_LINE_READER_H_

#include <cstdio>
#include <istream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace colibri::client {

class LineReader {
 public:
  virtual ~LineReader() = default;
  // The next line, without its newline, into `line`. False at the end of
  // the input (end of file, Ctrl-D, Ctrl-C at an empty prompt).
  virtual bool ReadLine(std::string* line) = 0;
  // Adds `line` to the history the arrows recall (and its file). Default:
  // nothing.
  virtual void Remember(const std::string& line) { (void)line; }
};

class StreamLineReader : public LineReader {
 public:
  explicit StreamLineReader(std::istream& in) : in_(in) {}
  bool ReadLine(std::string* line) override;

 private:
  std::istream& in_;
};

// The history file of chat: $XDG_STATE_HOME/colibri/chat_history, else
// ~/.local/state/colibri/chat_history; "" when neither variable is set.
std::string ChatHistoryPath();

class TerminalLineReader : public LineReader {
 public:
  // Edits on stdin/stdout, which must be a terminal; shows `prompt`.
  // `history_path`: loaded now, rewritten (mode 0600, its folder created
  // 0700) after each Remember; "" keeps the history in memory only. A
  // history file that cannot be read or written is reported once on `err`
  // and the session goes on without it. Interrupts come from
  // interrupt_flag.h (InstallInterruptFlag must have run).
  static std::unique_ptr<TerminalLineReader> Open(const std::string& prompt,
                                                  const std::string& history_path,
                                                  FILE* err);
  ~TerminalLineReader() override;
  TerminalLineReader(const TerminalLineReader&) = delete;
  TerminalLineReader& operator=(const TerminalLineReader&) = delete;

  bool ReadLine(std::string* line) override;
  void Remember(const std::string& line) override;

  struct State;  // defined in line_reader.cc (libedit's callbacks reach it)

 private:
  explicit TerminalLineReader(std::unique_ptr<State> state);
  void Save();

  const std::unique_ptr<State> state_;
};

}  // namespace colibri::client

#endif  // COLIBRI_CLIENT_LINE_READER_H_
