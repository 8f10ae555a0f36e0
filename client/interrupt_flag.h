// Ctrl-C as a flag instead of the end of the program: after
// InstallInterruptFlag, SIGINT sets a flag that the chat loop polls (to
// cancel the reply being streamed) and interrupts a blocked read (so the
// line editor sees it). A second SIGINT while the flag is still set (nobody
// polled it: e.g. a call that waits for its first reply) ends the program as
// SIGINT normally does. Process-wide.
//
// Thread-safety: InstallInterruptFlag once, from main, before other threads
// read the flag; the other functions from any thread.
#ifndef COLIBRI_CLIENT_INTERRUPT_FLAG_H_
#define COLIBRI_CLIENT_INTERRUPT_FLAG_H_

namespace colibri::client {

// Replaces SIGINT's action (no SA_RESTART: a read in progress fails with
// EINTR). False when sigaction fails.
bool InstallInterruptFlag();
// Whether SIGINT arrived since the last Take; clears the flag.
bool TakeInterrupt();
// Whether SIGINT arrived since the last Take; leaves the flag set.
bool InterruptPending();

}  // namespace colibri::client

#endif  // COLIBRI_CLIENT_INTERRUPT_FLAG_H_
