// A fixed pool of worker threads for data-parallel loops.
//
// ParallelFor splits [0, n) into contiguous chunks, runs them on the workers and
// on the calling thread, and returns when all are done. The split depends only on
// n and the thread count, so a loop whose iterations are independent produces the
// same result on every run.
//
// Hand-off: decode calls ParallelFor tens of times per token. Workers wait
// for the next job on a futex after a bounded spin (Options::spin_us); the
// caller waits for the chunks still running the same way, after a short spin
// (Options::caller_spin_us). An idle pool uses no CPU.
//
// Thread-safety: ParallelFor may be called from one thread at a time per pool
// (calls from several threads are serialised). The pool is not re-entrant: the
// body must not call ParallelFor on the same pool.
#ifndef COLIBRI_COMMON_THREAD_POOL_H_
#define COLIBRI_COMMON_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace colibri {

// One step of a spin-wait: `pause` on x86, `yield` on ARM (lets the other
// hyperthread run and saves power while polling).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class ThreadPool {
 public:
  struct Options {
    // Microseconds a waiting thread (worker between jobs, caller for the
    // workers) polls before it sleeps on the futex. The first `pause_us` of
    // it spin on the `pause` instruction, the rest call sched_yield between
    // polls (a yield hands the core to another process for a whole time
    // slice, so a long spin with yields slows decode beside a busy process).
    int spin_us = 50;
    int pause_us = 50;
    // Microseconds the caller of ParallelFor polls (with `pause`, no yields)
    // for chunks that other threads are still running, once none is left to
    // claim, before it sleeps. That wait is on the critical path of every job
    // and lasts at most one chunk.
    //
    // The defaults of 50 suit machines whose wake-ups are slow (VMs): a poll
    // that catches the next job or the last chunk saves a futex wake-up per
    // job (docs/benchmarks.md has the figures). WithSpinOverride sets all
    // three at once (programs take it from COLIBRI_SPIN_US in main).
    int caller_spin_us = 50;
  };

  // For a pool whose jobs come with long waits between them (a coordinator
  // waiting on expert nodes between layers, a node waiting for requests):
  // workers sleep at once, since their spin would not reach the next job
  // and takes the core from processes that share it (expert nodes and a
  // relay on the same machine); the caller still polls for the last chunks.
  static Options ForIntermittentJobs() {
    Options options;
    options.spin_us = 0;
    return options;
  }

  // `options` with spin_us, pause_us and caller_spin_us all set to *spin_us
  // when it has a value (0: sleep at once), unchanged otherwise.
  static Options WithSpinOverride(Options options, std::optional<int> spin_us);

  // Starts num_threads - 1 workers (the caller is the last thread).
  // num_threads <= 0 means PhysicalCoreCount().
  explicit ThreadPool(int num_threads) : ThreadPool(num_threads, Options()) {}
  ThreadPool(int num_threads, const Options& options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // The options the pool was built with.
  const Options& options() const { return options_; }

  // Calls body(begin, end) over disjoint chunks covering [0, n), each at least
  // min_chunk long (except possibly the last). Blocks until every chunk is done.
  // The body is borrowed, not copied: calling this allocates nothing.
  // The chunk boundaries depend only on n, min_chunk and num_threads(); which
  // thread runs a chunk does not (a free thread claims the next one), so a
  // thread that the OS deschedules does not hold the others up.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   absl::FunctionRef<void(int64_t begin, int64_t end)> body);

  // Like ParallelFor, with chunks of exactly `chunk` items (the last may be
  // shorter): more chunks than threads balance the load when a thread is slowed
  // down by another process on its core.
  void ParallelForChunks(int64_t n, int64_t chunk,
                         absl::FunctionRef<void(int64_t begin, int64_t end)> body);

 private:
  void WorkerLoop(int worker_index);
  // Claims and runs chunks of the current job until none is left.
  void RunChunks();
  void Run(int64_t n, int64_t chunk, absl::FunctionRef<void(int64_t, int64_t)> body);
  // Returns once *word != value: polls for the spin budget, then futex-waits
  // (announcing itself in *sleepers so the writer knows to wake it).
  void WaitWhileEquals(const std::atomic<uint32_t>* word, uint32_t value,
                       std::atomic<int>* sleepers, int spin_us, int pause_us) const;

  const int num_threads_;
  const Options options_;
  std::vector<std::thread> workers_;

  absl::Mutex call_mu_;  // serialises ParallelFor callers

  // Bumped after a job is posted; workers wait on it.
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<int> worker_sleepers_{0};
  std::atomic<bool> stop_{false};
  // The claim word of the current job: (number of chunks << 32) | next chunk
  // index. A thread claims a chunk with one fetch_add; a claim whose index is
  // below the count is a chunk of the job that stored the word, whose fields
  // below then stay valid until that chunk is reported done.
  alignas(64) std::atomic<uint64_t> claim_{0};
  // Chunks of the current job finished; the caller waits for all of them (not
  // for the workers: one the OS has not run yet does not hold the caller up).
  alignas(64) std::atomic<uint32_t> done_{0};
  std::atomic<int> caller_sleepers_{0};

  // The current job; written by the caller before it stores claim_ (release),
  // rewritten only after every chunk of it is done.
  alignas(64) const absl::FunctionRef<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
};

// Number of physical cores (hyper-threads of one core count once); at least 1.
int PhysicalCoreCount();

}  // namespace colibri

#endif  // COLIBRI_COMMON_THREAD_POOL_H_
