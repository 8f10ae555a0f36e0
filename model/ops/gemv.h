// Single-token (decode) tiles: matrix x one activation row. Internal to
// model/ops.
//
// At decode every weight byte is used once, so the kernel has to keep up with
// memory. The GEMM tiles (gemm.h) run one token as a 4 x 4 tile with three
// token columns empty, and then reduce 16 lanes of which 4 are used. The
// decode tiles take 16 rows x 1 token: the one activation super-block is
// loaded (and, for Q4_K/Q5_K, rearranged to meet 64 bytes of nibbles) once for
// 16 rows, the 16 rows' integer sums are reduced together, and the float
// update of vec_dot.h runs for 16 outputs as one vector operation. The
// weights are prefetched a fixed distance ahead of the tile.
//
// The arithmetic is vec_dot.h's canonical order: per super-block the same
// exact integers, per output the same float operations in the same order, so
// every result is bitwise the per-row tiles' (and MatMulReference's).
#ifndef COLIBRI_MODEL_OPS_GEMV_H_
#define COLIBRI_MODEL_OPS_GEMV_H_

#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {

// Wraps k's Q4_K, Q5_K and Q6_K quantized tiles: calls with one token run the
// AVX-512 VNNI 16-row decode tiles (rows that do not fill 16 go to the tile k
// held before), calls with more tokens go to the tile k held before. Call
// once while building the AVX-512 kernel set, after InstallAvx512GemmTiles
// (not thread-safe; the set is read-only afterwards). Defined only in builds
// with AVX-512 kernels.
void InstallAvx512GemvTiles(KernelSet* k);

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_GEMV_H_
