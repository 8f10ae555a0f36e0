// Helpers shared by the AVX2 and AVX-512 translation units (compiled with
// -mavx2 -mfma -mf16c, the AVX-512 ones with more; never include this from
// portable code).
//
// Every function here is forced inline: the translation units that include
// this header are compiled for different instruction sets, and an out-of-line
// copy of an inline function is shared by all of them at link time, so an
// AVX-512 build of a helper could end up running on an AVX2-only machine.
#ifndef COLIBRI_MODEL_OPS_AVX2_COMMON_H_
#define COLIBRI_MODEL_OPS_AVX2_COMMON_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "model/ops/activation_quant.h"
#include "model/ops/vec_dot.h"

// Forces inlining: keeps the decoders' vectors in registers and keeps each
// translation unit's helpers compiled for its own instruction set.
#define COLIBRI_INLINE inline __attribute__((always_inline))

namespace colibri::ops::internal::avx2 {

// Canonical reduction of eight lanes: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
COLIBRI_INLINE float ReduceLanes(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// Σ of the int32 lanes of a and of b (exact).
COLIBRI_INLINE void SumPair(__m256i a, __m256i b, int* sa, int* sb) {
  const __m256i h = _mm256_hadd_epi32(a, b);
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  s = _mm_hadd_epi32(s, s);
  *sa = _mm_cvtsi128_si32(s);
  *sb = _mm_extract_epi32(s, 1);
}

COLIBRI_INLINE float Half(uint16_t h) { return _cvtsh_ss(h); }

// 32 nibbles of 16 bytes: low nibbles in bytes 0..15, high nibbles in 16..31.
COLIBRI_INLINE __m256i Nibbles32(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Byte j is 0xFF when bit j of the little-endian 32-bit word at p is set.
COLIBRI_INLINE __m256i BitsToBytes32(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

// Σ over pairs of products of unsigned u8 u and signed s8 q, then pairs again:
// int32 lane l = Σ of u*q over bytes 4l..4l+3.
COLIBRI_INLINE __m256i DotU8S8Quads(__m256i u, __m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}

// The same for two signed vectors (|a| times b with a's sign).
COLIBRI_INLINE __m256i DotS8S8Quads(__m256i a, __m256i b) {
  return DotU8S8Quads(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// Lane r: the sum of the int32 lanes of p[r] (exact), for 4 rows and 8 rows:
// the 32-element block types' per-row block sums, rows in lane order.
COLIBRI_INLINE __m128i SumLanes4(const __m256i p[4]) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
COLIBRI_INLINE __m256i SumLanes8(const __m256i p[8]) {
  // Rows 0-3 (g0) and 4-7 (g1), each as [4 rows' low-lane sums | high-lane sums].
  const __m256i g0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i g1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x21),
                          _mm256_blend_epi32(g0, g1, 0xF0));
}
// The sum of the int32 lanes of v (exact).
COLIBRI_INLINE int SumLanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 1, 1, 1)));
  return _mm_cvtsi128_si32(s);
}

// Converts the 32 int8 of v to float, multiplies by d and stores 32 floats.
COLIBRI_INLINE void StoreScaled32(__m256i v, __m256 d, float* out) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k]));
    _mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(f, d));
  }
}

// The 8 6-bit scales (bytes 0..7) and 8 6-bit mins (bytes 8..15) of a Q4_K /
// Q5_K super-block, the values GetScaleMinK4 gives. With w0..w2 the three
// packed words: [w0 & 0x3f.., (w2 & 0x0f..) | (w0 >> 2 & 0x30..), w1 & 0x3f..,
// (w2 >> 4 & 0x0f..) | (w1 >> 2 & 0x30..)], in vector registers, since the
// scales start the dependency chain of every super-block. Reads 16 bytes: the
// 12 packed ones and 4 of the block's next field.
COLIBRI_INLINE __m128i K4ScalesMins(const uint8_t* packed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  __m128i low = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // w0 w2 w1 w2
  low = _mm_srlv_epi32(low, _mm_setr_epi32(0, 0, 0, 4));
  low = _mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  __m128i high = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // w0 w0 w1 w1
  high = _mm_and_si128(_mm_srli_epi32(high, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, high);
}

// [Σ of the int32 lanes of a, Σ of those of b, the same again] (exact).
COLIBRI_INLINE __m128i SumPairVector(__m256i a, __m256i b) {
  const __m256i h = _mm256_hadd_epi32(a, b);
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  return _mm_hadd_epi32(s, s);
}

// Software prefetch of the weights. Rows of 2048 columns are 1-2 KiB, too
// short a stream for the hardware prefetchers to ramp up before a tile moves
// to the next row, so decode read the weights well below the memory
// bandwidth. The tiles ask for the weights about kPrefetchBytes ahead of the
// row they compute, so that a contiguous region is always in flight.
inline constexpr uint64_t kPrefetchBytes = 12 * 1024;

// Rows of row_bytes ahead (at least one) that cover kPrefetchBytes.
COLIBRI_INLINE int64_t PrefetchRowsAhead(uint64_t row_bytes) {
  return static_cast<int64_t>((kPrefetchBytes + row_bytes - 1) / row_bytes);
}

// Prefetches the `bytes` bytes at p + offset into L1, one request per 64-byte
// line. Prefetching never faults, so an address past the matrix's end (the
// last rows) is harmless; uintptr_t arithmetic keeps the pointer itself from
// going out of bounds. kLocality is __builtin_prefetch's: 3 (prefetcht0), or
// kReadOnce for weights that a one-token product reads once and that nothing
// reads again soon (prefetchnta; it keeps them out of the outer caches).
inline constexpr int kReadOnce = 0;
template <int kLocality = 3>
COLIBRI_INLINE void PrefetchBytes(const void* p, uint64_t offset, uint64_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + offset;
  for (uint64_t b = 0; b < bytes; b += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(at + b), 0, kLocality);
  }
}

// Attention over a KV cache (attend_avx2.cc, attend_avx512.cc) reads a
// head's rows one after the other, each once per block of queries. The
// passes ask for the rows about kAttendPrefetchBytes ahead of those they
// compute: the hardware prefetchers alone read a head's keys and values well
// below the memory's rate at long depths (docs/benchmarks.md).
inline constexpr int kAttendPrefetchBytes = 8 * 1024;

// Rows of `dim` floats ahead (at least one) that cover kAttendPrefetchBytes.
COLIBRI_INLINE int AttendRowsAhead(int dim) {
  const int rows = kAttendPrefetchBytes / (dim * static_cast<int>(sizeof(float)));
  return rows > 0 ? rows : 1;
}

// The first `bytes` bytes of rows [from, to) (row r at rows + r * stride
// floats); rows past the cache are harmless (PrefetchBytes).
COLIBRI_INLINE void PrefetchRows(const float* rows, int64_t stride, int from, int to, int bytes) {
  for (int r = from; r < to; ++r) {
    PrefetchBytes(rows, static_cast<uint64_t>(r) * stride * sizeof(float), bytes);
  }
}

// The whole of rows [from, to) (row r at rows + r * stride, row_bytes each):
// float rows or q8_0 blocks of a KV cache.
template <typename T>
COLIBRI_INLINE void PrefetchWholeRows(const T* rows, int64_t stride, int from, int to,
                                      int row_bytes) {
  for (int r = from; r < to; ++r) {
    PrefetchBytes(rows, static_cast<uint64_t>(r) * stride * sizeof(T), row_bytes);
  }
}

// Bytes of a KV cache row of dim elements: floats, or q8_0 blocks.
template <typename T>
COLIBRI_INLINE int AttendRowBytes(int dim) {
  return std::is_same_v<T, float> ? dim * 4 : dim / kQK * static_cast<int>(sizeof(T));
}

// The first kN rows at `rows` (row r at rows + r * stride), rows past
// `count` repeating the last one (attention passes over a fixed count).
template <int kN, typename T>
COLIBRI_INLINE void PassRows(const T* rows, int64_t stride, int count, const T** out) {
  for (int r = 0; r < kN; ++r) out[r] = rows + (r < count - 1 ? r : count - 1) * stride;
}

// Tile driver: splits the tokens into groups of up to four and calls
// Kernel::Run<T>(row, rows_of_activations, cols, out[T]) per row. Before a
// row, it prefetches the row PrefetchRowsAhead() further on (the rows of the
// next call, at the end of a tile: RunQuantRows walks a matrix's rows in order).
template <typename Kernel>
void QuantTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
               const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  QuantizedRow a[kMaxTokenTile];
  QuantizedRow::AtEach(layout, act, n_tokens, a);
  const int64_t ahead = PrefetchRowsAhead(row_bytes);
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + r * row_bytes;
    PrefetchBytes(w, (r + ahead) * row_bytes, row_bytes);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
      float out[4];
      const int64_t nt = n_tokens - t0 < 4 ? n_tokens - t0 : 4;
      switch (nt) {
        case 1:
          Kernel::template Run<1>(row, a + t0, layout.cols, out);
          break;
        case 2:
          Kernel::template Run<2>(row, a + t0, layout.cols, out);
          break;
        case 3:
          Kernel::template Run<3>(row, a + t0, layout.cols, out);
          break;
        default:
          Kernel::template Run<4>(row, a + t0, layout.cols, out);
          break;
      }
      for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r] = out[t];
    }
  }
}

// K-quant tables, filled by vec_dot_avx2_k.cc.
void FillKQuantKernels(KernelSet* k);
// 256-element i-quant tables, filled by vec_dot_avx2_iq.cc.
void FillIqKernels(KernelSet* k);
// Replaces k's Q4_K, Q5_K and Q6_K quantized tiles with the GEMM tiles of
// gemm_avx2.cc, which hand their edge rows to the tiles k held before. Call
// once while building the AVX2 kernel set, after FillKQuantKernels (not
// thread-safe; the set is read-only afterwards).
void InstallGemmTiles(KernelSet* k);
// Fills k's interleaved_tile entries with interleaved_avx2.cc's tiles.
void InstallInterleavedTiles(KernelSet* k);

}  // namespace colibri::ops::internal::avx2

#endif  // COLIBRI_MODEL_OPS_AVX2_COMMON_H_
