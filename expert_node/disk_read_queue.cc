#include "expert_node/disk_read_queue.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#if COLIBRI_HAVE_LIBURING
#include <liburing.h>
#endif

namespace colibri::expert_node {
namespace {

// The reads of one ReadMany call; done is notified when the last completes.
struct Batch {
  explicit Batch(size_t n) : results(n, uint64_t{0}), remaining(static_cast<int64_t>(n)) {}
  std::vector<absl::StatusOr<uint64_t>> results;
  std::atomic<int64_t> remaining;
  absl::Notification done;
};

// One request of a batch and how far it got.
struct Slot {
  Batch* batch = nullptr;
  size_t index = 0;
  DiskReadQueue::Request request;
  uint64_t done_bytes = 0;
  bool counted_background = false;  // started as a background read
};

absl::Status ReadError(const DiskReadQueue::Request& r, int err) {
  return absl::InternalError(absl::StrCat("reading ", r.length, " bytes at offset ", r.offset,
                                          " of fd ", r.fd, ": ", std::strerror(err)));
}

// Records the slot's outcome; the batch's waiter may return (and free the
// slot) as soon as the last one is recorded.
void Finish(Slot* slot, absl::StatusOr<uint64_t> result) {
  Batch* batch = slot->batch;
  batch->results[slot->index] = std::move(result);
  if (batch->remaining.fetch_sub(1) == 1) batch->done.Notify();
}

// Largest single read submitted (a multiple of the alignment).
constexpr uint64_t kMaxPartBytes = uint64_t{1} << 30;

// Whether a read that returned `got` of the `wanted` bytes should continue
// with the rest: only after whole aligned blocks (a short read that is not
// one ends at the end of the file).
bool ContinueShortRead(uint64_t got, uint64_t wanted) {
  return got > 0 && got < wanted && got % kDirectIoAlignment == 0;
}

ReadControl::State ControlState(const Slot* slot) {
  return slot->request.background == nullptr ? ReadControl::State::kPromoted
                                             : slot->request.background->state();
}

// ReadMany for both engines: one slot per request, queued by priority (the
// file comment's order), taken by the engine through NextLocked, then a wait
// until the last slot finishes.
class BatchingQueue : public DiskReadQueue {
 public:
  std::vector<absl::StatusOr<uint64_t>> ReadMany(absl::Span<const Request> requests) final {
    if (requests.empty()) return {};
    Batch batch(requests.size());
    std::vector<Slot> slots(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) slots[i] = Slot{&batch, i, requests[i], 0};
    {
      absl::MutexLock lock(&mu_);
      for (Slot& slot : slots) {
        (slot.request.background == nullptr ? demand_ : background_).push_back(&slot);
      }
      Started();
    }
    batch.done.WaitForNotification();
    return std::move(batch.results);
  }

  size_t waiting() const final {
    absl::MutexLock lock(&mu_);
    return demand_.size() + background_.size();
  }

 protected:
  BatchingQueue(int depth, int background_depth)
      : DiskReadQueue(depth), background_depth_(background_depth) {}

  // Called under mu_ after slots were queued: the engine starts what it may.
  virtual void Started() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // The next slot to start, removed from its queue: the oldest demand read,
  // else the oldest promoted background read, else the oldest background read
  // when fewer than background_depth_ are in flight; null when none may
  // start. Cancelled background reads met on the way are finished
  // (Cancelled) and dropped.
  Slot* NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!demand_.empty()) {
      Slot* slot = demand_.front();
      demand_.pop_front();
      return slot;
    }
    Slot* oldest = nullptr;
    for (auto it = background_.begin(); it != background_.end();) {
      const ReadControl::State state = ControlState(*it);
      if (state == ReadControl::State::kCancelled) {
        Finish(*it, absl::CancelledError("background read cancelled before it started"));
        it = background_.erase(it);
        continue;
      }
      if (state == ReadControl::State::kPromoted) {
        Slot* slot = *it;
        background_.erase(it);
        return slot;
      }
      if (oldest == nullptr) oldest = *it;
      ++it;
    }
    if (oldest == nullptr || background_in_flight_ >= background_depth_) return nullptr;
    background_.pop_front();  // the oldest is the front: nothing before it was kept
    oldest->counted_background = true;
    ++background_in_flight_;
    return oldest;
  }

  // Whether NextLocked would return a slot or finish a cancelled one.
  bool StartableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!demand_.empty()) return true;
    if (background_.empty()) return false;
    if (background_in_flight_ < background_depth_) return true;
    for (const Slot* slot : background_) {
      if (ControlState(slot) != ReadControl::State::kBackground) return true;
    }
    return false;
  }

  // Called under mu_ when a started slot is finished (or about to be).
  void DoneLocked(Slot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (slot->counted_background) --background_in_flight_;
  }

  mutable absl::Mutex mu_;

 private:
  const int background_depth_;
  std::deque<Slot*> demand_ ABSL_GUARDED_BY(mu_);
  std::deque<Slot*> background_ ABSL_GUARDED_BY(mu_);
  int background_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

class ThreadQueue final : public BatchingQueue {
 public:
  ThreadQueue(int depth, int background_depth, int threads, ReadFn read)
      : BatchingQueue(depth, background_depth), read_(std::move(read)) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~ThreadQueue() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (std::thread& t : workers_) t.join();
  }

  Engine engine() const override { return Engine::kThreads; }

 private:
  // The workers wait on a Condition of mu_, re-evaluated whenever mu_ is released.
  void Started() override {}

  void WorkerLoop() {
    while (true) {
      Slot* slot = nullptr;
      {
        absl::MutexLock lock(&mu_);
        while (slot == nullptr) {
          mu_.Await(absl::Condition(
              +[](ThreadQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
                return q->stop_ || q->StartableLocked();
              },
              this));
          if (!StartableLocked()) return;  // stopping, nothing left to start
          slot = NextLocked();  // null when it only finished cancelled reads
        }
      }
      absl::StatusOr<uint64_t> result = ReadAll(slot);
      absl::MutexLock lock(&mu_);
      DoneLocked(slot);
      Finish(slot, std::move(result));
    }
  }

  // The slot's request, continued over aligned short reads.
  absl::StatusOr<uint64_t> ReadAll(Slot* slot) {
    const Request& r = slot->request;
    while (true) {
      const uint64_t want = r.length - slot->done_bytes;
      const uint64_t at = r.offset + slot->done_bytes;
      const ssize_t n =
          read_ ? read_(r.fd, r.dest + slot->done_bytes, want, at)
                : ::pread(r.fd, r.dest + slot->done_bytes, want, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ReadError(r, errno);
      slot->done_bytes += static_cast<uint64_t>(n);
      if (!ContinueShortRead(slot->done_bytes, r.length)) return slot->done_bytes;
    }
  }

  const ReadFn read_;  // null: pread
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

#if COLIBRI_HAVE_LIBURING
class UringQueue final : public BatchingQueue {
 public:
  static absl::StatusOr<std::unique_ptr<DiskReadQueue>> Create(int depth, int background_depth,
                                                               bool background_idle_class) {
    std::unique_ptr<UringQueue> q(new UringQueue(depth, background_depth, background_idle_class));
    const int rc = io_uring_queue_init(static_cast<unsigned>(depth), &q->ring_, 0);
    if (rc < 0) {
      return absl::UnavailableError(
          absl::StrCat("io_uring_queue_init(", depth, "): ", std::strerror(-rc)));
    }
    q->ring_ready_ = true;
    q->reaper_ = std::thread([p = q.get()] { p->ReapLoop(); });
    return std::unique_ptr<DiskReadQueue>(std::move(q));
  }

  ~UringQueue() override {
    if (!ring_ready_) return;
    {
      absl::MutexLock lock(&mu_);
      // Room for the stop marker: the ring has `depth` entries.
      mu_.Await(absl::Condition(
          +[](UringQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return q->in_flight_ < q->depth();
          },
          this));
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data(sqe, nullptr);
      io_uring_submit(&ring_);
    }
    reaper_.join();
    io_uring_queue_exit(&ring_);
  }

  Engine engine() const override { return Engine::kUring; }

 private:
  UringQueue(int depth, int background_depth, bool background_idle_class)
      : BatchingQueue(depth, background_depth), background_idle_class_(background_idle_class) {}

  void Started() override { PumpLocked(); }

  // Puts queued slots on the ring in priority order while it has room, and
  // submits them; the reaper pumps again as reads complete.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    bool prepared = false;
    while (in_flight_ < depth()) {
      Slot* slot = NextLocked();
      if (slot == nullptr) {
        if (StartableLocked()) continue;  // only cancelled reads were dropped
        break;
      }
      PrepareLocked(slot);
      prepared = true;
    }
    if (prepared) io_uring_submit(&ring_);
  }

  // Puts the slot's remaining bytes on the submission queue (the caller
  // submits); in_flight_ < depth() holds, so an entry is free.
  void PrepareLocked(Slot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Request& r = slot->request;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // A read's length is 32 bits: larger ones go in aligned parts (a full
    // part continues like an aligned short read).
    const uint64_t part = std::min<uint64_t>(r.length - slot->done_bytes, kMaxPartBytes);
    io_uring_prep_read(sqe, r.fd, r.dest + slot->done_bytes, static_cast<unsigned>(part),
                       r.offset + slot->done_bytes);
    io_uring_sqe_set_data(sqe, slot);
    if (background_idle_class_ && slot->counted_background) sqe->ioprio = kIdleClassPriority;
    ++in_flight_;
  }

  void ReapLoop() {
    while (true) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) {
        // The ring itself failed: nothing in flight can complete any more and
        // its callers would hang. A broken invariant of the kernel interface,
        // not an input: abort with the reason.
        std::fprintf(stderr, "colibri: io_uring completion queue failed: %s\n",
                     std::strerror(-rc));
        std::abort();
      }
      Slot* slot = static_cast<Slot*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (slot == nullptr) return;  // the destructor's stop marker
      absl::MutexLock lock(&mu_);
      --in_flight_;
      const Request& r = slot->request;
      if (res == -EAGAIN || res == -EINTR) {
        PrepareLocked(slot);
        io_uring_submit(&ring_);
        continue;
      }
      if (res >= 0) {
        slot->done_bytes += static_cast<uint64_t>(res);
        if (ContinueShortRead(slot->done_bytes, r.length)) {
          PrepareLocked(slot);
          io_uring_submit(&ring_);
          continue;
        }
      }
      DoneLocked(slot);
      if (res < 0) {
        Finish(slot, ReadError(r, -res));
      } else {
        Finish(slot, slot->done_bytes);
      }
      PumpLocked();
    }
  }

  // IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0) of linux/ioprio.h.
  static constexpr uint16_t kIdleClassPriority = 3 << 13;

  const bool background_idle_class_;
  io_uring ring_{};
  bool ring_ready_ = false;
  std::thread reaper_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // mu_ also guards the submission queue
};
#endif  // COLIBRI_HAVE_LIBURING

}  // namespace

absl::StatusOr<uint64_t> DiskReadQueue::Read(const Request& request) {
  std::vector<absl::StatusOr<uint64_t>> r = ReadMany(absl::MakeConstSpan(&request, 1));
  return std::move(r[0]);
}

namespace {
absl::Status CheckOptions(const DiskReadQueue::Options& options) {
  if (options.depth < 1 || options.depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk read queue: depth ", options.depth, " is not in [1, 4096]"));
  }
  if (options.max_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk read queue: max_threads ", options.max_threads, " is below 1"));
  }
  if (options.background_depth < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk read queue: background_depth ", options.background_depth, " is below 1"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::unique_ptr<DiskReadQueue>> DiskReadQueue::CreateWithReader(
    const Options& options, ReadFn read) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  return std::unique_ptr<DiskReadQueue>(
      new ThreadQueue(options.depth, options.background_depth,
                      std::min(options.depth, options.max_threads), std::move(read)));
}

absl::StatusOr<std::unique_ptr<DiskReadQueue>> DiskReadQueue::Create(const Options& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (options.engine != Engine::kThreads) {
#if COLIBRI_HAVE_LIBURING
    absl::StatusOr<std::unique_ptr<DiskReadQueue>> uring =
        UringQueue::Create(options.depth, options.background_depth, options.background_idle_class);
    if (uring.ok() || options.engine == Engine::kUring) return uring;
#else
    if (options.engine == Engine::kUring) {
      return absl::UnavailableError("disk read queue: built without liburing");
    }
#endif
  }
  return std::unique_ptr<DiskReadQueue>(new ThreadQueue(
      options.depth, options.background_depth, std::min(options.depth, options.max_threads),
      /*read=*/nullptr));
}

const char* EngineName(DiskReadQueue::Engine engine) {
  switch (engine) {
    case DiskReadQueue::Engine::kAuto:
      return "auto";
    case DiskReadQueue::Engine::kUring:
      return "io_uring";
    case DiskReadQueue::Engine::kThreads:
      return "threads";
  }
  return "?";
}

absl::StatusOr<DiskReadQueue::Engine> ParseEngine(const std::string& name) {
  for (DiskReadQueue::Engine e : {DiskReadQueue::Engine::kAuto, DiskReadQueue::Engine::kUring,
                                  DiskReadQueue::Engine::kThreads}) {
    if (name == EngineName(e)) return e;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("I/O engine \"", name, "\" is not one of auto, io_uring, threads"));
}

}  // namespace colibri::expert_node
