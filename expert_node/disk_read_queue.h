// Reads from files at queue depth: many reads in flight at once, issued by
// whichever threads need them, completed by one I/O thread.
//
// Engines:
//   kUring    io_uring (liburing): callers put their reads on the ring's
//             submission queue (under a lock) and wait; one reaper thread
//             blocks in io_uring_wait_cqe and hands each completion back. No
//             polling: the reaper uses a core only while completions arrive.
//   kThreads  a small pool of threads calling pread, the portable fallback
//             for kernels without io_uring or containers whose seccomp
//             profile refuses io_uring_setup.
// Options::engine kAuto tries kUring and falls back to kThreads when the ring
// cannot be set up (engine() says which one runs). Both read the same bytes.
//
// Priority: a request is a demand read (someone waits for it now) or a
// background read (a prefetch, Request::background set). Demand reads start
// first, in arrival order; a background read starts only when no demand read
// waits and fewer than Options::background_depth background reads are in
// flight, so a demand read queues behind at most that many background reads
// the disk is already serving. The background read's ReadControl steers it
// while it waits: Promote() makes it a demand read (its owner now waits for
// it), Cancel() drops it unread (its result is Cancelled). A read the kernel
// already has is neither promoted nor cancelled: it completes.
//
// Reads of files opened with O_DIRECT need `dest`, `offset` and `length`
// aligned to kDirectIoAlignment; the queue passes them through unchanged and
// reports the kernel's answer (EINVAL) otherwise.
//
// Thread-safety: Read and ReadMany may be called from any number of threads at
// once; their reads share the depth. The queue must outlive its callers' calls.
#ifndef COLIBRI_EXPERT_NODE_DISK_READ_QUEUE_H_
#define COLIBRI_EXPERT_NODE_DISK_READ_QUEUE_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace colibri::expert_node {

// Alignment of buffers, offsets and lengths of O_DIRECT reads (the largest
// logical block size of common devices).
inline constexpr uint64_t kDirectIoAlignment = 4096;

// Steers a background read while it waits to start (see the file comment).
// Thread-safety: every method is thread-safe.
class ReadControl {
 public:
  enum class State { kBackground, kPromoted, kCancelled };
  // From now on the read starts as a demand read. Wins over an earlier Cancel
  // if the read has not started (it is then read).
  void Promote() { state_.store(State::kPromoted); }
  // Drops the read if it has not started and was not promoted; true when the
  // read was still background (whether it was already started is unknown).
  bool Cancel() {
    State expected = State::kBackground;
    return state_.compare_exchange_strong(expected, State::kCancelled);
  }
  State state() const { return state_.load(); }

 private:
  std::atomic<State> state_{State::kBackground};
};

class DiskReadQueue {
 public:
  enum class Engine { kAuto, kUring, kThreads };

  struct Options {
    // Which engine; kAuto: io_uring when available, else threads.
    // Default: kAuto.
    Engine engine = Engine::kAuto;
    // Most reads in flight at once (io_uring: ring entries; threads: pool
    // size is min(depth, max_threads)). Must be >= 1. Default: 64.
    int depth = 64;
    // Threads of the kThreads engine at most. Default: 8.
    int max_threads = 8;
    // Background reads in flight at most (>= 1): what a demand read may find
    // ahead of it at the disk. Default: 2 (one expert read keeps a
    // bandwidth-bound disk busy; the second covers the gap between them).
    int background_depth = 2;
    // io_uring only: background reads carry the idle I/O priority class, so
    // that a kernel I/O scheduler that orders by class (mq-deadline, bfq;
    // not `none`) serves other processes' reads first too (nodes sharing a
    // disk). A promoted read the kernel already has keeps its class.
    // Default: true.
    bool background_idle_class = true;
  };

  // One read: `length` bytes of `fd` at `offset` into `dest`.
  struct Request {
    int fd = -1;
    uint64_t offset = 0;
    uint64_t length = 0;
    uint8_t* dest = nullptr;
    // Non-null: a background read, steered by this control (borrowed; it
    // must outlive the read). Null: a demand read. Default: null.
    const ReadControl* background = nullptr;
  };

  // What the kThreads engine's workers call instead of pread (tests: a slow
  // or scripted disk): reads up to `length` bytes of `fd` at `offset` into
  // `dest`; returns the bytes read, or -1 with errno set.
  using ReadFn = std::function<ssize_t(int fd, uint8_t* dest, uint64_t length, uint64_t offset)>;

  // InvalidArgument for a bad option; Unavailable when kUring was asked for
  // and io_uring cannot be set up (the message says why).
  static absl::StatusOr<std::unique_ptr<DiskReadQueue>> Create(const Options& options);
  // A kThreads queue whose workers read through `read` (options.engine is
  // ignored). InvalidArgument for a bad option.
  static absl::StatusOr<std::unique_ptr<DiskReadQueue>> CreateWithReader(const Options& options,
                                                                         ReadFn read);
  virtual ~DiskReadQueue() = default;

  // Reads every request, all in flight together (up to the depth), and waits
  // for all. Per request: the bytes read (fewer than length only at the end
  // of the file), Internal naming the errno, or Cancelled (a background read
  // cancelled before it started).
  virtual std::vector<absl::StatusOr<uint64_t>> ReadMany(absl::Span<const Request> requests) = 0;
  // ReadMany of one request.
  absl::StatusOr<uint64_t> Read(const Request& request);

  // The engine running (never kAuto).
  virtual Engine engine() const = 0;
  int depth() const { return depth_; }
  // Reads waiting to start (demand and background), for tests.
  virtual size_t waiting() const = 0;

 protected:
  explicit DiskReadQueue(int depth) : depth_(depth) {}

 private:
  const int depth_;
};

// "io_uring", "threads" (or "auto").
const char* EngineName(DiskReadQueue::Engine engine);
// Parses EngineName's names; InvalidArgument otherwise.
absl::StatusOr<DiskReadQueue::Engine> ParseEngine(const std::string& name);

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_DISK_READ_QUEUE_H_
