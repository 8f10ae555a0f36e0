// AVX2 kernels for the K-quants against Q8_K activations (per-row tiles and
// dequantization; the decoders are avx2_k_decoders.h's).
//
// Every type is brought to 32-element chunks of unsigned quants u (so that
// vpmaddubsw can multiply them by the signed activations) and a 16-bit scale
// per 16 elements. Offsets and mins are applied once per super-block through
// the activation group sums (bsums): for Q3_K and Q6_K, where the true quant is
// u - 4 or u - 32, Σ sc*(u-o)*a = Σ sc*u*a - o*Σ sc*bsum. All of it is exact
// integer arithmetic; the float part per super-block is vec_dot.h's.
#include <immintrin.h>

#include "model/ops/avx2_common.h"
#include "model/ops/avx2_k_decoders.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal::avx2 {
namespace {

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
