// The two products of softmax attention, on the kernel set MatMul uses.
//
// Both keep the canonical float order, so every kernel set, every batch of
// queries and every split of the keys gives bitwise the same numbers:
//  - a dot is Dot()'s: eight lanes, lane l summing q[c] * k[c] (rounded
//    product, then rounded add) for c = l, l + 8, ... in order, the lanes then
//    combined by ReduceLanes (vec_dot.h);
//  - a weighted sum adds p[j] * v_j[e] (rounded product, rounded add) to
//    out[e] for j = 0, 1, ... in order.
// Prompt attention (a block of queries against all keys at once) and decode
// attention (one query) therefore agree bit for bit.
#ifndef COLIBRI_MODEL_OPS_ATTEND_H_
#define COLIBRI_MODEL_OPS_ATTEND_H_

#include <cstdint>

#include "model/ops/quant_blocks.h"

namespace colibri::ops {

// dots[t * dots_stride + j] = Dot(q + t * q_stride, keys + j * key_stride, dim)
// for t < n_q, j < n_keys.
void AttendDots(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride);

// For each query i < n_q: out[i][e] += p[i][j] * values[j * value_stride + e]
// for j = 0 .. n[i] - 1 in order, e < dim. out[i] holds the sum so far (zeros
// to start), so a caller may split the keys into consecutive runs.
void AttendValues(const float* const* p, const int* n, int n_q, const float* values,
                  int64_t value_stride, int dim, float* const* out);

// The softmax of attention scores, in place: s_j = scores[j] * scale, then
// exp(s_j - m) / Σ exp(s_k - m) with m the largest s_j (and *sink, when
// sink is not null: attention sinks add exp(*sink - m) to the denominator
// only). The exps are the sampler's (model/ops/exp_lanes.h: within 1 ulp,
// four at a time, the same bits on every target); the sum runs in order over
// j, in float. A NaN score (and any below m - 86) gets weight 0; n >= 1.
void SoftmaxInPlace(float* scores, int n, float scale, const float* sink);

// The same products over keys / values stored as IEEE half floats (a KV
// cache of half floats): each half is widened to float, which is exact, and
// the float products above run on the widened rows, so the results are
// theirs bit for bit, on every kernel set. The rows are widened in blocks
// into a per-thread buffer; strides and counts are as above.
void AttendDots(const float* q, int64_t q_stride, int n_q, const uint16_t* keys,
                int64_t key_stride, int n_keys, int dim, float* dots, int64_t dots_stride);
void AttendValues(const float* const* p, const int* n, int n_q, const uint16_t* values,
                  int64_t value_stride, int dim, float* const* out);

// Rows of a KV cache in q8_0 blocks (GGUF's Q8_0: 32 int8 quants q and an
// IEEE half scale d; element = d * q), addressed by element as a float
// pointer is: rows + e is the block holding element e, a multiple of 32.
struct Q8_0Rows {
  BlockQ8_0* blocks;
  Q8_0Rows operator+(int64_t elements) const { return {blocks + elements / kQK}; }
};

// Quantizes n floats (a multiple of 32) to q8_0 blocks at dst: per block d =
// max |x| / 127 rounded to a half, q = round(x / d) (QuantizeRow's Q8_0).
void StoreQ8_0Row(const float* src, int n, Q8_0Rows dst);

// The rotation of a q8_0 KV cache. Each block of 32 elements x of a key,
// value or latent row is stored as the q8_0 blocks of R x, R = H D / 8, with
// D a fixed diagonal of +-1 signs (kQ8_0RotationSigns) and H the 32 x 32
// Sylvester-Hadamard matrix (entries +-1, H H = 32 I): a multiple of an
// orthogonal map, which spreads a channel's outlier over its block, so the
// block's scale max|Rx| / 127 shrinks towards its root mean square. The
// attention products then run in the rotated space: a query goes in as
// Q q = H D q / 4 per block (Q q . R k = q . k, the scales powers of two) and
// a weighted sum of rotated values comes back through Q^T = D H / 4
// (Q^T sum p_j R v_j = sum p_j v_j). Each block is rotated on its own in a
// fixed order of float adds, so a row's rotation does not depend on its
// neighbours or on the kernel set. n is a multiple of 32 in all three; dst may
// be src.
inline constexpr uint32_t kQ8_0RotationSigns = 0x6a09e667u;  // bit e set: D_ee = -1
// dst = R src (a row about to be quantized).
void RotateQ8_0Row(const float* src, int n, float* dst);
// dst = Q src (a query about to be dotted with rotated keys).
void RotateQ8_0Query(const float* src, int n, float* dst);
// dst = Q^T src (a weighted sum of rotated values, back to the model's space).
void UnrotateQ8_0Output(const float* src, int n, float* dst);
// A row as StoreQ8_0Row stored it after RotateQ8_0Row, back in the model's
// space: dequantized, then R^-1 = D H / 4 (dst holds n floats).
void LoadRotatedQ8_0Row(Q8_0Rows src, int n, float* dst);

// The same products over keys / values in q8_0 blocks (strides and dim in
// elements, multiples of 32). d * q is exact in float (11 by 8 significant
// bits), and the float products above run on those elements, so the results
// are theirs over the dequantized rows bit for bit, on every kernel set. The
// query stays in float: the only rounding q8_0 adds is the cache's own.
void AttendDots(const float* q, int64_t q_stride, int n_q, Q8_0Rows keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride);
void AttendValues(const float* const* p, const int* n, int n_q, Q8_0Rows values,
                  int64_t value_stride, int dim, float* const* out);

}  // namespace colibri::ops

#endif  // COLIBRI_MODEL_OPS_ATTEND_H_
