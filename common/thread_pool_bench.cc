// Cost of a ThreadPool hand-off: times jobs of `--chunks` chunks of about
// `--work-us` microseconds each, as decode posts them (tens per token), for the
// caller spin Options::caller_spin_us = 0 and = `--spin-us`, in interleaved
// blocks, and prints the median and range over the blocks of the wall time per
// job, its excess over the job's work split across the threads, and the
// context switches per job (getrusage). Figures only; nothing is asserted.
//
//   colibri_thread_pool_bench [--threads=2] [--jobs=2000] [--blocks=7]
//                             [--chunks=16] [--work-us=200] [--spin-us=30]
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/process_knobs.h"
#include "common/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> g_sink{0};

// Busy arithmetic for about `iters` steps (calibrated below).
void Work(int64_t iters) {
  uint64_t x = 88172645463325252ull;
  for (int64_t i = 0; i < iters; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  g_sink.fetch_add(x, std::memory_order_relaxed);
}

// The fastest of several timings: a run that the OS preempted reads slow.
int64_t ItersPerMicrosecond() {
  const int64_t iters = 200000;
  double best = 0;
  for (int i = 0; i < 20; ++i) {
    const Clock::time_point start = Clock::now();
    Work(iters);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    best = std::max(best, iters / us);
  }
  return std::max<int64_t>(1, static_cast<int64_t>(best));
}

long ContextSwitches() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_nvcsw + u.ru_nivcsw;
}

struct Block {
  double us_per_job;
  double switches_per_job;
};

Block RunBlock(colibri::ThreadPool* pool, int jobs, int chunks, int64_t iters) {
  const long switches = ContextSwitches();
  const Clock::time_point start = Clock::now();
  for (int j = 0; j < jobs; ++j) {
    pool->ParallelForChunks(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) Work(iters);
    });
  }
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  return {us / jobs, static_cast<double>(ContextSwitches() - switches) / jobs};
}

int Flag(int argc, char** argv, const char* name, int fallback) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') {
      return std::atoi(argv[i] + len + 1);
    }
  }
  return fallback;
}

void Report(const char* name, std::vector<Block> blocks, double ideal_us) {
  std::sort(blocks.begin(), blocks.end(),
            [](const Block& a, const Block& b) { return a.us_per_job < b.us_per_job; });
  const Block& mid = blocks[blocks.size() / 2];
  std::printf("%-22s %8.1f us/job (%.1f-%.1f)  over ideal %+7.1f us  %.2f switches/job\n", name,
              mid.us_per_job, blocks.front().us_per_job, blocks.back().us_per_job,
              mid.us_per_job - ideal_us, mid.switches_per_job);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = Flag(argc, argv, "--threads", 2);
  const int jobs = Flag(argc, argv, "--jobs", 2000);
  const int blocks = std::max(1, Flag(argc, argv, "--blocks", 7));
  const int chunks = Flag(argc, argv, "--chunks", 16);
  const int work_us = Flag(argc, argv, "--work-us", 200);
  const int64_t iters = ItersPerMicrosecond() * work_us / std::max(1, chunks);

  colibri::ThreadPool::Options sleep_at_once;
  sleep_at_once.caller_spin_us = 0;
  colibri::ThreadPool::Options spinning;
  spinning.caller_spin_us = Flag(argc, argv, "--spin-us", 30);
  const absl::StatusOr<colibri::ProcessKnobs> knobs = colibri::ReadProcessKnobs();
  if (!knobs.ok()) {
    std::fprintf(stderr, "%s\n", std::string(knobs.status().message()).c_str());
    return 2;
  }
  colibri::ThreadPool a(threads,
                        colibri::ThreadPool::WithSpinOverride(sleep_at_once, knobs->spin_us));
  colibri::ThreadPool b(threads, colibri::ThreadPool::WithSpinOverride(spinning, knobs->spin_us));
  std::vector<Block> ra, rb;
  for (int i = 0; i < blocks; ++i) {
    ra.push_back(RunBlock(&a, jobs, chunks, iters));
    rb.push_back(RunBlock(&b, jobs, chunks, iters));
  }
  const double ideal = static_cast<double>(work_us) / threads;
  std::printf("%d threads, %d jobs x %d blocks, %d chunks per job, %d us of work per job\n",
              threads, jobs, blocks, chunks, work_us);
  const std::string name_a = "caller_spin_us=" + std::to_string(a.options().caller_spin_us);
  Report(name_a.c_str(), ra, ideal);
  const std::string name_b = "caller_spin_us=" + std::to_string(b.options().caller_spin_us);
  Report(name_b.c_str(), rb, ideal);
  return 0;
}
