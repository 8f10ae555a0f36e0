// The KV cache component on its own: the layout of a slot (layers, heads,
// sliding-window rings, MLA's latent rows), the positions and truncation
// rules, slot allocation, release and accounting, and the export and import
// of a sequence's rows.
#include "model/arch/kv_cache.h"

#include <cstdint>
#include <cstring>
#include <vector>

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

// Sets every byte of `seq`'s slot (keys and values of every layer) to
// a pattern of its offset and `salt`.
void Fill(KvCache& kv, const ModelConfig& c, int seq, int salt) {
  kv.Reserve(seq, kv.n_ctx());
  for (int il = 0; il < c.n_layer; ++il) {
    const bool mla = c.attention == AttentionKind::kMla;
    const Rows r = mla ? LatentOf(kv, seq, il) : RowsOf(kv, seq, il);
    const size_t k_bytes =
        static_cast<size_t>(kv.rows(il)) * (mla ? c.kv_lora_rank + c.n_rot : c.kv_dim()) * r.elem;
    for (size_t i = 0; i < k_bytes; ++i) const_cast<uint8_t*>(r.k)[i] = (i * 31 + il * 7 + salt) & 0xff;
    if (mla) continue;
    const size_t v_bytes = static_cast<size_t>(kv.rows(il)) * c.v_dim() * r.elem;
    for (size_t i = 0; i < v_bytes; ++i) const_cast<uint8_t*>(r.v)[i] = (i * 13 + il * 5 + salt) & 0xff;
  }
}

// Whether position p's rows of every layer and head are equal in a (seq
// sa) and b (seq sb).
bool SameRows(const KvCache& a, int sa, const KvCache& b, int sb, const ModelConfig& c, int p) {
  const bool mla = c.attention == AttentionKind::kMla;
  for (int il = 0; il < c.n_layer; ++il) {
    const Rows ra = mla ? LatentOf(a, sa, il) : RowsOf(a, sa, il);
    const Rows rb = mla ? LatentOf(b, sb, il) : RowsOf(b, sb, il);
    if (mla) {
      const size_t row = (c.kv_lora_rank + c.n_rot) * ra.elem;
      if (std::memcmp(ra.k + p * row, rb.k + p * row, row) != 0) return false;
      continue;
    }
    for (int h = 0; h < c.n_head_kv; ++h) {
      const size_t k_row = c.head_dim * ra.elem;
      const size_t v_row = c.head_dim_v * ra.elem;
      if (std::memcmp(ra.k + a.KeyHead(il, h) * ra.elem + p * k_row,
                      rb.k + b.KeyHead(il, h) * rb.elem + p * k_row, k_row) != 0 ||
          std::memcmp(ra.v + a.ValueHead(il, h) * ra.elem + p * v_row,
                      rb.v + b.ValueHead(il, h) * rb.elem + p * v_row, v_row) != 0) {
        return false;
      }
    }
  }
  return true;
}

// Exports positions [5, 12) of a 32-position cache and imports them into
// a 64-position one (another slot layout): exactly those rows arrive.
void ExpectRowsMove(const ModelConfig& c, KvType type) {
  KvCache from(c, 32, 4, 1, type);
  KvCache to(c, 64, 4, 2, type);
  Fill(from, c, 0, 1);
  Fill(to, c, 1, 2);
  from.set_n_past(0, 12);
  std::vector<uint8_t> packed(from.RowsBytes(7));
  ASSERT_TRUE(from.ExportRows(0, 5, 12, packed.data()).ok());
  ASSERT_TRUE(to.ImportRows(1, 5, 12, packed.data()).ok());
  EXPECT_EQ(to.n_past(1), 0);  // the caller sets it
  for (int p = 5; p < 12; ++p) EXPECT_TRUE(SameRows(from, 0, to, 1, c, p)) << "position " << p;
  EXPECT_FALSE(SameRows(from, 0, to, 1, c, 4));
  EXPECT_FALSE(SameRows(from, 0, to, 1, c, 12));
}

TEST(KvCacheTest, ExportedRowsImportIntoAnotherSlot) {
  ExpectRowsMove(Standard(), KvType::kF32);
  ExpectRowsMove(Standard(), KvType::kF16);
  ModelConfig mla = Standard();
  mla.attention = AttentionKind::kMla;
  mla.kv_lora_rank = 16;
  mla.n_rot = 4;
  ExpectRowsMove(mla, KvType::kF32);
}

TEST(KvCacheTest, RowsBytesCountsEveryLayerKeysAndValues) {
  KvCache kv(Standard(), 32, 4, 1, KvType::kF16);
  EXPECT_EQ(kv.RowsBytes(5), 5 * 3 * (16 + 12) * 2);
}

TEST(KvCacheTest, ExportAndImportRefuseBadRangesAndWindows) {
  KvCache kv(Standard(), 32, 4, 1, KvType::kF32);
  std::vector<uint8_t> packed(kv.RowsBytes(40));
  kv.set_n_past(0, 8);
  EXPECT_EQ(kv.ExportRows(0, 4, 9, packed.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(kv.ExportRows(0, 5, 4, packed.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(kv.ImportRows(0, 0, 33, packed.data()).code(), absl::StatusCode::kOutOfRange);
  KvCache windowed(Windowed(), 32, 4, 1, KvType::kF32);
  EXPECT_TRUE(windowed.has_window_layers());
  EXPECT_FALSE(kv.has_window_layers());
  windowed.set_n_past(0, 8);
  EXPECT_EQ(windowed.ExportRows(0, 0, 4, packed.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(windowed.ImportRows(0, 0, 4, packed.data()).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace colibri::arch
