// Register-blocked GEMM tiles for prompt processing (many tokens per weight
// row). Internal to model/ops.
//
// The per-row tiles of vec_dot_*.cc decode a weight block once per group of
// up to four tokens, but finish every (row, token) dot product on its own:
// each super-block ends in a horizontal reduction and a scalar float update
// per output. The GEMM tiles here take 4 weight rows x 4 tokens at a time,
// keep the 16 partial integer sums in vector registers, reduce them together
// with one transpose-and-add network, and run the float update of vec_dot.h
// for the 16 outputs as one 16-lane vector operation.
//
// The arithmetic is vec_dot.h's canonical order exactly: per super-block the
// same exact integers (integer sums do not depend on the order they are
// formed in) and, per output, the same float operations in the same order, so
// every result is bitwise the per-row tile's (and MatMulReference's).
// Rows and tokens that do not fill a 4 x 4 tile go to the per-row tile the
// kernel set had before. Prompts of 8 or more tokens go to the wide tiles
// (gemm_avx512_wide.cc), which decode each weight super-block once per 16
// tokens, with the same arithmetic per output.
#ifndef COLIBRI_MODEL_OPS_GEMM_H_
#define COLIBRI_MODEL_OPS_GEMM_H_

#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {

// Replaces k's Q4_K, Q5_K and Q6_K quantized tiles with the AVX-512 VNNI
// GEMM tiles, which hand the edges to the tiles k held before. Call once
// while building the AVX-512 kernel set (not thread-safe; the set is
// read-only afterwards). Defined only in builds with AVX-512 kernels.
void InstallAvx512GemmTiles(KernelSet* k);

// Sets k's interleaved Q4_K, Q5_K and Q6_K tiles (the AVX2 ones the AVX-512
// set starts from) to interleaved_avx512.cc's. Call once while building the AVX-512
// kernel set. Defined only in builds with AVX-512 kernels.
void InstallAvx512InterleavedTiles(KernelSet* k);

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_GEMM_H_
