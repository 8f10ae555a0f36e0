// AVX2 kernels for the K-quants against Q8_K activations, and their decoders.
//
// Every type is brought to 32-element chunks of unsigned quants u (so that
// vpmaddubsw can multiply them by the signed activations) and a 16-bit scale
// per 16 elements. Offsets and mins are applied once per super-block through
// the activation group sums (bsums): for Q3_K and Q6_K, where the true quant is
// u - 4 or u - 32, Σ sc*(u-o)*a = Σ sc*u*a - o*Σ sc*bsum. All of it is exact
// integer arithmetic; the float part per super-block is vec_dot.h's.
#include <immintrin.h>

#include <type_traits>

#include "model/ops/avx2_common.h"
#include "model/ops/avx2_k_decoders.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal::avx2 {
namespace {

// The Q2_K and Q3_K decoders, in the form of avx2_k_decoders.h (which holds
// Q4_K, Q5_K and Q6_K's). Everything is inlined and the chunk loop unrolled,
// so the decoded chunks live in registers.

struct Q2_KAvx2 {
  using Block = BlockQ2_K;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  const Block& b;
  __m128i packed;
  GroupScales scales;
  COLIBRI_INLINE explicit Q2_KAvx2(const Block& block)
      : b(block),
        packed(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block.scales))),
        scales(_mm_and_si128(packed, _mm_set1_epi8(0x0F))) {}
  COLIBRI_INLINE __m256i Quants(int c) const {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c / 4)));
    return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (c % 4)), _mm256_set1_epi8(3));
  }
  COLIBRI_INLINE __m256i Scales(int c) const { return scales.Chunk(c); }
  COLIBRI_INLINE __m256i BsumFactor() const {
    return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)));
  }
  COLIBRI_INLINE float d() const { return Half(b.d); }
  COLIBRI_INLINE float dmin() const { return Half(b.dmin); }
};

// The 16 6-bit Q3_K scales, unpacked four bytes at a time (same values as
// UnpackQ3KScales), minus 32.
COLIBRI_INLINE __m128i Q3KScales(const uint8_t* packed) {
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t kmask1 = 0x03030303u, kmask2 = 0x0f0f0f0fu;
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(aux));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

struct Q3_KAvx2 {
  using Block = BlockQ3_K;
  static constexpr int kOffset = 4;
  static constexpr bool kHasMin = false;
  const Block& b;
  __m128i scales8;
  GroupScales scales;
  __m256i hmask;
  COLIBRI_INLINE explicit Q3_KAvx2(const Block& block)
      : b(block),
        scales8(Q3KScales(block.scales)),
        scales(scales8),
        hmask(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block.hmask))) {}
  // u = low 2 bits | hmask bit c << 2 (the quant plus 4).
  COLIBRI_INLINE __m256i Quants(int c) const {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c / 4)));
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (c % 4)), _mm256_set1_epi8(3));
    return _mm256_or_si256(low, _mm256_and_si256(ShiftBitTo<2>(hmask, c), _mm256_set1_epi8(4)));
  }
  COLIBRI_INLINE __m256i Scales(int c) const { return scales.Chunk(c); }
  COLIBRI_INLINE __m256i BsumFactor() const { return _mm256_cvtepi8_epi16(scales8); }
  COLIBRI_INLINE float d() const { return Half(b.d); }
  COLIBRI_INLINE float dmin() const { return 0.0f; }
};

template <typename D>
struct SuperBlockKernel {
  template <int T>
  static void Run(const uint8_t* row, const QuantizedRow* a, int64_t cols, float* out) {
    const auto* x = reinterpret_cast<const typename D::Block*>(row);
    float acc[T];
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    for (int64_t i = 0; i < cols / kQK_K; ++i) {
      const D dec(x[i]);
      __m256i sumi[T];
      for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i u = dec.Quants(c);
        const __m256i sc = dec.Scales(c);
        for (int t = 0; t < T; ++t) {
          const __m256i qa =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + kQK_K * i + 32 * c));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, qa), sc));
        }
      }
      const __m256i factor = dec.BsumFactor();
      const float dw = dec.d();
      const float dminw = dec.dmin();
      for (int t = 0; t < T; ++t) {
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bsums + 16 * i));
        int isum, bsum_dot;
        SumPair(sumi[t], _mm256_madd_epi16(bs, factor), &isum, &bsum_dot);
        const float da = a[t].d[i];
        if constexpr (D::kHasMin) {
          acc[t] = acc[t] + (dw * da) * static_cast<float>(isum);
          acc[t] = acc[t] - (dminw * da) * static_cast<float>(bsum_dot);
        } else {
          isum -= D::kOffset * bsum_dot;
          acc[t] = acc[t] + (dw * da) * static_cast<float>(isum);
        }
      }
    }
    for (int t = 0; t < T; ++t) out[t] = acc[t];
  }
};

// Exact-path decoder, in GGML's operation order: (d * sc) * float(q) - dmin * m
// per 16 elements (no subtraction at all for the types without mins, where
// subtracting 0 would turn -0 into +0).
template <typename D>
void DequantSuperBlocks(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const typename D::Block*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const D dec(x[i]);
    const float dw = dec.d(), dminw = dec.dmin();
    alignas(32) int16_t factor16[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(factor16), dec.BsumFactor());
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c, dst += 32) {
      const __m256i q = _mm256_sub_epi8(dec.Quants(c), _mm256_set1_epi8(D::kOffset));
      alignas(32) int16_t scale16[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(scale16), dec.Scales(c));
      for (int part = 0; part < 2; ++part) {
        const __m256 dl = _mm256_set1_ps(dw * static_cast<float>(scale16[8 * part]));
        const __m128i h = part == 0 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
        const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h));
        const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(h, 8)));
        __m256 y0 = _mm256_mul_ps(dl, f0), y1 = _mm256_mul_ps(dl, f1);
        if constexpr (D::kHasMin) {
          const __m256 ml = _mm256_set1_ps(dminw * static_cast<float>(factor16[2 * c + part]));
          y0 = _mm256_sub_ps(y0, ml);
          y1 = _mm256_sub_ps(y1, ml);
        }
        _mm256_storeu_ps(dst + 16 * part, y0);
        _mm256_storeu_ps(dst + 16 * part + 8, y1);
      }
    }
  }
}

}  // namespace

void FillKQuantKernels(KernelSet* k) {
  k->dequant[Slot(TensorType::kQ2_K)] = &DequantSuperBlocks<Q2_KAvx2>;
  k->dequant[Slot(TensorType::kQ3_K)] = &DequantSuperBlocks<Q3_KAvx2>;
  k->dequant[Slot(TensorType::kQ4_K)] = &DequantSuperBlocks<Q4_KAvx2>;
  k->dequant[Slot(TensorType::kQ5_K)] = &DequantSuperBlocks<Q5_KAvx2>;
  k->dequant[Slot(TensorType::kQ6_K)] = &DequantSuperBlocks<Q6_KAvx2>;
  k->quant_tile[Slot(TensorType::kQ2_K)] = &QuantTile<SuperBlockKernel<Q2_KAvx2>>;
  k->quant_tile[Slot(TensorType::kQ3_K)] = &QuantTile<SuperBlockKernel<Q3_KAvx2>>;
  k->quant_tile[Slot(TensorType::kQ4_K)] = &QuantTile<SuperBlockKernel<Q4_KAvx2>>;
  k->quant_tile[Slot(TensorType::kQ5_K)] = &QuantTile<SuperBlockKernel<Q5_KAvx2>>;
  k->quant_tile[Slot(TensorType::kQ6_K)] = &QuantTile<SuperBlockKernel<Q6_KAvx2>>;
}

}  // namespace colibri::ops::internal::avx2
