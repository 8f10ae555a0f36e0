// Orderly shutdown of the servers on SIGTERM / SIGINT: the signals are blocked
// in every thread (threads started afterwards inherit the mask), and one
// thread waits for them synchronously, so no handler runs in signal context.
#ifndef COLIBRI_COMMON_SHUTDOWN_SIGNALS_H_
#define COLIBRI_COMMON_SHUTDOWN_SIGNALS_H_

#include <signal.h>

namespace colibri {

// Blocks SIGTERM and SIGINT in the calling thread; call it before starting
// any thread. Returns the set for WaitForShutdownSignal.
sigset_t BlockShutdownSignals();

// Waits until one of `signals` arrives; returns its number.
int WaitForShutdownSignal(const sigset_t& signals);

}  // namespace colibri

#endif  // COLIBRI_COMMON_SHUTDOWN_SIGNALS_H_
