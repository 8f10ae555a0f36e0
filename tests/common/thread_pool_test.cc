#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
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

TEST(ThreadPoolTest, PhysicalCoreCountIsPositive) { EXPECT_GE(PhysicalCoreCount(), 1); }

}  // namespace
}  // namespace colibri
