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

}  // namespace colibri::ops

#endif  // COLIBRI_MODEL_OPS_ATTEND_H_
