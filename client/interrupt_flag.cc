#include "client/interrupt_flag.h"

#include <signal.h>

#include <atomic>

namespace colibri::client {
namespace {

// Lock-free, so a signal handler may store to it.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void OnInterrupt(int) { interrupted.store(true); }

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
