#include "common/thread_pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace colibri {

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : PhysicalCoreCount()) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunShare(int index) {
  // Chunks are dealt round-robin: thread i takes chunks i, i + T, i + 2T, ...
  const int64_t num_chunks = (n_ + chunk_ - 1) / chunk_;
  for (int64_t c = index; c < num_chunks; c += num_threads_) {
    const int64_t begin = c * chunk_;
    (*body_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (num_threads_ == 1 || n <= min_chunk) {
    body(0, n);
    return;
  }
  absl::MutexLock call_lock(&call_mu_);
  const int64_t per_thread = (n + num_threads_ - 1) / num_threads_;
  {
    absl::MutexLock lock(&mu_);
    body_ = &body;
    n_ = n;
    chunk_ = std::max(min_chunk, per_thread);
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  RunShare(0);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* pending) { return *pending == 0; }, &pending_));
  body_ = nullptr;
}

void ThreadPool::WorkerLoop(int worker_index) {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || generation_ != seen;
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      seen = generation_;
    }
    RunShare(worker_index);
    absl::MutexLock lock(&mu_);
    --pending_;
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
