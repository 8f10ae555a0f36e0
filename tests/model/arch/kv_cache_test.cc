// The KV cache component on its own: the layout of a slot (layers, heads,
// sliding-window rings, MLA's latent rows), the positions and truncation
// rules, slot allocation, release and accounting, and the export and import
// of a sequence's rows.
#include "model/arch/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::arch {
namespace {

// Where f's rows begin and the size of their elements (or of their q8_0
// blocks); WithRows and WithLatentRows instantiate their callback for every
// element type.
struct Rows {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t elem = 0;   // bytes per element (f32, f16), or 0
  size_t block = 0;  // bytes per 32 elements (q8_0), or 0
  size_t Bytes(int64_t n) const {
    return block > 0 ? static_cast<size_t>(n / 32) * block : static_cast<size_t>(n) * elem;
  }
};

template <typename T>
const uint8_t* Start(T* p, Rows* r) {
  r->elem = sizeof(T);
  return reinterpret_cast<const uint8_t*>(p);
}
const uint8_t* Start(ops::Q8_0Rows p, Rows* r) {
  r->block = sizeof(ops::BlockQ8_0);
  return reinterpret_cast<const uint8_t*>(p.blocks);
}

Rows RowsOf(const KvCache& kv, int seq, int il) {
  Rows r;
  kv.WithRows(seq, il, [&](auto k, auto v) {
    r.k = Start(k, &r);
    r.v = Start(v, &r);
  });
  return r;
}

Rows LatentOf(const KvCache& kv, int seq, int il) {
  Rows r;
  kv.WithLatentRows(seq, il, [&](auto latent) { r.k = Start(latent, &r); });
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

// Head dimensions a q8_0 cache can hold (multiples of 32).
ModelConfig Standard32() {
  ModelConfig c = Standard();
  c.head_dim = 32;
  c.head_dim_v = 64;
  c.n_rot = 32;
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

TEST(KvCacheTest, Q8_0BlocksTake34BytesPer32Elements) {
  const ModelConfig c = Standard32();
  ASSERT_TRUE(KvCache::CheckType(c, KvType::kQ8_0).ok());
  KvCache kv(c, 32, 4, 1, KvType::kQ8_0);
  kv.Reserve(0, 1);
  // keys 2 heads x 32, values 2 x 64 elements per row.
  EXPECT_EQ(kv.bytes_allocated(), 3 * 32 * (2 + 4) * 34);
  EXPECT_EQ(kv.RowsBytes(5), 5 * 3 * (2 + 4) * 34);
  const Rows l0 = RowsOf(kv, 0, 0);
  const Rows l1 = RowsOf(kv, 0, 1);
  EXPECT_EQ(l1.k - l0.k, 32 * 2 * 34);
  EXPECT_EQ(l1.v - l0.v, 32 * 4 * 34);
  EXPECT_STREQ(KvTypeName(KvType::kQ8_0), "q8_0");
}

TEST(KvCacheTest, Q8_0RefusesRowsNotAMultipleOf32AndNamesTheDimension) {
  const absl::Status head = KvCache::CheckType(Standard(), KvType::kQ8_0);
  EXPECT_EQ(head.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(head.message().find("head dimension is 8"), std::string::npos) << head;
  ModelConfig v = Standard32();
  v.head_dim_v = 48;
  const absl::Status value = KvCache::CheckType(v, KvType::kQ8_0);
  EXPECT_NE(value.message().find("value head dimension is 48"), std::string::npos) << value;
  ModelConfig mla = Standard32();
  mla.attention = AttentionKind::kMla;
  mla.kv_lora_rank = 64;
  mla.n_rot = 16;
  const absl::Status latent = KvCache::CheckType(mla, KvType::kQ8_0);
  EXPECT_NE(latent.message().find("is 80"), std::string::npos) << latent;
  EXPECT_TRUE(KvCache::CheckType(Standard(), KvType::kF16).ok());
  EXPECT_TRUE(KvCache::CheckType(Standard(), KvType::kF32).ok());
}

// A q8_0 cache of 8 positions; StoreAndLoad(p, x) stores x (head_dim_v
// elements) as value row p of head 1, layer 2, through StoreCacheRow, and
// returns it read back (dequantized and rotated back).
class Q8_0RowsTest : public ::testing::Test {
 protected:
  Q8_0RowsTest() { kv_.Reserve(0, 8); }

  std::vector<float> StoreAndLoad(int p, const std::vector<float>& x) const {
    std::vector<float> back(c_.head_dim_v);
    kv_.WithRows(0, 2, [&](auto, auto v) {
      if constexpr (std::is_same_v<decltype(v), ops::Q8_0Rows>) {
        const ops::Q8_0Rows row = v + kv_.ValueHead(2, 1) + p * c_.head_dim_v;
        StoreCacheRow(x.data(), c_.head_dim_v, row);
        ops::LoadRotatedQ8_0Row(row, c_.head_dim_v, back.data());
      } else {
        ADD_FAILURE() << "not q8_0 rows";
      }
    });
    return back;
  }

  // head_dim_v draws of N(0, sigma^2).
  std::vector<float> RandomRow(float sigma) {
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> x(c_.head_dim_v);
    for (float& e : x) e = dist(rng_);
    return x;
  }

  const ModelConfig c_ = Standard32();
  KvCache kv_{c_, 8, 4, 1, KvType::kQ8_0};
  std::mt19937 rng_{7};
};

// A row written through StoreCacheRow and read back: each block of 32 is
// stored as q8_0 of its rotation R x (ops::RotateQ8_0Row), each element of
// which within half its step d = max|R x| / 127 plus 127 times the rounding
// of d to a half (2^-11 d, or 2^-25 among the subnormal halves); R^-1 scales
// norms by sqrt 2, so the block's error norm is within sqrt(2 * 32) times
// that.
TEST_F(Q8_0RowsTest, RoundTripWithinHalfAStepOfTheRotatedBlock) {
  double err2 = 0, x2 = 0;
  for (int p = 0; p < 8; ++p) {
    std::vector<float> x = RandomRow(p == 3 ? 4e-3f : 4.0f);
    x[5] = p == 5 ? 300.0f : x[5];  // one block dominated by an outlier
    const std::vector<float> back = StoreAndLoad(p, x);
    for (int b = 0; b < c_.head_dim_v / 32; ++b) {
      float rotated[32];
      ops::RotateQ8_0Row(x.data() + b * 32, 32, rotated);
      float amax = 0;
      double block_err2 = 0, block_x2 = 0;
      for (float r : rotated) amax = std::max(amax, std::fabs(r));
      for (int e = b * 32; e < b * 32 + 32; ++e) {
        block_err2 += (back[e] - x[e]) * (back[e] - x[e]);
        block_x2 += x[e] * x[e];
      }
      const float step = amax / 127;
      const float bound = 0.5f * step + 127 * std::max(step * 0x1p-11f, 0x1p-25f);
      EXPECT_LE(std::sqrt(block_err2), std::sqrt(64.0) * bound + 1e-6 * std::sqrt(block_x2))
          << "position " << p << " block " << b;
      if (p == 3 || p == 5) continue;  // tiny, and with an outlier
      err2 += block_err2;
      x2 += block_x2;
    }
  }
  // Gaussian rows: the error is about max|x| / (127 sqrt 12) ~ 0.006 sigma.
  EXPECT_LT(std::sqrt(err2 / x2), 0.008);
}

// One channel far above the rest in each block (as some models' keys
// carry): quantized as it is, the block's step would be outlier / 127 for
// every element, about 1.3% of the rows' norm in error; rotated, the outlier
// is spread over its block and the error stays under 0.5%.
TEST_F(Q8_0RowsTest, AnOutlierChannelIsSpreadOverItsBlock) {
  double err2 = 0, x2 = 0;
  for (int p = 0; p < 8; ++p) {
    std::vector<float> x = RandomRow(4.0f);
    for (int b = 0; b < c_.head_dim_v / 32; ++b) x[b * 32 + (p * 7 + b) % 32] = 300.0f;
    const std::vector<float> back = StoreAndLoad(p, x);
    for (int e = 0; e < c_.head_dim_v; ++e) {
      err2 += (back[e] - x[e]) * (back[e] - x[e]);
      x2 += x[e] * x[e];
    }
  }
  EXPECT_LT(std::sqrt(err2 / x2), 0.005);
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
        static_cast<size_t>(kv.rows(il)) * r.Bytes(mla ? c.kv_lora_rank + c.n_rot : c.kv_dim());
    for (size_t i = 0; i < k_bytes; ++i) const_cast<uint8_t*>(r.k)[i] = (i * 31 + il * 7 + salt) & 0xff;
    if (mla) continue;
    const size_t v_bytes = static_cast<size_t>(kv.rows(il)) * r.Bytes(c.v_dim());
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
      const size_t row = ra.Bytes(c.kv_lora_rank + c.n_rot);
      if (std::memcmp(ra.k + p * row, rb.k + p * row, row) != 0) return false;
      continue;
    }
    for (int h = 0; h < c.n_head_kv; ++h) {
      const size_t k_row = ra.Bytes(c.head_dim);
      const size_t v_row = ra.Bytes(c.head_dim_v);
      if (std::memcmp(ra.k + ra.Bytes(a.KeyHead(il, h)) + p * k_row,
                      rb.k + rb.Bytes(b.KeyHead(il, h)) + p * k_row, k_row) != 0 ||
          std::memcmp(ra.v + ra.Bytes(a.ValueHead(il, h)) + p * v_row,
                      rb.v + rb.Bytes(b.ValueHead(il, h)) + p * v_row, v_row) != 0) {
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
  ExpectRowsMove(Standard32(), KvType::kQ8_0);
  ModelConfig mla32 = Standard32();
  mla32.attention = AttentionKind::kMla;
  mla32.kv_lora_rank = 64;
  mla32.n_rot = 32;
  ExpectRowsMove(mla32, KvType::kQ8_0);
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
