// Kernel sets behind MatMul: one table per instruction set, picked at run time.
// Internal to model/ops.
//
// Every kernel set computes the same arithmetic, bit for bit; only the
// instructions differ. The arithmetic ("canonical order") is:
//
//  Float dots (the kExact path, and F32/F16/BF16 weights on either path):
//    eight float lanes, element c adds into lane c % 8 as lane + w*x (a product
//    then a sum, never fused); the lanes are reduced as
//    ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
//
//  32-element blocks against Q8_0 / Q8_1 activations (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
//    IQ4_NL, and MXFP4, whose dw_b is the block's power of two):
//    one float accumulator; for block b it adds (dw_b * da_b) * float(P_b),
//    where P_b is the exact integer Σ of qw*qa over the block's 32 elements.
//    For Q4_1/Q5_1 a second sum adds mw_b * sa_b block by block and is added
//    to the first last. With one integer per block, a tile sums 8 rows'
//    blocks into one vector and updates the 8 rows in one operation.
//
//  K-quants against Q8_K activations: one float accumulator; for each
//    super-block it adds (dw * da) * float(Σ sc*q*qa), then, for the types with
//    mins, subtracts (dminw * da) * float(Σ m*qa). Integer sums are exact.
//
//  The 256-element i-quants (IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S
//    IQ4_XS) against Q8_K activations: one float accumulator; per super-block
//    it adds (dw * da) * float(Σ_g s_g * Σ q*qa) over the integer form of
//    iq_decode.h, and the result is the accumulator times the type's power of
//    two kFinal.
//
// Because the float operations per output are a fixed sequence that depends
// only on the row and the token, results are independent of tiling, batch
// composition and threads (the batch invariance MatMul promises), and the AVX2
// and AVX-512 kernels equal the portable ones. The library is compiled with
// -ffp-contract=off so the compiler keeps that sequence.
//
// A new instruction set adds a KernelSet with the same signatures, a
// KernelSetChoice (matmul.h) and a case in DefaultKernels(); the NEON sets
// (neon_kernels.h) are the smallest example.
#ifndef COLIBRI_MODEL_OPS_VEC_DOT_H_
#define COLIBRI_MODEL_OPS_VEC_DOT_H_

#include <cstdint>

#include "model/ops/activation_quant.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal {

// Tiles never hold more tokens than this.
inline constexpr int kMaxTokenTile = 16;
// Table slots, indexed by TensorType id.
inline constexpr int kTypeSlots = 40;

// Decodes n elements (a multiple of the block size) of one row to float,
// bit-identical to DequantizeRow.
using DequantFn = void (*)(const void* src, float* dst, int64_t n);

// Float tile: y[t * y_stride + r] = dot(w + r * w_stride, x + t * x_stride, cols)
// for r < n_rows, t < n_tokens <= kMaxTokenTile.
using FloatTileFn = void (*)(const float* w, int64_t w_stride, int64_t n_rows, const float* x,
                             int64_t x_stride, int64_t cols, int64_t n_tokens, float* y,
                             int64_t y_stride);

// Quantized tile: the same over weight rows in their own encoding (row r at
// w + r * row_bytes) and quantized activation rows (token t at act + t *
// layout.row_bytes).
using QuantTileFn = void (*)(const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
                             const uint8_t* act, const ActivationLayout& layout,
                             int64_t n_tokens, float* y, int64_t y_stride);

// Attention products (model/ops/attend.h): query · key dots in the canonical
// float order, and probability-weighted sums of value rows.
using AttendDotsFn = void (*)(const float* q, int64_t q_stride, int n_q, const float* keys,
                              int64_t key_stride, int n_keys, int dim, float* dots,
                              int64_t dots_stride);
using AttendValuesFn = void (*)(const float* const* p, const int* n, int n_q,
                                const float* values, int64_t value_stride, int dim,
                                float* const* out);

// The same over rows of q8_0 blocks (attend.h's Q8_0Rows): strides in
// blocks, dim % 32 == 0; the results are those of the float products over the
// dequantized rows, bit for bit.
using AttendDotsQ8_0Fn = void (*)(const float* q, int64_t q_stride, int n_q, const BlockQ8_0* keys,
                                  int64_t key_stride, int n_keys, int dim, float* dots,
                                  int64_t dots_stride);
using AttendValuesQ8_0Fn = void (*)(const float* const* p, const int* n, int n_q,
                                    const BlockQ8_0* values, int64_t value_stride, int dim,
                                    float* const* out);

struct KernelSet {
  const char* name;
  DequantFn dequant[kTypeSlots];       // every supported type
  QuantTileFn quant_tile[kTypeSlots];  // the types with a quantized fast path
  // The same over rows in the kInterleaved8 layout (weight_layout.h): w is
  // the first row of a full group, n_rows a multiple of 8. Null where the set
  // has none (MatMul then puts the groups back into row order).
  QuantTileFn interleaved_tile[kTypeSlots];
  FloatTileFn float_tile;
  float (*dot)(const float* a, const float* b, int64_t n);  // one float dot
  // Null: attend.cc's generic loops (float_tile for the dots). attend_dots
  // takes dim % 8 == 0, attend_values dim % 16 == 0.
  AttendDotsFn attend_dots;
  AttendValuesFn attend_values;
  // Null: attend.cc dequantizes blocks of rows (dequant) for the products above.
  AttendDotsQ8_0Fn attend_dots_q8_0;
  AttendValuesQ8_0Fn attend_values_q8_0;
};

const KernelSet& PortableKernels();
// The AVX2 set, or null when the build has none (non-x86 targets) or the CPU
// cannot run it (GetCpuFeatures().avx2, which a CPU cap can hide).
const KernelSet* Avx2Kernels();
// The AVX-512 set, or null when the build has none or the CPU lacks one of
// avx512f (with BW and VL), avx512_vnni and avx2.
const KernelSet* Avx512Kernels();
// The two sets without the checks, built on first use in their own
// translation units, whose code (the building included) uses the set's
// instructions: call them only once the CPU is known to run those (on a CPU
// without them, building the set dies of SIGILL).
const KernelSet& Avx2KernelsUnchecked();
const KernelSet& Avx512KernelsUnchecked();
// The NEON sets (64-bit ARM builds; neon_kernels.h): plain NEON, which every
// AArch64 CPU runs, and NEON with the dot-product instructions, or null when
// the build has none or (dotprod) the CPU lacks them.
const KernelSet* NeonKernels();
const KernelSet* NeonDotprodKernels();
const KernelSet& NeonKernelsUnchecked();
const KernelSet& NeonDotprodKernelsUnchecked();
// The set MatMul picks by default: the best of AVX-512, AVX2, NEON with dot
// products, NEON and portable that is built and that the CPU supports
// (a CPU cap can hide features).
const KernelSet& DefaultKernels();
// The set MatMul uses now: the calibrated one (kernel_calibration.h) unless a
// test forced another.
const KernelSet& ActiveKernels();

inline int Slot(TensorType type) { return static_cast<int>(type); }

// Canonical reduction of eight lanes.
inline float ReduceLanes(const float a[8]) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_VEC_DOT_H_
