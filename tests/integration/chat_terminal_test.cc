// `colibri-client chat` driven the way a person drives it: on a terminal
// (a tmux pane, keys sent with send-keys, the screen read with capture-pane)
// against a real `serve` on a fixture model. The replies reach the client
// through colibri-relay capped at 1 kB/s, so a reply of 200 tokens streams
// for seconds and Ctrl-C lands while it does. Checked on the screen: the up
// arrow recalls the last line, Ctrl-C stops the reply and the session goes
// on (the next turn completes, its prompt holds the stopped turn), Ctrl-C
// drops a line being typed, Ctrl-C at an empty prompt ends the program with
// 0; and the history file (mode 0600) holds the lines. And a call that
// never gets its first reply (a coordinator that accepts and stays silent)
// is stopped by Ctrl-C too.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/integration/node_process.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace colibri {
namespace {

using testing::CommandResult;
using testing::ServerProcess;

constexpr char kTmux[] = "/usr/bin/tmux";
constexpr char kLongLine[] = "Tell me a long story";

class ChatTerminalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FixturesDir().empty()) GTEST_SKIP() << "fixtures not found (COLIBRI_FIXTURES_DIR)";
    if (::access(kTmux, X_OK) != 0) GTEST_SKIP() << "tmux not installed (scripts/install-deps.sh)";
    dir_ = testing::MakeTempDir("chat_terminal");
    ASSERT_FALSE(dir_.empty());
    socket_ = dir_ + "/tmux.sock";
  }

  void TearDown() override {
    if (!socket_.empty()) testing::RunCommand({kTmux, "-S", socket_, "kill-server"});
  }

  CommandResult Tmux(std::vector<std::string> args) {
    args.insert(args.begin(), {kTmux, "-S", socket_});
    return testing::RunCommand(args);
  }

  void Keys(const std::vector<std::string>& keys) {
    std::vector<std::string> args = {"send-keys", "-t", "chat"};
    args.insert(args.end(), keys.begin(), keys.end());
    const CommandResult r = Tmux(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // The pane's text with wrapped lines joined, trailing empty lines dropped.
  std::string Screen() {
    std::string text = Tmux({"capture-pane", "-p", "-J", "-S", "-1000", "-t", "chat"}).out;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }

  // Polls the screen until `done` holds; false after 60 s (a wedged
  // program, not a slow one: the steps take well under a second each).
  bool WaitFor(const std::function<bool(const std::string&)>& done, std::string* screen) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      *screen = Screen();
      if (done(*screen)) return true;
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // Runs `colibri-client --coordinator COORDINATOR chat CHAT_FLAGS` in a
  // 160x50 pane (its history under dir_/state; "EXITED CODE" printed when it
  // ends) and waits for its first prompt.
  void StartChat(const std::string& coordinator, const std::string& chat_flags) {
    const std::string command = "env XDG_STATE_HOME=" + dir_ + "/state " +
                                testing::BinaryPath("client/colibri-client") +
                                " --coordinator " + coordinator + " chat " + chat_flags +
                                "; echo EXITED $?; sleep 600";
    const CommandResult started =
        Tmux({"new-session", "-d", "-s", "chat", "-x", "160", "-y", "50", command});
    ASSERT_EQ(started.exit_code, 0) << started.err;
    std::string screen;
    ASSERT_TRUE(WaitFor([](const std::string& s) { return s == ">"; }, &screen)) << screen;
  }

  static std::string LastLine(const std::string& screen) {
    const size_t at = screen.rfind('\n');
    return at == std::string::npos ? screen : screen.substr(at + 1);
  }

  std::string dir_;
  std::string socket_;
};

TEST_F(ChatTerminalTest, ArrowRecallsCtrlCStopsTheReplyAndTheSessionGoesOn) {
  ServerProcess serve;
  std::string error;
  ASSERT_TRUE(serve.Start({testing::BinaryPath("coordinator/colibri-coordinator"), "serve",
                           "--model", testing::FixturesDir() + "/models/qwen3moe-tiny-f32.gguf",
                           "--listen", "127.0.0.1:0", "--threads", "1"},
                          &error))
      << error;
  ServerProcess relay;
  ASSERT_TRUE(relay.Start({testing::BinaryPath("tools/relay/colibri-relay"), "--route",
                           "127.0.0.1:0=" + serve.address(), "--bandwidth", "1kB"},
                          &error))
      << error;
  // "listening on HOST:PORT -> TARGET"
  const std::string relayed = relay.address().substr(0, relay.address().find(' '));

  ASSERT_NO_FATAL_FAILURE(StartChat(relayed, "--temp 0 -n 200 --stats"));
  std::string screen;

  // 1. A long reply, stopped once some of it is on the screen.
  Keys({kLongLine, "Enter"});
  const std::string asked = std::string("> ") + kLongLine + "\n";
  ASSERT_TRUE(WaitFor(
      [&](const std::string& s) {
        const size_t at = s.find(asked);
        return at != std::string::npos && s.size() - at - asked.size() >= 20;
      },
      &screen))
      << screen;
  Keys({"C-c"});
  ASSERT_TRUE(WaitFor(
      [](const std::string& s) { return absl::StrContains(s, "(reply stopped)\n>"); }, &screen))
      << screen;
  EXPECT_FALSE(absl::StrContains(screen, "[prompt ")) << "a stopped reply has no stats\n"
                                                      << screen;
  EXPECT_FALSE(absl::StrContains(screen, "EXITED")) << screen;

  // 2. The up arrow recalls the line; sent again, the turn completes.
  Keys({"Up"});
  ASSERT_TRUE(WaitFor([&](const std::string& s) { return LastLine(s) == asked.substr(0, asked.size() - 1); },
                      &screen))
      << screen;
  Keys({"Enter"});
  ASSERT_TRUE(WaitFor(
      [](const std::string& s) {
        return absl::StrContains(s, "[prompt ") && LastLine(s) == ">";
      },
      &screen))
      << screen;
  // Its prompt holds the first turn too: more tokens than the line alone
  // (measured by the same server for a fresh chat below).
  const size_t stats_at = screen.find("[prompt ");
  const int second_prompt = std::stoi(screen.substr(stats_at + 8));

  // 3. Ctrl-C over a line being typed drops it; the prompt comes back.
  Keys({"half typed"});
  ASSERT_TRUE(WaitFor([](const std::string& s) { return LastLine(s) == "> half typed"; }, &screen))
      << screen;
  Keys({"C-c"});
  ASSERT_TRUE(WaitFor(
      [](const std::string& s) {
        return absl::StrContains(s, "> half typed\n>") && LastLine(s) == ">";
      },
      &screen))
      << screen;

  // 4. Ctrl-C at the empty prompt ends the chat, with 0.
  Keys({"C-c"});
  ASSERT_TRUE(WaitFor([](const std::string& s) { return absl::StrContains(s, "EXITED "); },
                      &screen))
      << screen;
  EXPECT_TRUE(absl::StrContains(screen, "EXITED 0")) << screen;
  EXPECT_FALSE(absl::StrContains(screen, "half typed\n(reply")) << screen;

  // The history file: private, one entry (the repeated line is kept once,
  // the dropped one never).
  const std::string history = dir_ + "/state/colibri/chat_history";
  struct stat st = {};
  ASSERT_EQ(::stat(history.c_str(), &st), 0) << history;
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(history);
  std::stringstream lines;
  lines << in.rdbuf();
  EXPECT_TRUE(absl::StrContains(lines.str(), "Tell\\040me\\040a\\040long\\040story")) << lines.str();
  EXPECT_FALSE(absl::StrContains(lines.str(), "half")) << lines.str();

  // The line alone, in a fresh chat over a pipe: fewer prompt tokens than
  // the second turn above, which carried the stopped reply.
  const CommandResult alone = testing::RunCommand(
      {"/bin/sh", "-c",
       "printf '%s\\n' '" + std::string(kLongLine) + "' | " +
           testing::BinaryPath("client/colibri-client") + " --coordinator " + serve.address() +
           " chat --temp 0 -n 1 --stats"});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_TRUE(absl::StartsWith(alone.err, "[prompt ")) << alone.err;
  EXPECT_GT(second_prompt, std::stoi(alone.err.substr(8))) << screen;
}

TEST_F(ChatTerminalTest, CtrlCStopsACallStillWaitingForItsFirstReply) {
  // Listens and never accepts: the kernel completes TCP handshakes, nothing
  // ever answers gRPC's, so the call waits until cancelled.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(::listen(silent, 8), 0);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string coordinator = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));

  ASSERT_NO_FATAL_FAILURE(StartChat(coordinator, ""));
  std::string screen;
  Keys({"Hello", "Enter"});
  ASSERT_TRUE(WaitFor([](const std::string& s) { return s == "> Hello"; }, &screen)) << screen;
  Keys({"C-c"});
  ASSERT_TRUE(WaitFor(
      [](const std::string& s) { return absl::StrContains(s, "(reply stopped)\n>"); }, &screen))
      << screen;
  Keys({"C-d"});
  ASSERT_TRUE(WaitFor([](const std::string& s) { return absl::StrContains(s, "EXITED 0"); },
                      &screen))
      << screen;
  ::close(silent);
}

}  // namespace
}  // namespace colibri
