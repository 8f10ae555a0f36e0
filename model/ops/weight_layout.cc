#include "model/ops/weight_layout.h"

#include <cstring>

#include "model/ops/quant_blocks.h"

namespace colibri::ops {
namespace {

static_assert(sizeof(Q4KRows8) == kInterleaveRows * sizeof(BlockQ4_K),
              "the interleaved layout must take the bytes of the rows it holds");

// One super-block of 8 rows: rows[r] is row r's block i, out the group's.
void InterleaveQ4K(const BlockQ4_K* const rows[kInterleaveRows], Q4KRows8* out) {
  for (int r = 0; r < kInterleaveRows; ++r) {
    const BlockQ4_K& b = *rows[r];
    out->d[r] = b.d;
    out->dmin[r] = b.dmin;
    for (int k = 0; k < 12; ++k) out->scales[k][r] = b.scales[k];
    for (int p = 0; p < 4; ++p) {
      for (int g = 0; g < 8; ++g) std::memcpy(out->qs[p][g][r], b.qs + 32 * p + 4 * g, 4);
    }
  }
}

void DeinterleaveQ4K(const Q4KRows8& in, BlockQ4_K* const rows[kInterleaveRows]) {
  for (int r = 0; r < kInterleaveRows; ++r) {
    BlockQ4_K& b = *rows[r];
    b.d = in.d[r];
    b.dmin = in.dmin[r];
    for (int k = 0; k < 12; ++k) b.scales[k] = in.scales[k][r];
    for (int p = 0; p < 4; ++p) {
      for (int g = 0; g < 8; ++g) std::memcpy(b.qs + 32 * p + 4 * g, in.qs[p][g][r], 4);
    }
  }
}

}  // namespace

bool HasInterleavedLayout(TensorType type) { return type == TensorType::kQ4_K; }

void InterleaveGroup(TensorType type, const uint8_t* rows, uint64_t row_bytes, uint8_t* out) {
  (void)type;  // Q4_K, the one type with a layout (HasInterleavedLayout)
  const uint64_t nb = row_bytes / sizeof(BlockQ4_K);
  auto* group = reinterpret_cast<Q4KRows8*>(out);
  for (uint64_t i = 0; i < nb; ++i) {
    const BlockQ4_K* src[kInterleaveRows];
    for (int r = 0; r < kInterleaveRows; ++r) {
      src[r] = reinterpret_cast<const BlockQ4_K*>(rows + r * row_bytes) + i;
    }
    InterleaveQ4K(src, group + i);
  }
}

void DeinterleaveGroup(TensorType type, const uint8_t* group, uint64_t row_bytes, uint8_t* rows) {
  (void)type;
  const uint64_t nb = row_bytes / sizeof(BlockQ4_K);
  const auto* in = reinterpret_cast<const Q4KRows8*>(group);
  for (uint64_t i = 0; i < nb; ++i) {
    BlockQ4_K* dst[kInterleaveRows];
    for (int r = 0; r < kInterleaveRows; ++r) {
      dst[r] = reinterpret_cast<BlockQ4_K*>(rows + r * row_bytes) + i;
    }
    DeinterleaveQ4K(in[i], dst);
  }
}

}  // namespace colibri::ops
