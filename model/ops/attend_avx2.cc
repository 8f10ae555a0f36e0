// AVX2 attention products (model/ops/attend.h), in the canonical order.
//
// Dots: a pass keeps eight dots' 8-lane sums in registers (4 queries x 2
// keys, or 1 query x 8 keys for a single query), then reduces all eight at
// once with shuffles in ReduceLanes' tree. Keys go in blocks of 64 (32 KiB of
// a 128-wide head, in L1) past every 4 queries, so a block of queries (the
// heads sharing a KV head) reads each key row from memory once.
//
// Weighted sums: 16 output columns of up to four queries stay in 8 registers
// while the value rows stream past once for all of them.
//
// Rows of q8_0 blocks go through the same passes: eight quants are widened
// to int32, converted (exact) and multiplied by the block's scale (exact: 11
// by 8 significant bits), which gives the dequantized floats the float
// passes would load; the scale is converted once per block and row.
#include "model/ops/attend_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "model/ops/avx2_common.h"

namespace colibri::ops::internal::avx2 {
namespace {

// ReduceLanes of each of a[0..7], in that order: lane l is
// ((a_l0 + a_l4) + (a_l2 + a_l6)) + ((a_l1 + a_l5) + (a_l3 + a_l7)).
inline __m256 ReduceEight(const __m256 a[8]) {
  // Lanes 0-3 of s[k]: a[2k][i] + a[2k][i + 4]; lanes 4-7: the same of a[2k + 1].
  __m256 s[4];
  for (int k = 0; k < 4; ++k) {
    s[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
  }
  // Per 128-bit half of t[h]: (x0 + x2), (x1 + x3) of s[2h], then of s[2h + 1].
  __m256 t[2];
  for (int h = 0; h < 2; ++h) {
    t[h] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * h], s[2 * h + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(s[2 * h], s[2 * h + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Lanes 0-3: the sums of a[0], a[2], a[4], a[6]; lanes 4-7: of a[1], a[3], a[5], a[7].
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Eight q8_0 elements (quants at qs) times the block's scale d: the floats
// they dequantize to.
COLIBRI_INLINE __m256 Q8Eight(const int8_t* qs, __m256 d) {
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs));
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

// acc[i * kK + v] += q_i[c .. c + 7] * kv[v], lane by lane.
template <int kQ, int kK>
COLIBRI_INLINE void AddProducts(const float* const* qs, int c, const __m256* kv, __m256* acc) {
  for (int i = 0; i < kQ; ++i) {
    const __m256 qv = _mm256_loadu_ps(qs[i] + c);
    for (int v = 0; v < kK; ++v) {
      acc[i * kK + v] = _mm256_add_ps(acc[i * kK + v], _mm256_mul_ps(qv, kv[v]));
    }
  }
}

// Reduces the eight sums of a pass and stores those of real queries and keys.
template <int kQ, int kK>
COLIBRI_INLINE void StoreDots(const __m256* acc, int n_q, int n_keys, float* dots,
                              int64_t dots_stride);

// kQ queries x kK keys (kQ * kK == 8); rows past the real counts repeat the
// last one and their results are dropped.
template <int kQ, int kK>
void DotsPass(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
              int n_keys, int dim, float* dots, int64_t dots_stride) {
  static_assert(kQ * kK == 8, "one reduction of eight sums per pass");
  const float* qs[kQ];
  PassRows<kQ>(q, q_stride, n_q, qs);
  const float* ks[kK];
  PassRows<kK>(keys, key_stride, n_keys, ks);
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int c = 0; c < dim; c += 8) {
    __m256 kv[kK];
    for (int v = 0; v < kK; ++v) kv[v] = _mm256_loadu_ps(ks[v] + c);
    AddProducts<kQ, kK>(qs, c, kv, acc);
  }
  StoreDots<kQ, kK>(acc, n_q, n_keys, dots, dots_stride);
}

// DotsPass over keys in q8_0 blocks (key_stride in blocks).
template <int kQ, int kK>
void DotsPassQ8(const float* q, int64_t q_stride, int n_q, const BlockQ8_0* keys,
                int64_t key_stride, int n_keys, int dim, float* dots, int64_t dots_stride) {
  static_assert(kQ * kK == 8, "one reduction of eight sums per pass");
  const float* qs[kQ];
  PassRows<kQ>(q, q_stride, n_q, qs);
  const BlockQ8_0* ks[kK];
  PassRows<kK>(keys, key_stride, n_keys, ks);
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int b = 0; b < dim / kQK; ++b) {
    __m256 d[kK];
    for (int v = 0; v < kK; ++v) d[v] = _mm256_set1_ps(Half(ks[v][b].d));
    for (int s = 0; s < kQK; s += 8) {
      __m256 kv[kK];
      for (int v = 0; v < kK; ++v) kv[v] = Q8Eight(ks[v][b].qs + s, d[v]);
      AddProducts<kQ, kK>(qs, b * kQK + s, kv, acc);
    }
  }
  StoreDots<kQ, kK>(acc, n_q, n_keys, dots, dots_stride);
}

template <int kQ, int kK>
COLIBRI_INLINE void StoreDots(const __m256* acc, int n_q, int n_keys, float* dots,
                              int64_t dots_stride) {
  alignas(32) float out[8];
  _mm256_store_ps(out, ReduceEight(acc));
  for (int i = 0; i < std::min(kQ, n_q); ++i) {
    for (int v = 0; v < std::min(kK, n_keys); ++v) dots[i * dots_stride + v] = out[i * kK + v];
  }
}

// DotsPass over float rows or DotsPassQ8 over q8_0 blocks.
template <int kQ, int kK, typename Key>
COLIBRI_INLINE void AnyDotsPass(const float* q, int64_t q_stride, int n_q, const Key* keys,
                                int64_t key_stride, int n_keys, int dim, float* dots,
                                int64_t dots_stride) {
  if constexpr (std::is_same_v<Key, float>) {
    DotsPass<kQ, kK>(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
  } else {
    DotsPassQ8<kQ, kK>(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
  }
}

// AttendDots over rows of Key (float, or BlockQ8_0 with strides in blocks).
template <typename Key>
void Dots(const float* q, int64_t q_stride, int n_q, const Key* keys, int64_t key_stride,
          int n_keys, int dim, float* dots, int64_t dots_stride) {
  const int row_bytes = AttendRowBytes<Key>(dim);
  const int ahead = std::max(1, kAttendPrefetchBytes / row_bytes);
  if (n_q == 1) {
    for (int j = 0; j < n_keys; j += 8) {
      PrefetchWholeRows(keys, key_stride, j + ahead, std::min(n_keys, j + ahead + 8), row_bytes);
      AnyDotsPass<1, 8>(q, q_stride, 1, keys + j * key_stride, key_stride, std::min(8, n_keys - j),
                        dim, dots + j, dots_stride);
    }
    return;
  }
  constexpr int kKeyBlock = 64;
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = std::min(n_keys, j0 + kKeyBlock);
    for (int t = 0; t < n_q; t += 4) {
      for (int j = j0; j < j1; j += 2) {
        if (t == 0) {
          PrefetchWholeRows(keys, key_stride, j + ahead, std::min(n_keys, j + ahead + 2),
                            row_bytes);
        }
        AnyDotsPass<4, 2>(q + t * q_stride, q_stride, std::min(4, n_q - t), keys + j * key_stride,
                          key_stride, std::min(2, j1 - j), dim, dots + t * dots_stride + j,
                          dots_stride);
      }
    }
  }
}

void AttendDots(const float* q, int64_t q_stride, int n_q, const float* keys, int64_t key_stride,
                int n_keys, int dim, float* dots, int64_t dots_stride) {
  Dots(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
}

void AttendDotsQ8(const float* q, int64_t q_stride, int n_q, const BlockQ8_0* keys,
                  int64_t key_stride, int n_keys, int dim, float* dots, int64_t dots_stride) {
  Dots(q, q_stride, n_q, keys, key_stride, n_keys, dim, dots, dots_stride);
}

// A strip of 8 * kNv consecutive columns of the value rows, as floats: of
// float rows (v + j * stride is row j's first column of the strip) ...
struct FloatStrip {
  const float* v;
  int64_t stride;  // floats
  template <int kNv>
  COLIBRI_INLINE void Load(int j, __m256* vk) const {
    for (int k = 0; k < kNv; ++k) vk[k] = _mm256_loadu_ps(v + j * stride + 8 * k);
  }
  const void* base() const { return v; }
  int64_t row_bytes() const { return stride * 4; }
};

// ... or of q8_0 rows (b + j * stride is row j's block holding the strip,
// from its element `offset`; a strip never crosses a block).
struct Q8Strip {
  const BlockQ8_0* b;
  int64_t stride;  // blocks
  int offset;
  template <int kNv>
  COLIBRI_INLINE void Load(int j, __m256* vk) const {
    const BlockQ8_0& block = b[j * stride];
    const __m256 d = _mm256_set1_ps(Half(block.d));
    for (int k = 0; k < kNv; ++k) vk[k] = Q8Eight(block.qs + offset + 8 * k, d);
  }
  const void* base() const { return b; }
  int64_t row_bytes() const { return stride * static_cast<int64_t>(sizeof(BlockQ8_0)); }
};

// Columns [0, 8 * kNv) of out for kQ queries (the exact count, so that the
// sums stay in registers): the value rows shared by all of them (j below
// every n[i]) stream past once for the block, each query's own further rows
// after. The first `prefetch` bytes of the rows ahead are asked for (the
// whole row in the first strip; the later strips find it in cache).
template <int kQ, int kNv, typename Strip>
void ValuesColumns(const float* const* p, const int* n, const Strip& values, float* const* out,
                   int prefetch) {
  __m256 a[kQ][kNv];
  int shared = n[0];
  for (int i = 0; i < kQ; ++i) {
    shared = std::min(shared, n[i]);
    for (int k = 0; k < kNv; ++k) a[i][k] = _mm256_loadu_ps(out[i] + 8 * k);
  }
  const int ahead = prefetch > 0 ? std::max(1, kAttendPrefetchBytes / prefetch) : 0;
  for (int j = 0; j < shared; ++j) {
    if (prefetch > 0) PrefetchBytes(values.base(), (j + ahead) * values.row_bytes(), prefetch);
    __m256 vk[kNv];
    values.template Load<kNv>(j, vk);
    for (int i = 0; i < kQ; ++i) {
      const __m256 pi = _mm256_set1_ps(p[i][j]);
      for (int k = 0; k < kNv; ++k) a[i][k] = _mm256_add_ps(a[i][k], _mm256_mul_ps(pi, vk[k]));
    }
  }
  for (int i = 0; i < kQ; ++i) {
    for (int jj = shared; jj < n[i]; ++jj) {
      __m256 vk[kNv];
      values.template Load<kNv>(jj, vk);
      const __m256 pi = _mm256_set1_ps(p[i][jj]);
      for (int k = 0; k < kNv; ++k) a[i][k] = _mm256_add_ps(a[i][k], _mm256_mul_ps(pi, vk[k]));
    }
  }
  for (int i = 0; i < kQ; ++i) {
    for (int k = 0; k < kNv; ++k) _mm256_storeu_ps(out[i] + 8 * k, a[i][k]);
  }
}

// Queries in blocks of up to 4 and columns in strips of 16 (a cache line of
// each value row): 8 sums in registers, each value row read once per block.
// strip(e) is the strip of columns from e; row_bytes the bytes of a row.
template <typename StripAt>
void Values(const float* const* p, const int* n, int n_q, int dim, int row_bytes, StripAt strip,
            float* const* out) {
  constexpr int kQ = 4;
  float* o[kQ];
  for (int i = 0; i < n_q; i += kQ) {
    const int block = std::min(kQ, n_q - i);
    for (int e = 0; e < dim; e += 16) {  // dim % 16 == 0
      for (int t = 0; t < block; ++t) o[t] = out[i + t] + e;
      const auto v = strip(e);
      const int prefetch = e == 0 ? row_bytes : 0;
      switch (block) {
        case 1:
          ValuesColumns<1, 2>(p + i, n + i, v, o, prefetch);
          break;
        case 2:
          ValuesColumns<2, 2>(p + i, n + i, v, o, prefetch);
          break;
        case 3:
          ValuesColumns<3, 2>(p + i, n + i, v, o, prefetch);
          break;
        default:
          ValuesColumns<4, 2>(p + i, n + i, v, o, prefetch);
          break;
      }
    }
  }
}

void AttendValues(const float* const* p, const int* n, int n_q, const float* values,
                  int64_t value_stride, int dim, float* const* out) {
  Values(
      p, n, n_q, dim, dim * 4,
      [&](int e) {
        return FloatStrip{values + e, value_stride};
      },
      out);
}

void AttendValuesQ8(const float* const* p, const int* n, int n_q, const BlockQ8_0* values,
                    int64_t value_stride, int dim, float* const* out) {
  Values(
      p, n, n_q, dim, AttendRowBytes<BlockQ8_0>(dim),
      [&](int e) {
        return Q8Strip{values + e / kQK, value_stride, e % kQK};
      },
      out);
}

}  // namespace

void InstallAvx2AttendKernels(KernelSet* k) {
  k->attend_dots = &AttendDots;
  k->attend_values = &AttendValues;
  k->attend_dots_q8_0 = &AttendDotsQ8;
  k->attend_values_q8_0 = &AttendValuesQ8;
}

}  // namespace colibri::ops::internal::avx2
