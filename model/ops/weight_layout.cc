#include "model/ops/weight_layout.h"

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "model/ops/quant_blocks.h"

namespace colibri::ops {
namespace {

static_assert(sizeof(Q4KRows8) == kInterleaveRows * sizeof(BlockQ4_K),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(Q5KRows8) == kInterleaveRows * sizeof(BlockQ5_K),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(Q6KRows8) == kInterleaveRows * sizeof(BlockQ6_K),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(Q80Rows8) == kInterleaveRows * sizeof(BlockQ8_0),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(MXFP4Rows8) == kInterleaveRows * sizeof(BlockMXFP4),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(Q40Rows8) == kInterleaveRows * sizeof(BlockQ4_0),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(Q41Rows8) == kInterleaveRows * sizeof(BlockQ4_1),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(Q50Rows8) == kInterleaveRows * sizeof(BlockQ5_0),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(Q51Rows8) == kInterleaveRows * sizeof(BlockQ5_1),
              "the interleaved layout must take the bytes of the rows it holds");
static_assert(sizeof(IQ4NLRows8) == kInterleaveRows * sizeof(BlockIQ4_NL),
              "the interleaved layout must take the bytes of the rows it holds");

// Moves one super-block of 8 rows between GGUF order (rows[r]: row r's block)
// and the interleaved order (group), in the direction of kToGroup. The byte
// correspondence is written once for both directions.
template <bool kToGroup>
void MoveBytes(uint8_t* a, uint8_t* b, size_t n) {
  if constexpr (kToGroup) {
    std::memcpy(b, a, n);
  } else {
    std::memcpy(a, b, n);
  }
}

template <bool kToGroup>
void MoveSuperBlock(BlockQ8_0* const rows[kInterleaveRows], Q80Rows8* group) {
  for (int r = 0; r < kInterleaveRows; ++r) {
    BlockQ8_0& b = *rows[r];
    MoveBytes<kToGroup>(reinterpret_cast<uint8_t*>(&b.d), reinterpret_cast<uint8_t*>(&group->d[r]),
                        2);
    MoveBytes<kToGroup>(reinterpret_cast<uint8_t*>(b.qs), reinterpret_cast<uint8_t*>(group->qs[r]),
                        32);
  }
}

// The 32-element types whose row blocks hold the low 4 bits of element j < 16
// in the low nibble of qs[j] and those of element j + 16 in the high nibble
// (MXFP4, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): the group's qs[k][r] is bytes 4 k .. 4 k
// + 3 of row r's qs; the other fields (MXFP4's e, the others' d, Q4_1's and
// Q5_1's m, Q5_0's and Q5_1's qh) sit together in front, row by row.
template <typename Block>
constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
template <typename Block>
constexpr bool kHasFifthBits = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;

template <bool kToGroup, typename Block, typename Group>
void MoveBlock32Quads(Block* const rows[kInterleaveRows], Group* group) {
  for (int r = 0; r < kInterleaveRows; ++r) {
    Block& b = *rows[r];
    if constexpr (std::is_same_v<Block, BlockMXFP4>) {
      MoveBytes<kToGroup>(&b.e, &group->e[r], 1);
    } else {
      MoveBytes<kToGroup>(reinterpret_cast<uint8_t*>(&b.d),
                          reinterpret_cast<uint8_t*>(&group->d[r]), 2);
    }
    if constexpr (kHasMin<Block>) {
      MoveBytes<kToGroup>(reinterpret_cast<uint8_t*>(&b.m),
                          reinterpret_cast<uint8_t*>(&group->m[r]), 2);
    }
    if constexpr (kHasFifthBits<Block>) MoveBytes<kToGroup>(b.qh, group->qh[r], 4);
    for (int k = 0; k < 4; ++k) MoveBytes<kToGroup>(b.qs + 4 * k, group->qs[k][r], 4);
  }
}

template <bool kToGroup>
void MoveSuperBlock(BlockMXFP4* const rows[kInterleaveRows], MXFP4Rows8* group) {
  MoveBlock32Quads<kToGroup>(rows, group);
}
template <bool kToGroup>
void MoveSuperBlock(BlockQ4_0* const rows[kInterleaveRows], Q40Rows8* group) {
  MoveBlock32Quads<kToGroup>(rows, group);
}
template <bool kToGroup>
void MoveSuperBlock(BlockQ4_1* const rows[kInterleaveRows], Q41Rows8* group) {
  MoveBlock32Quads<kToGroup>(rows, group);
}
template <bool kToGroup>
void MoveSuperBlock(BlockQ5_0* const rows[kInterleaveRows], Q50Rows8* group) {
  MoveBlock32Quads<kToGroup>(rows, group);
}
template <bool kToGroup>
void MoveSuperBlock(BlockQ5_1* const rows[kInterleaveRows], Q51Rows8* group) {
  MoveBlock32Quads<kToGroup>(rows, group);
}
template <bool kToGroup>
void MoveSuperBlock(BlockIQ4_NL* const rows[kInterleaveRows], IQ4NLRows8* group) {
  MoveBlock32Quads<kToGroup>(rows, group);
}

// Four bytes as one word: the Q6_K code moves below work on four bytes at
// once, masking every shifted field to its byte.
uint32_t Load4(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void Store4(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
constexpr uint32_t kLow2 = 0x03030303u, kLow4 = 0x0F0F0F0Fu, kLow6 = 0x3F3F3F3Fu;

// The 6-bit codes of a GGUF Q6_K block in element order: element 128 n +
// 32 k + l (l < 32) takes bits 0-3 from ql[64 n + 32 (k % 2) + l] (the low
// nibble for k < 2, the high one after) and bits 4-5 from bits 2 k and
// 2 k + 1 of qh[32 n + l].
void Q6KCodes(const BlockQ6_K& b, uint8_t codes[256]) {
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; l += 4) {
      const uint32_t ql0 = Load4(b.ql + 64 * n + l), ql1 = Load4(b.ql + 64 * n + 32 + l);
      const uint32_t h = Load4(b.qh + 32 * n + l);
      uint8_t* u = codes + 128 * n + l;
      Store4(u, (ql0 & kLow4) | ((h & kLow2) << 4));
      Store4(u + 32, (ql1 & kLow4) | (((h >> 2) & kLow2) << 4));
      Store4(u + 64, ((ql0 >> 4) & kLow4) | (((h >> 4) & kLow2) << 4));
      Store4(u + 96, ((ql1 >> 4) & kLow4) | (((h >> 6) & kLow2) << 4));
    }
  }
}

// The block's ql and qh from its codes (Q6KCodes the other way).
void SetQ6KCodes(const uint8_t codes[256], BlockQ6_K* b) {
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; l += 4) {
      const uint8_t* u = codes + 128 * n + l;
      const uint32_t u0 = Load4(u), u1 = Load4(u + 32), u2 = Load4(u + 64), u3 = Load4(u + 96);
      Store4(b->ql + 64 * n + l, (u0 & kLow4) | ((u2 & kLow4) << 4));
      Store4(b->ql + 64 * n + 32 + l, (u1 & kLow4) | ((u3 & kLow4) << 4));
      Store4(b->qh + 32 * n + l, ((u0 >> 4) & kLow2) | (((u1 >> 4) & kLow2) << 2) |
                                     (((u2 >> 4) & kLow2) << 4) | (((u3 >> 4) & kLow2) << 6));
    }
  }
}

// Q6_K's codes are repacked (Q6KRows8), not moved byte by byte.
template <bool kToGroup>
void MoveSuperBlock(BlockQ6_K* const rows[kInterleaveRows], Q6KRows8* group) {
  for (int r = 0; r < kInterleaveRows; ++r) {
    BlockQ6_K& b = *rows[r];
    MoveBytes<kToGroup>(reinterpret_cast<uint8_t*>(&b.d), reinterpret_cast<uint8_t*>(&group->d[r]),
                        2);
    for (int s = 0; s < 16; ++s) {
      MoveBytes<kToGroup>(reinterpret_cast<uint8_t*>(&b.scales[s]),
                          reinterpret_cast<uint8_t*>(&group->scales[s / 2][r][s % 2]), 1);
    }
    uint8_t codes[256];
    if constexpr (kToGroup) Q6KCodes(b, codes);
    for (int n = 0; n < 2; ++n) {
      for (int g = 0; g < 8; ++g) {
        uint8_t* u = codes + 128 * n + 4 * g;  // u + 32 k: chunk 4 n + k's 4 codes
        uint8_t(&planes)[3][8][4] = group->q[n][g];
        if constexpr (kToGroup) {
          const uint32_t u3 = Load4(u + 96);
          for (int j = 0; j < 3; ++j) {
            Store4(planes[j][r], Load4(u + 32 * j) | (((u3 >> (2 * j)) & kLow2) << 6));
          }
        } else {
          uint32_t u3 = 0;
          for (int j = 0; j < 3; ++j) {
            const uint32_t plane = Load4(planes[j][r]);
            Store4(u + 32 * j, plane & kLow6);
            u3 |= ((plane >> 6) & kLow2) << (2 * j);
          }
          Store4(u + 96, u3);
        }
      }
    }
    if constexpr (!kToGroup) SetQ6KCodes(codes, &b);
  }
}

template <bool kToGroup, typename Block, typename Group>
void MoveSuperBlock(Block* const rows[kInterleaveRows], Group* group) {
  static_assert(std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>);
  for (int r = 0; r < kInterleaveRows; ++r) {
    Block& b = *rows[r];
    MoveBytes<kToGroup>(reinterpret_cast<uint8_t*>(&b.d), reinterpret_cast<uint8_t*>(&group->d[r]),
                        2);
    MoveBytes<kToGroup>(reinterpret_cast<uint8_t*>(&b.dmin),
                        reinterpret_cast<uint8_t*>(&group->dmin[r]), 2);
    for (int k = 0; k < 12; ++k) MoveBytes<kToGroup>(&b.scales[k], &group->scales[k][r], 1);
    if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      for (int g = 0; g < 8; ++g) MoveBytes<kToGroup>(b.qh + 4 * g, group->qh[g][r], 4);
    }
    for (int p = 0; p < 4; ++p) {
      for (int g = 0; g < 8; ++g) MoveBytes<kToGroup>(b.qs + 32 * p + 4 * g, group->qs[p][g][r], 4);
    }
  }
}

// All super-blocks of a group of 8 rows of row_bytes.
template <bool kToGroup, typename Block, typename Group>
void MoveGroup(uint8_t* rows, uint64_t row_bytes, uint8_t* group) {
  const uint64_t nb = row_bytes / sizeof(Block);
  auto* g = reinterpret_cast<Group*>(group);
  for (uint64_t i = 0; i < nb; ++i) {
    Block* blocks[kInterleaveRows];
    for (int r = 0; r < kInterleaveRows; ++r) {
      blocks[r] = reinterpret_cast<Block*>(rows + r * row_bytes) + i;
    }
    MoveSuperBlock<kToGroup>(blocks, g + i);
  }
}

template <bool kToGroup>
void Move(TensorType type, uint8_t* rows, uint64_t row_bytes, uint8_t* group) {
  switch (type) {
    case TensorType::kQ4_K:
      MoveGroup<kToGroup, BlockQ4_K, Q4KRows8>(rows, row_bytes, group);
      break;
    case TensorType::kQ5_K:
      MoveGroup<kToGroup, BlockQ5_K, Q5KRows8>(rows, row_bytes, group);
      break;
    case TensorType::kQ6_K:
      MoveGroup<kToGroup, BlockQ6_K, Q6KRows8>(rows, row_bytes, group);
      break;
    case TensorType::kQ8_0:
      MoveGroup<kToGroup, BlockQ8_0, Q80Rows8>(rows, row_bytes, group);
      break;
    case TensorType::kMXFP4:
      MoveGroup<kToGroup, BlockMXFP4, MXFP4Rows8>(rows, row_bytes, group);
      break;
    case TensorType::kQ4_0:
      MoveGroup<kToGroup, BlockQ4_0, Q40Rows8>(rows, row_bytes, group);
      break;
    case TensorType::kQ4_1:
      MoveGroup<kToGroup, BlockQ4_1, Q41Rows8>(rows, row_bytes, group);
      break;
    case TensorType::kQ5_0:
      MoveGroup<kToGroup, BlockQ5_0, Q50Rows8>(rows, row_bytes, group);
      break;
    case TensorType::kQ5_1:
      MoveGroup<kToGroup, BlockQ5_1, Q51Rows8>(rows, row_bytes, group);
      break;
    case TensorType::kIQ4_NL:
      MoveGroup<kToGroup, BlockIQ4_NL, IQ4NLRows8>(rows, row_bytes, group);
      break;
    default:
      std::abort();  // callers check HasInterleavedLayout
  }
}

}  // namespace

bool HasInterleavedLayout(TensorType type) {
  switch (type) {
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kQ8_0:
    case TensorType::kMXFP4:
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
      return true;
    default:
      return false;
  }
}

void InterleaveGroup(TensorType type, const uint8_t* rows, uint64_t row_bytes, uint8_t* out) {
  // Read only: Move<true> copies from rows into out.
  Move<true>(type, const_cast<uint8_t*>(rows), row_bytes, out);
}

void DeinterleaveGroup(TensorType type, const uint8_t* group, uint64_t row_bytes, uint8_t* rows) {
  // Read only: Move<false> copies from group into rows.
  Move<false>(type, rows, row_bytes, const_cast<uint8_t*>(group));
}

}  // namespace colibri::ops
