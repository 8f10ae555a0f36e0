#include "common/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace colibri {
namespace {

inline void YieldCpu() {
#if defined(__linux__)
  sched_yield();
#else
  std::this_thread::yield();
#endif
}

// std::atomic<uint32_t> is a plain 32-bit word on the platforms we build for,
// which is what the futex calls need.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

void FutexWait(const std::atomic<uint32_t>* word, uint32_t value) {
#if defined(__linux__)
  // Returns at once when *word != value (EAGAIN); spurious wake-ups are fine,
  // the caller re-checks.
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT_PRIVATE, value, nullptr,
          nullptr, 0);
#else
  if (word->load(std::memory_order_acquire) == value) std::this_thread::yield();
#endif
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
#else
  (void)word;
#endif
}

}  // namespace

ThreadPool::Options ThreadPool::WithSpinOverride(Options options, std::optional<int> spin_us) {
  if (spin_us.has_value()) options.spin_us = options.pause_us = options.caller_spin_us = *spin_us;
  return options;
}

ThreadPool::ThreadPool(int num_threads, const Options& options)
    : num_threads_(num_threads > 0 ? num_threads : PhysicalCoreCount()), options_(options) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock call_lock(&call_mu_);
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (worker_sleepers_.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&generation_);
  }
  for (auto& t : workers_) t.join();
}

void ThreadPool::WaitWhileEquals(const std::atomic<uint32_t>* word, uint32_t value,
                                 std::atomic<int>* sleepers, int spin_us, int pause_us) const {
  if (word->load(std::memory_order_acquire) != value) return;
  if (spin_us > 0) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const Clock::time_point pause_end = start + std::chrono::microseconds(pause_us);
    const Clock::time_point spin_end = start + std::chrono::microseconds(spin_us);
    bool yielding = false;
    while (true) {
      // Poll 64 times between clock reads (a clock read costs about as much
      // as a few pauses).
      for (int i = 0; i < 64; ++i) {
        if (word->load(std::memory_order_acquire) != value) return;
        if (yielding) {
          YieldCpu();
        } else {
          CpuRelax();
        }
      }
      const Clock::time_point now = Clock::now();
      if (now >= spin_end) break;
      yielding = now >= pause_end;
    }
  }
  while (word->load(std::memory_order_acquire) == value) {
    sleepers->fetch_add(1, std::memory_order_seq_cst);
    // Re-check after announcing: the writer changes the word, then reads the
    // sleeper count (both seq_cst), so either it sees us or we see its write.
    if (word->load(std::memory_order_seq_cst) == value) FutexWait(word, value);
    sleepers->fetch_sub(1, std::memory_order_relaxed);
  }
}

void ThreadPool::RunChunks() {
  while (true) {
    const uint64_t claim = claim_.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t index = claim & 0xffffffffu;
    if (index >= (claim >> 32)) return;
    const int64_t begin = static_cast<int64_t>(index) * chunk_;
    (*body_)(begin, std::min(n_, begin + chunk_));
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == (claim >> 32) &&
        caller_sleepers_.load(std::memory_order_seq_cst) > 0) {
      FutexWakeAll(&done_);
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t per_thread = (n + num_threads_ - 1) / num_threads_;
  Run(n, std::max(min_chunk, per_thread), body);
}

void ThreadPool::ParallelForChunks(int64_t n, int64_t chunk,
                                   absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (n <= 0) return;
  Run(n, std::max<int64_t>(1, chunk), body);
}

void ThreadPool::Run(int64_t n, int64_t chunk, absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (num_threads_ == 1 || n <= chunk) {
    for (int64_t begin = 0; begin < n; begin += chunk) body(begin, std::min(n, begin + chunk));
    return;
  }
  // At most 2^31 chunks, so that the claim word's index cannot overflow into
  // the count even after every thread's failed claim.
  chunk = std::max<int64_t>(chunk, (n >> 31) + 1);
  absl::MutexLock call_lock(&call_mu_);
  const uint64_t num_chunks = static_cast<uint64_t>((n + chunk - 1) / chunk);
  body_ = &body;
  n_ = n;
  chunk_ = chunk;
  done_.store(0, std::memory_order_relaxed);
  claim_.store(num_chunks << 32, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (worker_sleepers_.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&generation_);
  RunChunks();
  // done_ only rises, so waiting while it equals the last value read ends at num_chunks.
  for (uint32_t done = done_.load(std::memory_order_acquire); done != num_chunks;
       done = done_.load(std::memory_order_acquire)) {
    WaitWhileEquals(&done_, done, &caller_sleepers_, options_.caller_spin_us,
                    options_.caller_spin_us);
  }
  body_ = nullptr;
}

void ThreadPool::WorkerLoop(int /*worker_index*/) {
  // Generation 0 is the one before the first job (a worker may start after
  // that job has been posted).
  uint32_t seen = 0;
  while (true) {
    WaitWhileEquals(&generation_, seen, &worker_sleepers_, options_.spin_us, options_.pause_us);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    RunChunks();
  }
}

int PhysicalCoreCount() {
  // Linux: count distinct (physical id, core id) pairs in /proc/cpuinfo.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, physical = "0";
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = line.substr(std::min(line.size(), colon + 2));
    if (key == "physical id") physical = value;
    if (key == "core id") cores.emplace(physical, value);
  }
  int count = static_cast<int>(cores.size());
  if (count <= 0) count = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, count);
}

}  // namespace colibri
