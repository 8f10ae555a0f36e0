// PrefixCache on its own: the longest cached prefix in whole blocks, rows
// kept per numeric path and KV type, LRU eviction by bytes (leaves first,
// a block's descendants with it) and export errors.
#include "coordinator/generation/prefix_cache.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

constexpr int kBlock = 4;
constexpr int64_t kBlockBytes = 8;

using Kind = PrefixCache::RowsKind;
const Kind kFast{ops::NumericPath::kFast, arch::KvType::kF32};

std::vector<int32_t> Tokens(int n, int first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Rows of positions [from, to): every byte is `tag` + from's block.
absl::Status Export(int from, int to, uint8_t* out, int tag) {
  EXPECT_EQ(to - from, kBlock);
  for (int i = 0; i < kBlockBytes; ++i) out[i] = static_cast<uint8_t>(tag + from / kBlock);
  return absl::OkStatus();
}

void Insert(PrefixCache& cache, Kind kind, const std::vector<int32_t>& tokens, int tag = 0) {
  ASSERT_TRUE(
      cache
          .Insert(kind, tokens, kBlockBytes,
                  [tag](int from, int to, uint8_t* out) { return Export(from, to, out, tag); })
          .ok());
}

PrefixCache NewCache(int64_t blocks) {
  PrefixCache::Options options;
  options.block_tokens = kBlock;
  options.capacity_bytes = blocks * kBlockBytes;
  return PrefixCache(options);
}

TEST(PrefixCacheTest, FindsTheLongestPrefixInWholeBlocks) {
  PrefixCache cache = NewCache(100);
  Insert(cache, kFast, Tokens(11), /*tag=*/10);  // blocks [0,4) [4,8); 3 tokens left out
  EXPECT_EQ(cache.stats().blocks, 2);
  std::vector<int32_t> query = Tokens(20);
  PrefixCache::Match m = cache.Lookup(kFast, query, 20);
  ASSERT_EQ(m.tokens, 8);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ((*m.blocks[0])[0], 10);
  EXPECT_EQ((*m.blocks[1])[0], 11);
  // At most max_tokens: one block.
  EXPECT_EQ(cache.Lookup(kFast, query, 7).tokens, 4);
  // A different token in block 1 stops the match there.
  query[5] = 99;
  EXPECT_EQ(cache.Lookup(kFast, query, 20).tokens, 4);
  // A different first token matches nothing.
  query[0] = 99;
  EXPECT_EQ(cache.Lookup(kFast, query, 20).tokens, 0);
}

TEST(PrefixCacheTest, InsertAddsOnlyTheMissingBlocks) {
  PrefixCache cache = NewCache(100);
  Insert(cache, kFast, Tokens(8), 10);
  int exported = 0;
  const std::vector<int32_t> longer = Tokens(16);
  ASSERT_TRUE(cache
                  .Insert(kFast, longer, kBlockBytes,
                          [&](int from, int to, uint8_t* out) {
                            EXPECT_GE(from, 8);
                            ++exported;
                            return Export(from, to, out, 20);
                          })
                  .ok());
  EXPECT_EQ(exported, 2);
  PrefixCache::Match m = cache.Lookup(kFast, longer, 16);
  ASSERT_EQ(m.tokens, 16);
  EXPECT_EQ((*m.blocks[1])[0], 11);  // the first insert's
  EXPECT_EQ((*m.blocks[3])[0], 23);  // the second's
  EXPECT_EQ(cache.stats().bytes, 4 * kBlockBytes);
}

TEST(PrefixCacheTest, InsertHandsBackTheRowsOfTheWholeChain) {
  PrefixCache cache = NewCache(3);
  Insert(cache, kFast, Tokens(8), 10);
  std::vector<PrefixCache::Rows> chain = {nullptr};  // replaced
  ASSERT_TRUE(cache
                  .Insert(
                      kFast, Tokens(18), kBlockBytes,
                      [](int from, int to, uint8_t* out) { return Export(from, to, out, 20); },
                      &chain)
                  .ok());
  // The cached blocks and the new ones, also the one evicted at once.
  ASSERT_EQ(chain.size(), 4u);
  EXPECT_EQ((*chain[0])[0], 10);
  EXPECT_EQ((*chain[1])[0], 11);
  EXPECT_EQ((*chain[2])[0], 22);
  EXPECT_EQ((*chain[3])[0], 23);
  EXPECT_EQ(cache.stats().blocks, 3);
  // Nothing cached: an empty chain.
  PrefixCache none = NewCache(0);
  ASSERT_TRUE(none.Insert(kFast, Tokens(8), kBlockBytes,
                          [](int from, int to, uint8_t* out) { return Export(from, to, out, 0); },
                          &chain)
                  .ok());
  EXPECT_TRUE(chain.empty());
}

TEST(PrefixCacheTest, RowsOfAnotherPathOrKvTypeNeverMatch) {
  PrefixCache cache = NewCache(100);
  Insert(cache, kFast, Tokens(8));
  const std::vector<int32_t> q = Tokens(8);
  EXPECT_EQ(cache.Lookup(kFast, q, 8).tokens, 8);
  EXPECT_EQ(cache.Lookup({ops::NumericPath::kExact, arch::KvType::kF32}, q, 8).tokens, 0);
  EXPECT_EQ(cache.Lookup({ops::NumericPath::kFast, arch::KvType::kF16}, q, 8).tokens, 0);
}

TEST(PrefixCacheTest, EvictsTheLeastRecentlyUsedLeavesUnderItsBudget) {
  PrefixCache cache = NewCache(4);
  const std::vector<int32_t> a = Tokens(8, 0);    // blocks a0 a1
  const std::vector<int32_t> b = Tokens(8, 100);  // blocks b0 b1
  Insert(cache, kFast, a);
  Insert(cache, kFast, b);
  EXPECT_EQ(cache.Lookup(kFast, a, 8).tokens, 8);  // a is now the more recent
  std::vector<int32_t> a_longer = Tokens(12, 0);   // adds a2: one block over
  Insert(cache, kFast, a_longer);
  PrefixCache::Stats s = cache.stats();
  EXPECT_EQ(s.blocks, 4);
  EXPECT_EQ(s.bytes, 4 * kBlockBytes);
  EXPECT_EQ(s.evicted_blocks, 1);
  // b's leaf went, not its first block (a leaf goes before its parent).
  EXPECT_EQ(cache.Lookup(kFast, b, 8).tokens, 4);
  EXPECT_EQ(cache.Lookup(kFast, a_longer, 12).tokens, 12);
  // Two blocks of a new prefix evict b0, then a's leaf a2.
  Insert(cache, kFast, Tokens(8, 200));
  EXPECT_EQ(cache.stats().bytes, 4 * kBlockBytes);
  EXPECT_EQ(cache.Lookup(kFast, b, 8).tokens, 0);
  EXPECT_EQ(cache.Lookup(kFast, a_longer, 12).tokens, 8);
  EXPECT_EQ(cache.Lookup(kFast, Tokens(8, 200), 8).tokens, 8);
}

TEST(PrefixCacheTest, RowsStayValidWhileHeldAfterEviction) {
  PrefixCache cache = NewCache(1);
  Insert(cache, kFast, Tokens(4), 42);
  PrefixCache::Match m = cache.Lookup(kFast, Tokens(4), 4);
  Insert(cache, kFast, Tokens(4, 50));  // evicts the first block
  EXPECT_EQ(cache.Lookup(kFast, Tokens(4), 4).tokens, 0);
  ASSERT_EQ(m.blocks.size(), 1u);
  EXPECT_EQ((*m.blocks[0])[0], 42);
}

TEST(PrefixCacheTest, ZeroCapacityCachesNothing) {
  PrefixCache cache = NewCache(0);
  Insert(cache, kFast, Tokens(8));
  EXPECT_EQ(cache.stats().blocks, 0);
  EXPECT_EQ(cache.Lookup(kFast, Tokens(8), 8).tokens, 0);
}

TEST(PrefixCacheTest, AnExportErrorKeepsTheBlocksBeforeIt) {
  PrefixCache cache = NewCache(100);
  const absl::Status status =
      cache.Insert(kFast, Tokens(12), kBlockBytes, [](int from, int to, uint8_t* out) {
        if (from == 4) return absl::OutOfRangeError("no rows");
        return Export(from, to, out, 0);
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(cache.stats().blocks, 1);
  EXPECT_EQ(cache.Lookup(kFast, Tokens(12), 12).tokens, 4);
}

}  // namespace
}  // namespace colibri::coordinator
