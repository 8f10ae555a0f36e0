#include "expert_node/blob_buffer_pool.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/proc_self.h"

namespace colibri::expert_node {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::shared_ptr<BlobBufferPool> Pool(uint64_t max_free_bytes) {
  BlobBufferPool::Options options;
  options.max_free_bytes = max_free_bytes;
  return BlobBufferPool::Create(options);
}

TEST(BlobBufferPoolTest, ReturnedBufferIsReusedForTheSameSize) {
  auto pool = Pool(8 * kMiB);
  uint8_t* first = nullptr;
  {
    BlobBuffer a = pool->Take(kMiB);
    first = a.data();
    std::memset(a.data(), 0x5a, a.size());
  }
  EXPECT_EQ(pool->counters().free_bytes, kMiB);
  BlobBuffer b = pool->Take(kMiB);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(b.size(), kMiB);
  const BlobBufferPool::Counters c = pool->counters();
  EXPECT_EQ(c.allocations, 1u);
  EXPECT_EQ(c.reuses, 1u);
  EXPECT_EQ(c.free_bytes, 0u);
  EXPECT_EQ(c.free_buffers, 0u);
}

TEST(BlobBufferPoolTest, OtherSizesAllocate) {
  auto pool = Pool(8 * kMiB);
  { BlobBuffer a = pool->Take(kMiB); }
  BlobBuffer b = pool->Take(kMiB + 4096);
  BlobBuffer c = pool->Take(1000);  // below kMapThreshold: aligned_alloc
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data()) % 64, 0u);
  EXPECT_EQ(pool->counters().allocations, 3u);
  EXPECT_EQ(pool->counters().reuses, 0u);
  EXPECT_EQ(pool->counters().free_buffers, 1u);
}

TEST(BlobBufferPoolTest, FreeListNeverExceedsItsBound) {
  auto pool = Pool(3 * kMiB);
  {
    std::vector<BlobBuffer> held;
    for (int i = 0; i < 5; ++i) held.push_back(pool->Take(kMiB));
    while (!held.empty()) {
      held.pop_back();
      EXPECT_LE(pool->counters().free_bytes, 3 * kMiB);
    }
  }
  BlobBufferPool::Counters c = pool->counters();
  EXPECT_EQ(c.free_bytes, 3 * kMiB);
  EXPECT_EQ(c.free_buffers, 3u);
  EXPECT_EQ(c.releases, 2u);
  EXPECT_EQ(c.peak_free_bytes, 3 * kMiB);
  // Larger than the whole bound: released at once, the free list untouched.
  { BlobBuffer big = pool->Take(4 * kMiB); }
  c = pool->counters();
  EXPECT_EQ(c.free_bytes, 3 * kMiB);
  EXPECT_EQ(c.releases, 3u);
  // A 2 MiB buffer pushes out the two oldest 1 MiB ones.
  { BlobBuffer two = pool->Take(2 * kMiB); }
  c = pool->counters();
  EXPECT_EQ(c.free_bytes, 3 * kMiB);
  EXPECT_EQ(c.free_buffers, 2u);
  EXPECT_EQ(c.releases, 5u);
  EXPECT_LE(c.peak_free_bytes, 3 * kMiB);
}

TEST(BlobBufferPoolTest, ZeroBoundDisablesReuse) {
  auto pool = Pool(0);
  { BlobBuffer a = pool->Take(kMiB); }
  { BlobBuffer b = pool->Take(kMiB); }
  const BlobBufferPool::Counters c = pool->counters();
  EXPECT_EQ(c.allocations, 2u);
  EXPECT_EQ(c.reuses, 0u);
  EXPECT_EQ(c.releases, 2u);
  EXPECT_EQ(c.peak_free_bytes, 0u);
}

TEST(BlobBufferPoolTest, BufferKeepsItsPoolAlive) {
  auto pool = Pool(8 * kMiB);
  BlobBuffer a = pool->Take(kMiB);
  std::weak_ptr<BlobBufferPool> weak = pool;
  pool.reset();
  EXPECT_FALSE(weak.expired());
  a = BlobBuffer();
  EXPECT_TRUE(weak.expired());
}

std::string VmFlags(const void* start) { return testing::SmapsLine(start, "VmFlags:"); }

TEST(BlobBufferPoolTest, ExpertSizedBuffersSitOnHugePages) {
  auto pool = Pool(0);
  BlobBuffer big = pool->Take(3 * kMiB + 12345);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % BlobBufferPool::kHugePageBytes, 0u);
  std::memset(big.data(), 0x33, big.size());  // all of it is writable
  const std::string flags = VmFlags(big.data());
  ASSERT_FALSE(flags.empty()) << "no mapping starts at the buffer";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;  // MADV_HUGEPAGE
  // Below a huge page: a plain mapping.
  BlobBuffer small = pool->Take(kMiB);
  EXPECT_EQ(VmFlags(small.data()).find(" hg"), std::string::npos) << VmFlags(small.data());
}

}  // namespace
}  // namespace colibri::expert_node
