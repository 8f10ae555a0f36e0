#include "client/interrupt_flag.h"

#include <signal.h>

#include <atomic>

namespace colibri::client {
namespace {

// Lock-free, so a signal handler may store to it.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

// A second SIGINT before the first was taken ends the program as SIGINT
// does by default: the way out of a call stuck before its first reply.
void OnInterrupt(int signal_number) {
  if (interrupted.exchange(true)) {
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
  }
}

}  // namespace

bool InstallInterruptFlag() {
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  return sigaction(SIGINT, &action, nullptr) == 0;
}

bool TakeInterrupt() { return interrupted.exchange(false); }

bool InterruptPending() { return interrupted.load(); }

}  // namespace colibri::client
