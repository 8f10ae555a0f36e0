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
// Reads of files opened with O_DIRECT need `dest`, `offset` and `length`
// aligned to kDirectIoAlignment; the queue passes them through unchanged and
// reports the kernel's answer (EINVAL) otherwise.
//
// Thread-safety: Read and ReadMany may be called from any number of threads at
// once; their reads share the depth. The queue must outlive its callers' calls.
#ifndef COLIBRI_EXPERT_NODE_DISK_READ_QUEUE_H_
#define COLIBRI_EXPERT_NODE_DISK_READ_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace colibri::expert_node {

// Alignment of buffers, offsets and lengths of O_DIRECT reads (the largest
// logical block size of common devices).
inline constexpr uint64_t kDirectIoAlignment = 4096;

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
  };

  // One read: `length` bytes of `fd` at `offset` into `dest`.
  struct Request {
    int fd = -1;
    uint64_t offset = 0;
    uint64_t length = 0;
    uint8_t* dest = nullptr;
  };

  // InvalidArgument for a bad option; Unavailable when kUring was asked for
  // and io_uring cannot be set up (the message says why).
  static absl::StatusOr<std::unique_ptr<DiskReadQueue>> Create(const Options& options);
  virtual ~DiskReadQueue() = default;

  // Reads every request, all in flight together (up to the depth), and waits
  // for all. Per request: the bytes read (fewer than length only at the end
  // of the file), or Internal naming the errno.
  virtual std::vector<absl::StatusOr<uint64_t>> ReadMany(absl::Span<const Request> requests) = 0;
  // ReadMany of one request.
  absl::StatusOr<uint64_t> Read(const Request& request);

  // The engine running (never kAuto).
  virtual Engine engine() const = 0;
  int depth() const { return depth_; }

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
