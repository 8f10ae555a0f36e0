// A fixed pool of worker threads for data-parallel loops.
//
// ParallelFor splits [0, n) into contiguous chunks, runs them on the workers and
// on the calling thread, and returns when all are done. The split depends only on
// n and the thread count, so a loop whose iterations are independent produces the
// same result on every run.
//
// Thread-safety: ParallelFor may be called from one thread at a time per pool
// (calls from several threads are serialised). The pool is not re-entrant: the
// body must not call ParallelFor on the same pool.
#ifndef COLIBRI_COMMON_THREAD_POOL_H_
#define COLIBRI_COMMON_THREAD_POOL_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace colibri {

class ThreadPool {
 public:
  // Starts num_threads - 1 workers (the caller is the last thread).
  // num_threads <= 0 means PhysicalCoreCount().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls body(begin, end) over disjoint chunks covering [0, n), each at least
  // min_chunk long (except possibly the last). Blocks until every chunk is done.
  // The body is borrowed, not copied: calling this allocates nothing.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   absl::FunctionRef<void(int64_t begin, int64_t end)> body);

 private:
  void WorkerLoop(int worker_index);
  // Runs the chunks assigned to thread `index` of the current job.
  void RunShare(int index);

  const int num_threads_;
  std::vector<std::thread> workers_;

  absl::Mutex call_mu_;  // serialises ParallelFor callers

  absl::Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The current job; written under mu_ before generation_ advances.
  const absl::FunctionRef<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
};

// Number of physical cores (hyper-threads of one core count once); at least 1.
int PhysicalCoreCount();

}  // namespace colibri

#endif  // COLIBRI_COMMON_THREAD_POOL_H_
