// Weight matrices rearranged for the kernels that read 8 rows at a time.
//
// In GGUF order (WeightLayout::kRows) a matrix's row r is at data + r *
// row_bytes. A one-token product over that order does a multiply per row per
// 32 columns and then a horizontal reduction per row; kernels that take the
// quant bytes of 8 rows in one vector load do one multiply per 8 rows instead
// and leave each row's sum in its own lane. kInterleaved8 is the order those
// kernels read:
//
//   Every full group of 8 rows (rows 8g .. 8g+7) keeps its 8 * row_bytes
//   bytes at data + 8g * row_bytes, rearranged super-block by super-block
//   (Q4KRows8, Q5KRows8, Q6KRows8, Q80Rows8, MXFP4Rows8, Q40Rows8, Q41Rows8,
//   Q50Rows8, Q51Rows8, IQ4NLRows8 below).
//   Rows past the last full group stay in GGUF order at data + r * row_bytes.
//   The matrix takes the same bytes as before, so sizes, offsets of groups
//   and byte counts are unchanged.
//
// MatMul reads either layout and gives bitwise the same results on both (on a
// kernel set without tiles for the interleaved layout, or on the exact path, it
// puts each group back into row order first, which is slower). Only matrices
// read through MatMul alone may be interleaved: not an embedding table looked
// up by row, and not bytes sent elsewhere as GGUF rows (an expert's bytes sent
// to a node).
#ifndef COLIBRI_MODEL_OPS_WEIGHT_LAYOUT_H_
#define COLIBRI_MODEL_OPS_WEIGHT_LAYOUT_H_

#include <cstdint>

#include "model/ops/tensor_type.h"

namespace colibri::ops {

enum class WeightLayout : uint8_t { kRows, kInterleaved8 };

// One Q4_K super-block of 8 rows in the kInterleaved8 layout: the same bytes
// as 8 BlockQ4_K, in the order the kernels read them. Byte for byte:
//   d[r], dmin[r]: row r's fp16 scales;
//   scales[k][r]: byte k of row r's 12 packed 6-bit scales and mins;
//   qs[p][g][r][b]: byte 32 p + 4 g + b of row r's qs, i.e. the low nibbles
//     hold elements 64 p + 4 g + b and the high nibbles 64 p + 32 + 4 g + b.
struct Q4KRows8 {
  uint16_t d[8];
  uint16_t dmin[8];
  uint8_t scales[12][8];
  uint8_t qs[4][8][8][4];
};

// The same for Q5_K, whose 5th bits come in qh: qh[g][r][b] is byte 4 g + b
// of row r's qh (bit c of it: the 5th bit of element 4 g + b of chunk c).
struct Q5KRows8 {
  uint16_t d[8];
  uint16_t dmin[8];
  uint8_t scales[12][8];
  uint8_t qh[8][8][4];
  uint8_t qs[4][8][8][4];
};

// Q6_K, with its 6-bit codes (the quant plus 32) packed anew: 4 codes in 3
// bytes whose low 6 bits are three of the codes and whose top 2 bits together
// the fourth, so that three loads and 11 bit operations give 4 x 32 codes of
// 8 rows (GGUF's ql/qh split takes 17). Byte for byte:
//   d[r]: row r's fp16 scale;
//   scales[p][r][h]: row r's group scale 2 p + h (elements 32 p + 16 h ..
//     32 p + 16 h + 15), two groups of a row side by side;
//   q[n][g][j][r][b]: for half n of the super-block (elements 128 n ..
//     128 n + 127), with u_k the code of element 128 n + 32 k + 4 g + b of
//     row r: bits 0-5 hold u_j, bits 6-7 bits 2 j and 2 j + 1 of u_3.
struct Q6KRows8 {
  uint16_t d[8];
  int8_t scales[8][8][2];
  uint8_t q[2][8][3][8][4];
};

// Q8_0: one 32-element block of 8 rows, the rows' fp16 scales together (one
// conversion gives all 8 rows' block factors), then each row's quants.
struct Q80Rows8 {
  uint16_t d[8];
  int8_t qs[8][32];
};

// MXFP4: one 32-element block of 8 rows, the rows' e8m0 exponents together,
// then the rows' code bytes four at a time: qs[k][r][b] is byte 4 k + b of
// row r's qs, whose low nibble holds element 4 k + b and whose high nibble
// element 16 + 4 k + b. One load and two masks give elements 4 k .. 4 k + 3
// and 16 + 4 k .. 16 + 4 k + 3 of all 8 rows, rows in 32-bit lane order.
struct MXFP4Rows8 {
  uint8_t e[8];
  uint8_t qs[4][8][4];
};

// Q4_0: the same with the 8 rows' fp16 scales in front.
struct Q40Rows8 {
  uint16_t d[8];
  uint8_t qs[4][8][4];
};

// Q4_1: the 8 rows' fp16 scales, then their fp16 mins, then the codes as
// Q4_0's.
struct Q41Rows8 {
  uint16_t d[8];
  uint16_t m[8];
  uint8_t qs[4][8][4];
};

// Q5_0: the 8 rows' fp16 scales, their 4 qh bytes each (qh[r]: row r's, bit j
// of the little-endian word the 5th bit of element j), then the low 4 bits of
// the codes as Q4_0's.
struct Q50Rows8 {
  uint16_t d[8];
  uint8_t qh[8][4];
  uint8_t qs[4][8][4];
};

// Q5_1: Q5_0's with the 8 rows' fp16 mins after their scales.
struct Q51Rows8 {
  uint16_t d[8];
  uint16_t m[8];
  uint8_t qh[8][4];
  uint8_t qs[4][8][4];
};

// IQ4_NL: Q4_0's layout (the codes index kIq4nlValues).
using IQ4NLRows8 = Q40Rows8;

// Rows interleaved together.
inline constexpr int kInterleaveRows = 8;

// Whether type has an interleaved layout (Q4_K, Q5_K, Q6_K, Q8_0, MXFP4, Q4_0,
// Q4_1, Q5_0, Q5_1, IQ4_NL).
bool HasInterleavedLayout(TensorType type);

// Rewrites a group of 8 rows of `type` (row r at rows + r * row_bytes, row
// bytes a multiple of the type's block size) into `out` in the interleaved
// order, and back. 8 * row_bytes bytes each way; in and out must not overlap.
// Requires HasInterleavedLayout(type).
void InterleaveGroup(TensorType type, const uint8_t* rows, uint64_t row_bytes, uint8_t* out);
void DeinterleaveGroup(TensorType type, const uint8_t* group, uint64_t row_bytes, uint8_t* rows);

}  // namespace colibri::ops

#endif  // COLIBRI_MODEL_OPS_WEIGHT_LAYOUT_H_
