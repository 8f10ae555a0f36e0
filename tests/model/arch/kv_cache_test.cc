// The KV cache component on its own: the layout of a slot (layers, heads,
// sliding-window rings, MLA's latent rows), the positions and truncation
// rules, and slot allocation, release and accounting.
#include "model/arch/kv_cache.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace colibri::arch {
namespace {

// Where f's rows begin and the size of their elements; WithRows and
// WithLatentRows instantiate their callback for both element types.
struct Rows {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t elem = 0;
};

Rows RowsOf(const KvCache& kv, int seq, int il) {
  Rows r;
  kv.WithRows(seq, il, [&](auto* k, auto* v) {
    r.k = reinterpret_cast<const uint8_t*>(k);
    r.v = reinterpret_cast<const uint8_t*>(v);
    r.elem = sizeof(*k);
  });
  return r;
}

Rows LatentOf(const KvCache& kv, int seq, int il) {
  Rows r;
  kv.WithLatentRows(seq, il, [&](auto* latent) {
    r.k = reinterpret_cast<const uint8_t*>(latent);
    r.elem = sizeof(*latent);
  });
  return r;
}

ModelConfig Standard() {
  ModelConfig c;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 8;
  c.head_dim_v = 6;
  c.n_rot = 8;
  return c;
}

// Every other layer attends to a window of 10 positions (gpt-oss style).
ModelConfig Windowed() {
  ModelConfig c = Standard();
  c.sliding_window = 10;
  c.swa_pattern = 2;  // layers 0 and 2
  return c;
}

TEST(KvCacheTest, AStandardSlotHoldsEveryLayerHeadByHead) {
  const ModelConfig c = Standard();
  KvCache kv(c, /*n_ctx=*/32, /*n_batch=*/4, /*n_seq=*/2, KvType::kF32);
  EXPECT_EQ(kv.n_seq(), 2);
  EXPECT_EQ(kv.n_ctx(), 32);
  for (int il = 0; il < c.n_layer; ++il) EXPECT_EQ(kv.rows(il), 32);
  EXPECT_EQ(kv.bytes_allocated(), 0);
  kv.Reserve(1, 4);
  // keys 3 layers x 32 rows x 16 floats, values x 12 floats.
  EXPECT_EQ(kv.bytes_allocated(), 3 * 32 * (16 + 12) * 4);
  EXPECT_EQ(kv.KeyHead(1, 1), 32 * 8);
  EXPECT_EQ(kv.ValueHead(1, 1), 32 * 6);
  const Rows l0 = RowsOf(kv, 1, 0);
  const Rows l2 = RowsOf(kv, 1, 2);
  EXPECT_EQ(l0.elem, 4u);
  // Layer 2 starts after two layers' rows of every head.
  EXPECT_EQ(l2.k - l0.k, 2 * 32 * 16 * 4);
  EXPECT_EQ(l2.v - l0.v, 2 * 32 * 12 * 4);
  kv.Reserve(1, 8);  // the same slot
  EXPECT_EQ(kv.bytes_allocated(), 3 * 32 * (16 + 12) * 4);
}

TEST(KvCacheTest, HalvesTakeHalfTheBytes) {
  KvCache kv(Standard(), 32, 4, 1, KvType::kF16);
  kv.Reserve(0, 1);
  EXPECT_EQ(kv.bytes_allocated(), 3 * 32 * (16 + 12) * 2);
  const Rows l0 = RowsOf(kv, 0, 0);
  const Rows l1 = RowsOf(kv, 0, 1);
  EXPECT_EQ(l0.elem, 2u);
  EXPECT_EQ(l1.k - l0.k, 32 * 16 * 2);
  EXPECT_STREQ(KvTypeName(KvType::kF16), "f16");
  EXPECT_STREQ(KvTypeName(KvType::kF32), "f32");
}

TEST(KvCacheTest, AnMlaSlotHoldsLatentRowsOnly) {
  ModelConfig c = Standard();
  c.attention = AttentionKind::kMla;
  c.kv_lora_rank = 16;
  c.n_rot = 4;
  KvCache kv(c, 32, 4, 1, KvType::kF32);
  kv.Reserve(0, 1);
  EXPECT_EQ(kv.bytes_allocated(), 3 * 32 * (16 + 4) * 4);
  const Rows l0 = LatentOf(kv, 0, 0);
  const Rows l1 = LatentOf(kv, 0, 1);
  EXPECT_EQ(l0.elem, 4u);
  EXPECT_EQ(l1.k - l0.k, 32 * 20 * 4);
}

TEST(KvCacheTest, ReleaseFreesTheSlotAndForgetsItsPositions) {
  KvCache kv(Standard(), 32, 4, 3, KvType::kF32);
  kv.Reserve(0, 4);
  kv.Reserve(2, 4);
  const int64_t one = kv.bytes_allocated() / 2;
  kv.set_n_past(2, 4);
  kv.Release(2);
  EXPECT_EQ(kv.bytes_allocated(), one);
  EXPECT_EQ(kv.n_past(2), 0);
  EXPECT_EQ(kv.positions_committed(2), 0);
  kv.Release(1);  // never reserved: nothing to free
  EXPECT_EQ(kv.bytes_allocated(), one);
}

TEST(KvCacheTest, TruncateKeepsEarlierPositionsWithoutWindows) {
  KvCache kv(Standard(), 32, 4, 1, KvType::kF32);
  EXPECT_EQ(kv.max_truncate(), 32);
  kv.set_n_past(0, 20);
  kv.Truncate(0, 12);
  EXPECT_EQ(kv.n_past(0), 12);
  kv.Truncate(0, 40);  // never grows
  EXPECT_EQ(kv.n_past(0), 12);
  kv.Truncate(0, -3);
  EXPECT_EQ(kv.n_past(0), 0);
  kv.set_n_past(0, 5);
  kv.Reset(0);
  EXPECT_EQ(kv.n_past(0), 0);
}

TEST(KvCacheTest, ASlidingWindowRingDropsEverythingOnceAReadRowIsOverwritten) {
  // Window 10, batch 4: a window layer's ring has 13 rows, 3 beyond the window.
  KvCache kv(Windowed(), 32, 4, 1, KvType::kF32);
  EXPECT_EQ(kv.rows(0), 13);
  EXPECT_EQ(kv.rows(1), 32);
  EXPECT_EQ(kv.rows(2), 13);
  EXPECT_EQ(kv.max_truncate(), 3);
  kv.set_n_past(0, 20);
  kv.Truncate(0, 17);  // 3 dropped: the rows position 7.. needs are intact
  EXPECT_EQ(kv.n_past(0), 17);
  kv.set_n_past(0, 20);
  kv.Truncate(0, 16);  // 4 dropped: position 19 overwrote position 6's row
  EXPECT_EQ(kv.n_past(0), 0);
}

}  // namespace
}  // namespace colibri::arch
