// AVX2 kernels for the 256-element i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS) against Q8_K activations.
//
// Each super-block is decoded once to its integer form (iq_decode.h, the same
// decoder every kernel set uses) and then dotted with each token's int8
// activations: |q| and |qa| are at most 127, so vpmaddubsw's pair sums (at most
// 2 * 127 * 127) never saturate, and vpmaddwd by the 16-element group scales
// yields exact int32 sums. The float part per super-block is vec_dot.h's.
#include <immintrin.h>

#include "model/ops/avx2_common.h"
#include "model/ops/iq_decode.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal::avx2 {
namespace {

// Σ_g scale[g] * Σ_{e in g} q[e] * qa[e] over one super-block, exactly.
COLIBRI_INLINE int SuperBlockSum(const IqSuperBlock& s, const __m256i scales[8], const int8_t* qa) {
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(s.q + 32 * c));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa + 32 * c));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales[c]));
  }
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  r = _mm_hadd_epi32(r, r);
  r = _mm_hadd_epi32(r, r);
  return _mm_cvtsi128_si32(r);
}

template <TensorType kType>
struct IqKernel {
  template <int T>
  static void Run(const uint8_t* row, const QuantizedRow* a, int64_t cols, float* out) {
    const IqTypeInfo info = GetIqTypeInfo(kType);
    float acc[T];
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    IqSuperBlock s;
    for (int64_t b = 0; b < cols / kQK_K; ++b) {
      info.decode(row + b * info.block_bytes, &s);
      // Chunk c (elements 32c..32c+31): group 2c's scale in the low lane,
      // group 2c + 1's in the high lane.
      __m256i scales[8];
      for (int c = 0; c < 8; ++c) {
        scales[c] =
            _mm256_set_m128i(_mm_set1_epi16(s.scale[2 * c + 1]), _mm_set1_epi16(s.scale[2 * c]));
      }
      for (int t = 0; t < T; ++t) {
        const int isum = SuperBlockSum(s, scales, a[t].qs + b * kQK_K);
        acc[t] = acc[t] + (s.d * a[t].d[b]) * static_cast<float>(isum);
      }
    }
    for (int t = 0; t < T; ++t) out[t] = acc[t] * info.final_scale;
  }
};

}  // namespace

void FillIqKernels(KernelSet* k) {
  const KernelSet& portable = PortableKernels();
  for (TensorType type :
       {TensorType::kIQ2_XXS, TensorType::kIQ2_XS, TensorType::kIQ2_S, TensorType::kIQ3_XXS,
        TensorType::kIQ3_S, TensorType::kIQ1_S, TensorType::kIQ1_M, TensorType::kIQ4_XS}) {
    k->dequant[Slot(type)] = portable.dequant[Slot(type)];
  }
  k->quant_tile[Slot(TensorType::kIQ2_XXS)] = &QuantTile<IqKernel<TensorType::kIQ2_XXS>>;
  k->quant_tile[Slot(TensorType::kIQ2_XS)] = &QuantTile<IqKernel<TensorType::kIQ2_XS>>;
  k->quant_tile[Slot(TensorType::kIQ2_S)] = &QuantTile<IqKernel<TensorType::kIQ2_S>>;
  k->quant_tile[Slot(TensorType::kIQ3_XXS)] = &QuantTile<IqKernel<TensorType::kIQ3_XXS>>;
  k->quant_tile[Slot(TensorType::kIQ3_S)] = &QuantTile<IqKernel<TensorType::kIQ3_S>>;
  k->quant_tile[Slot(TensorType::kIQ1_S)] = &QuantTile<IqKernel<TensorType::kIQ1_S>>;
  k->quant_tile[Slot(TensorType::kIQ1_M)] = &QuantTile<IqKernel<TensorType::kIQ1_M>>;
  k->quant_tile[Slot(TensorType::kIQ4_XS)] = &QuantTile<IqKernel<TensorType::kIQ4_XS>>;
}

}  // namespace colibri::ops::internal::avx2
