// AVX-512 (F, BW, VL, VNNI) kernel set: the AVX2 set (vec_dot_avx2*.cc) with
// 512-bit VNNI quantized tiles for Q4_K, Q5_K and Q6_K against Q8_K
// activations; every other entry is the AVX2 function. (A VNNI tile for the
// 32-element block types measured no faster than AVX2 on the Zen 4 class core
// this was tuned on, and at decode Q8_0 already streams at the memory limit.)
//
// A super-block is four 64-element parts. Each type's decoder yields part p's
// unsigned quants u (as in vec_dot_avx2_k.cc: the quant plus an offset that
// the bsums take back out) in element order, so they meet 64 contiguous
// activations in one vpdpbusd: int32 lane i is the exact Σ u*qa over elements
// 64p + 4i .. 64p + 4i + 3 (no saturation, unlike vpmaddubsw, whose 16-bit
// pair sums the AVX2 kernels keep below 2 * 63 * 128). Those lanes are summed
// per 16-element group, multiplied by the group scales and summed again, all
// in exact int32 arithmetic, so the integers are those of the AVX2 and
// portable kernels and the float part per super-block is vec_dot.h's.
#include <immintrin.h>

#include <type_traits>

#include "model/ops/attend_avx512.h"
#include "model/ops/avx2_common.h"
#include "model/ops/gemm.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {

namespace avx512 {
namespace {

using avx2::Half;

// Bytes lo in the low 256 bits, hi in the high 256 bits.
COLIBRI_INLINE __m512i HalfBytes(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(lo)),
                            _mm256_set1_epi8(static_cast<char>(hi)), 1);
}

COLIBRI_INLINE __m512i HalfWords(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)),
                            _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
}

COLIBRI_INLINE __m512i Broadcast32Bytes(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The 16 int16 group scales, widened to int32 in the order GroupSums() leaves
// the group sums in: lane 4k + j holds group 4j + k.
COLIBRI_INLINE __m512i TransposedScales(__m256i scales16) {
  const __m256i order =
      _mm256_setr_epi16(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_cvtepi16_epi32(_mm256_permutexvar_epi16(order, scales16));
}

// The 16 group sums of a super-block from its four parts' vpdpbusd results:
// 128-bit lane k of part p holds the four quad sums of group 4p + k, and a 4x4
// transpose-and-add within each 128-bit lane leaves group 4j + k's total in
// int32 lane 4k + j. Unpacks and adds run beside vpdpbusd, where per-part
// vpmaddwd by the scales would share its pipe (on Zen 4 at least).
COLIBRI_INLINE __m512i GroupSums(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512i x = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
  const __m512i y = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y));
}

// Decoders: constructed from one super-block; Quants(p) gives part p,
// GroupScales() the 16 int16 scales of the 16-element groups, BsumFactor() the
// int16 factors of the activation group sums (the mins, or the group scales
// when kOffset is not 0). With kHighTimes16, the high 32 bytes of each part
// hold 16 * u (Q4_K's high nibbles, masked in place rather than shifted down,
// which saves a masked shift per part); the kernel then scales the other
// groups by 16 too and divides the exact total by 16.

template <bool kFiveBit>
struct Q45KAvx512 {
  using Block = std::conditional_t<kFiveBit, BlockQ5_K, BlockQ4_K>;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kHighTimes16 = !kFiveBit;
  const Block& b;
  __m128i packed;  // 8 scales, 8 mins
  __m512i high;    // the 32 qh bytes in both halves (Q5_K)
  COLIBRI_INLINE explicit Q45KAvx512(const Block& block)
      : b(block), packed(avx2::K4ScalesMins(block.scales)), high(HighBits(block)) {}
  COLIBRI_INLINE static __m512i HighBits(const Block& block) {
    if constexpr (kFiveBit) {
      return Broadcast32Bytes(block.qh);
    } else {
      return _mm512_setzero_si512();
    }
  }
  // Part p: low nibbles of qs[32p..] (sub-block 2p), then their high nibbles
  // (sub-block 2p + 1), for Q4_K left in place (16 * u); for Q5_K shifted down
  // and bit 2p resp. 2p + 1 of qh[l] as bit 4.
  COLIBRI_INLINE __m512i Quants(int p) const {
    const __m512i q = Broadcast32Bytes(b.qs + 32 * p);
    if constexpr (!kFiveBit) {
      return _mm512_and_si512(q, HalfBytes(0x0F, 0xF0));
    } else {
      const __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xFFFF0000u, q, 4),
                                         _mm512_set1_epi8(0x0F));
      const __mmask64 set = _mm512_test_epi8_mask(high, HalfBytes(1 << (2 * p), 1 << (2 * p + 1)));
      return _mm512_mask_add_epi8(u, set, u, _mm512_set1_epi8(0x10));  // bit 4 is clear
    }
  }
  COLIBRI_INLINE __m256i GroupScales() const {
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(packed, packed));
  }
  COLIBRI_INLINE __m256i BsumFactor() const {
    return _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(packed, packed));
  }
  COLIBRI_INLINE float d() const { return Half(b.d); }
  COLIBRI_INLINE float dmin() const { return Half(b.dmin); }
};

using Q4_KAvx512 = Q45KAvx512<false>;
using Q5_KAvx512 = Q45KAvx512<true>;

struct Q6_KAvx512 {
  using Block = BlockQ6_K;
  static constexpr int kOffset = 32;
  static constexpr bool kHasMin = false;
  static constexpr bool kHighTimes16 = false;
  const Block& b;
  __m128i scales8;
  COLIBRI_INLINE explicit Q6_KAvx512(const Block& block)
      : b(block), scales8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block.scales))) {}
  // Part p = 2 * half + k2 covers the AVX2 chunks 4 half + 2 k2 and the next:
  // low (k2 = 0) or high (k2 = 1) nibbles of ql[64 half..64 half + 63], and of
  // qh[32 half + l] bits 4 k2 + 0, 1 (low 256 bits) or 4 k2 + 2, 3 (high) as
  // bits 4, 5.
  COLIBRI_INLINE __m512i Quants(int p) const {
    const int half = p / 2;
    const __m512i l = _mm512_loadu_si512(b.ql + 64 * half);
    const __m512i h = Broadcast32Bytes(b.qh + 32 * half);
    __m512i low, high;
    if (p % 2 == 0) {
      low = l;
      high = _mm512_sllv_epi16(h, HalfWords(4, 2));
    } else {
      low = _mm512_srli_epi16(l, 4);
      high = _mm512_srlv_epi16(h, HalfWords(0, 2));
    }
    high = _mm512_and_si512(high, _mm512_set1_epi8(0x30));
    // (low & 0x0F) | high
    return _mm512_ternarylogic_epi32(low, high, _mm512_set1_epi8(0x0F), 0xEC);
  }
  COLIBRI_INLINE __m256i GroupScales() const { return _mm256_cvtepi8_epi16(scales8); }
  COLIBRI_INLINE __m256i BsumFactor() const { return _mm256_cvtepi8_epi16(scales8); }
  COLIBRI_INLINE float d() const { return Half(b.d); }
  COLIBRI_INLINE float dmin() const { return 0.0f; }
};

// A super-block's dependency chain, from its scale bytes through the products
// and the horizontal sums to its float update, is long compared with the time
// to issue it, so the loop is software-pipelined over three super-blocks:
// iteration i unpacks the scales of super-block i + 1, forms the products of
// super-block i and finishes the sums and the float update of super-block
// i - 1, whose inputs are ready by then. The float updates still run in
// super-block order, exactly as vec_dot.h prescribes.
template <typename D>
struct SuperBlockKernel {
  // Stage 1: what a super-block needs from its scale fields.
  struct Scales {
    __m512i group;    // int32 group scales in GroupSums() order
    __m256i factor;   // int16 bsum factors
    float d, dmin;
  };
  // Stage 2 output per token: 8 int32 partial sums of Σ sc*u*qa (times 16
  // for kHighTimes16) and 8 of Σ factor*bsum.
  struct Partial {
    __m256i products;
    __m256i bsums;
  };

  COLIBRI_INLINE static Scales Prepare(const typename D::Block& block) {
    const D dec(block);
    __m512i group = TransposedScales(dec.GroupScales());
    if constexpr (D::kHighTimes16) {
      // Lanes 0..7 hold the groups of the low 32 bytes of each part.
      group = _mm512_sllv_epi32(group, _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0,
                                                         0, 0, 0));
    }
    return Scales{group, dec.BsumFactor(), dec.d(), dec.dmin()};
  }

  template <int T>
  COLIBRI_INLINE static void Products(const typename D::Block& block, const Scales& sc,
                                      const QuantizedRow* a, int64_t i, Partial* out) {
    const D dec(block);
    const __m512i zero = _mm512_setzero_si512();
    __m512i v[T][4];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i u = dec.Quants(p);
      for (int t = 0; t < T; ++t) {
        const __m512i qa = _mm512_loadu_si512(a[t].qs + kQK_K * i + 64 * p);
        v[t][p] = _mm512_dpbusd_epi32(zero, u, qa);
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m512i g = _mm512_mullo_epi32(GroupSums(v[t][0], v[t][1], v[t][2], v[t][3]), sc.group);
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].bsums + 16 * i));
      out[t].products =
          _mm256_add_epi32(_mm512_castsi512_si256(g), _mm512_extracti64x4_epi64(g, 1));
      out[t].bsums = _mm256_madd_epi16(bs, sc.factor);
    }
  }

  // Stage 3: the integers of super-block i and vec_dot.h's float update.
  template <int T>
  COLIBRI_INLINE static void Finish(const Partial* part, const Scales& sc, const QuantizedRow* a,
                                    int64_t i, float* acc) {
    for (int t = 0; t < T; ++t) {
      // [Σ sc*u*qa, Σ factor*bsum, ...]
      __m128i sums = avx2::SumPairVector(part[t].products, part[t].bsums);
      // 16 * Σ sc*u*qa is at most 16 * 256 * 15 * 63 * 127 < 2^31, and exact.
      if constexpr (D::kHighTimes16) sums = _mm_srav_epi32(sums, _mm_setr_epi32(4, 0, 4, 0));
      if constexpr (!D::kHasMin) {
        sums = _mm_sub_epi32(
            sums, _mm_mullo_epi32(_mm_shuffle_epi32(sums, 0x55), _mm_set1_epi32(D::kOffset)));
      }
      const __m128 f = _mm_cvtepi32_ps(sums);
      const float da = a[t].d[i];
      acc[t] = acc[t] + (sc.d * da) * _mm_cvtss_f32(f);
      if constexpr (D::kHasMin) {
        acc[t] = acc[t] - (sc.dmin * da) * _mm_cvtss_f32(_mm_movehdup_ps(f));
      }
    }
  }

  template <int T>
  static void Run(const uint8_t* row, const QuantizedRow* a, int64_t cols, float* out) {
    const auto* x = reinterpret_cast<const typename D::Block*>(row);
    const int64_t nb = cols / kQK_K;
    float acc[T];
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    if (nb > 0) {
      Scales current = Prepare(x[0]);
      Scales previous = current;
      Partial partial[T];
      for (int64_t i = 0; i < nb; ++i) {
        const Scales next = Prepare(x[i + 1 < nb ? i + 1 : i]);
        Partial fresh[T];
        Products<T>(x[i], current, a, i, fresh);
        if (i > 0) Finish<T>(partial, previous, a, i - 1, acc);
        for (int t = 0; t < T; ++t) partial[t] = fresh[t];
        previous = current;
        current = next;
      }
      Finish<T>(partial, previous, a, nb - 1, acc);
    }
    for (int t = 0; t < T; ++t) out[t] = acc[t];
  }
};

// Q5_K tiles of three or more tokens go to the AVX2 kernel, which measured
// faster there (the results are the same bits either way).
void Q5_KTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
              const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens >= 3) {
    Avx2KernelsUnchecked().quant_tile[Slot(TensorType::kQ5_K)](w, row_bytes, n_rows, act,
                                                               layout, n_tokens, y, y_stride);
  } else {
    avx2::QuantTile<SuperBlockKernel<Q5_KAvx512>>(w, row_bytes, n_rows, act, layout, n_tokens, y,
                                                  y_stride);
  }
}

KernelSet MakeAvx512() {
  KernelSet k = Avx2KernelsUnchecked();
  k.name = "avx512";
  // The interleaved layout: Q4_K, Q5_K and Q6_K with this set's own tiles
  // (interleaved_avx512.cc); the 32-element types with the AVX2 set's, which
  // beat the AVX2 per-row tiles this set runs for them (the same
  // instructions, fewer multiplies; colibri_ops_bench --layout=both).
  InstallAvx512InterleavedTiles(&k);
  k.quant_tile[Slot(TensorType::kQ4_K)] = &avx2::QuantTile<SuperBlockKernel<Q4_KAvx512>>;
  k.quant_tile[Slot(TensorType::kQ5_K)] = &Q5_KTile;
  k.quant_tile[Slot(TensorType::kQ6_K)] = &avx2::QuantTile<SuperBlockKernel<Q6_KAvx512>>;
  // 4 x 4 GEMM tiles for batches of tokens; the tiles above take the edges.
  InstallAvx512GemmTiles(&k);
  // Attention: query · key dots and weighted value sums.
  InstallAvx512AttendKernels(&k);
  return k;
}

}  // namespace
}  // namespace avx512

const KernelSet& Avx512KernelsUnchecked() {
  static const KernelSet kernels = avx512::MakeAvx512();
  return kernels;
}

}  // namespace colibri::ops::internal
