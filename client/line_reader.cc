#include "client/line_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <histedit.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <cwchar>
#include <utility>

#include "client/interrupt_flag.h"

namespace colibri::client {

bool StreamLineReader::ReadLine(std::string* line) {
  return static_cast<bool>(std::getline(in_, *line));
}

std::string ChatHistoryPath() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state != nullptr && *state == '/') {
    return std::string(state) + "/colibri/chat_history";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.local/state/colibri/chat_history";
  }
  return "";
}

struct TerminalLineReader::State {
  std::string prompt;
  std::string history_path;
  FILE* err = nullptr;
  EditLine* editor = nullptr;
  History* history = nullptr;
  bool history_failed = false;  // reported once
  bool interrupted = false;     // the last read ended with Ctrl-C
  std::mbstate_t decode = {};
};

namespace {

TerminalLineReader::State* StateOf(EditLine* editor) {
  void* state = nullptr;
  el_get(editor, EL_CLIENTDATA, &state);
  return static_cast<TerminalLineReader::State*>(state);
}

char* Prompt(EditLine* editor) { return StateOf(editor)->prompt.data(); }

// libedit's character source: its own reader retries a read that SIGINT
// interrupted; this one ends the line instead. 1: a character, 0: end of
// input, -1: interrupted or a read error.
int ReadChar(EditLine* editor, wchar_t* c) {
  TerminalLineReader::State* state = StateOf(editor);
  for (;;) {
    char byte;
    const ssize_t n = ::read(STDIN_FILENO, &byte, 1);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR && !TakeInterrupt()) continue;
      state->interrupted = errno == EINTR;
      return -1;
    }
    const size_t decoded = std::mbrtowc(c, &byte, 1, &state->decode);
    if (decoded == static_cast<size_t>(-2)) continue;  // more bytes of one character
    if (decoded == static_cast<size_t>(-1)) {          // not a character: skip the byte
      state->decode = {};
      continue;
    }
    return 1;
  }
}

// Creates the folders of `path` (mode 0700) that do not exist.
void MakeParents(const std::string& path) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1)) {
    ::mkdir(path.substr(0, at).c_str(), 0700);
  }
}

}  // namespace

std::unique_ptr<TerminalLineReader> TerminalLineReader::Open(const std::string& prompt,
                                                             const std::string& history_path,
                                                             FILE* err) {
  auto state = std::make_unique<State>();
  state->prompt = prompt;
  state->history_path = history_path;
  state->err = err;
  state->history = history_init();
  HistEvent event;
  history(state->history, &event, H_SETSIZE, 1000);
  history(state->history, &event, H_SETUNIQUE, 1);
  if (!history_path.empty() && ::access(history_path.c_str(), F_OK) == 0 &&
      history(state->history, &event, H_LOAD, history_path.c_str()) < 0) {
    std::fprintf(err, "colibri-client: cannot read the chat history %s; starting without it\n",
                 history_path.c_str());
    state->history_failed = true;
  }
  state->editor = el_init("colibri-client", stdin, stdout, err);
  el_set(state->editor, EL_CLIENTDATA, state.get());
  el_set(state->editor, EL_EDITOR, "emacs");
  el_set(state->editor, EL_PROMPT, Prompt);
  el_set(state->editor, EL_HIST, history, state->history);
  el_set(state->editor, EL_GETCFN, ReadChar);
  el_source(state->editor, nullptr);  // ~/.editrc, as other libedit programs
  return std::unique_ptr<TerminalLineReader>(new TerminalLineReader(std::move(state)));
}

TerminalLineReader::TerminalLineReader(std::unique_ptr<State> state)
    : state_(std::move(state)) {}

TerminalLineReader::~TerminalLineReader() {
  el_end(state_->editor);
  history_end(state_->history);
}

bool TerminalLineReader::ReadLine(std::string* line) {
  TakeInterrupt();  // one that came after the last reply's last token
  for (;;) {
    state_->interrupted = false;
    state_->decode = {};
    int count = 0;
    const char* text = el_gets(state_->editor, &count);
    if (text != nullptr && count > 0) {
      line->assign(text, count);
      while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
      return true;
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (!state_->interrupted) return false;  // Ctrl-D or the end of input
    const LineInfo* typed = el_line(state_->editor);
    if (typed->lastchar == typed->buffer) return false;  // Ctrl-C at an empty prompt
    // Ctrl-C over a line being typed: drop it, prompt again (el_gets starts
    // from an empty buffer).
  }
}

void TerminalLineReader::Remember(const std::string& line) {
  HistEvent event;
  history(state_->history, &event, H_ENTER, line.c_str());
  Save();
}

void TerminalLineReader::Save() {
  if (state_->history_path.empty() || state_->history_failed) return;
  const std::string& path = state_->history_path;
  MakeParents(path);
  // Created 0600 (and narrowed if it exists) before libedit writes it: the
  // lines may hold anything the user typed.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  HistEvent event;
  if (fd < 0 || ::fchmod(fd, 0600) != 0 ||
      history(state_->history, &event, H_SAVE, path.c_str()) < 0) {
    std::fprintf(state_->err, "colibri-client: cannot write the chat history %s: %s\n",
                 path.c_str(), std::strerror(errno));
    state_->history_failed = true;
  }
  if (fd >= 0) ::close(fd);
}

}  // namespace colibri::client
