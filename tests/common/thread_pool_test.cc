#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace colibri {
namespace {

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      for (int64_t min_chunk : {1, 3, 100}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
          ASSERT_LE(begin, end);
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n << " i " << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ChunksRespectTheMinimumAndAreStable) {
  ThreadPool pool(2);
  auto chunks = [&pool] {
    std::vector<std::pair<int64_t, int64_t>> seen(4, {-1, -1});
    std::atomic<int> count{0};
    pool.ParallelFor(100, 30, [&](int64_t begin, int64_t end) {
      seen[count.fetch_add(1)] = {begin, end};
    });
    std::sort(seen.begin(), seen.begin() + count.load());
    seen.resize(count.load());
    return seen;
  };
  const auto first = chunks();
  for (const auto& [begin, end] : first) {
    if (end != 100) {
      EXPECT_GE(end - begin, 30);
    }
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(chunks(), first);
}

TEST(ThreadPoolTest, EmptyRangeCallsNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPoolTest, ParallelForChunksUsesExactlyTheGivenChunks) {
  ThreadPool pool(2);
  for (int64_t n : {1, 5, 16, 17, 100}) {
    std::vector<std::atomic<int>> hits(n);
    std::vector<std::pair<int64_t, int64_t>> seen(n + 1);
    std::atomic<int> count{0};
    pool.ParallelForChunks(n, 4, [&](int64_t begin, int64_t end) {
      seen[count.fetch_add(1)] = {begin, end};
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    ASSERT_EQ(count.load(), (n + 3) / 4) << "n " << n;
    for (int i = 0; i < count.load(); ++i) {
      EXPECT_EQ(seen[i].first % 4, 0) << "n " << n;
      EXPECT_EQ(seen[i].second, std::min<int64_t>(n, seen[i].first + 4)) << "n " << n;
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
  }
}

TEST(ThreadPoolTest, ManyBackToBackCallsEachRunEveryChunk) {
  // Consecutive jobs hand off while the workers are still spinning.
  ThreadPool pool(3);
  int64_t total = 0;
  std::atomic<int64_t> sum{0};
  for (int call = 0; call < 20000; ++call) {
    const int64_t n = 1 + call % 7;
    pool.ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum.fetch_add(i + 1);
    });
    total += n * (n + 1) / 2;
    ASSERT_EQ(sum.load(), total) << "call " << call;
  }
}

TEST(ThreadPoolTest, WorkersThatFellAsleepWakeForTheNextJob) {
  // No spin at all: every hand-off goes through the futex sleep and wake-up.
  ThreadPool::Options options;
  options.spin_us = 0;
  options.pause_us = 0;
  options.caller_spin_us = 0;
  ThreadPool pool(2, options);
  for (int call = 0; call < 200; ++call) {
    std::vector<std::atomic<int>> hits(64);
    pool.ParallelFor(64, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    for (int i = 0; i < 64; ++i) ASSERT_EQ(hits[i].load(), 1) << "call " << call << " i " << i;
    if (call % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(ThreadPoolTest, ACallerThatSpinsForTheLastChunksGetsEveryResult) {
  ThreadPool::Options options;
  options.caller_spin_us = 30;
  ThreadPool pool(2, options);
  for (int call = 0; call < 200; ++call) {
    std::vector<std::atomic<int>> hits(64);
    pool.ParallelForChunks(64, 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    for (int i = 0; i < 64; ++i) ASSERT_EQ(hits[i].load(), 1) << "call " << call << " i " << i;
  }
}

TEST(ThreadPoolTest, CallsFromSeveralThreadsAreSerialised) {
  ThreadPool pool(2);
  std::atomic<int64_t> done{0};
  auto caller = [&] {
    for (int call = 0; call < 500; ++call) {
      pool.ParallelFor(2, 1, [&](int64_t begin, int64_t end) { done.fetch_add(end - begin); });
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(done.load(), 2 * 500 * 2);
}

TEST(ThreadPoolTest, DestroyingAnIdlePoolWithSleepingWorkersReturns) {
  ThreadPool::Options options;
  options.spin_us = 0;
  std::atomic<int64_t> ran{0};
  for (int i = 0; i < 20; ++i) {
    ThreadPool pool(4, options);
    pool.ParallelFor(8, 1, [&](int64_t begin, int64_t end) { ran.fetch_add(end - begin); });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }  // each destructor must wake its sleeping workers, or this test hangs
  EXPECT_EQ(ran.load(), 20 * 8);
}

TEST(ThreadPoolTest, SpinOverrideReplacesEverySpin) {
  const ThreadPool::Options defaults;
  EXPECT_GT(defaults.spin_us, 0);
  EXPECT_GT(defaults.caller_spin_us, 0);
  ThreadPool::Options mine;
  mine.spin_us = 7;
  mine.pause_us = 3;
  mine.caller_spin_us = 11;
  for (const int us : {0, 120}) {
    ThreadPool pool(2, ThreadPool::WithSpinOverride(mine, us));
    EXPECT_EQ(pool.options().spin_us, us);
    EXPECT_EQ(pool.options().pause_us, us);
    EXPECT_EQ(pool.options().caller_spin_us, us);
  }
  ThreadPool pool(2, ThreadPool::WithSpinOverride(mine, std::nullopt));
  EXPECT_EQ(pool.options().spin_us, 7);
  EXPECT_EQ(pool.options().pause_us, 3);
  EXPECT_EQ(pool.options().caller_spin_us, 11);
}

TEST(ThreadPoolTest, PoolsForIntermittentJobsSleepBetweenJobsButTheCallerPolls) {
  const ThreadPool::Options options = ThreadPool::ForIntermittentJobs();
  EXPECT_EQ(options.spin_us, 0);
  EXPECT_GT(options.caller_spin_us, 0);
  ThreadPool pool(2, options);
  std::atomic<int64_t> ran{0};
  for (int call = 0; call < 50; ++call) {
    pool.ParallelFor(8, 1, [&](int64_t begin, int64_t end) { ran.fetch_add(end - begin); });
  }
  EXPECT_EQ(ran.load(), 50 * 8);
}

TEST(ThreadPoolTest, PhysicalCoreCountIsPositive) { EXPECT_GE(PhysicalCoreCount(), 1); }

}  // namespace
}  // namespace colibri
