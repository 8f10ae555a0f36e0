// AVX2 kernels for the 256-element i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS) against Q8_K activations.
//
// Each 32-weight sub-block is decoded in registers to the integer form of
// iq_decode.h (int8 weights, an int16 scale per 16 weights) and dotted with
// each token's int8 activations. The grid indices of a sub-block are computed
// as one vector and looked up with a single gather (four 64-bit entries, or
// eight 32-bit IQ3 entries); so are the 7-bit sign fields of IQ2_XXS, IQ2_XS
// and IQ3_XXS (in a 128-entry table of +-1 bytes built here), while the full
// sign bytes of IQ2_S and IQ3_S are spread to +-1 bytes by a shuffle. The
// grid types keep their unsigned magnitudes and move the signs onto the
// activations (vpsignb by the +-1 bytes: one instruction per token, where the
// masks' (a ^ m) - m took two), so one vpmaddubsw per token multiplies them: the
// magnitudes are at most 62 and |qa| at most 127, so its pair sums never
// saturate, and vpmaddwd by the scales yields exact int32 sums. The float part
// per super-block is vec_dot.h's.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "model/ops/avx2_common.h"
#include "model/ops/iq_decode.h"
#include "model/ops/iq_grids.h"
#include "model/ops/quant_blocks.h"

namespace colibri::ops::internal::avx2 {
namespace {

COLIBRI_INLINE uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Byte j of entry f is -1 (0xFF) where weight j of a 7-bit sign field f is
// negative (bit j of SignsFrom7(f)), +1 elsewhere: vpsignb's operand.
constexpr std::array<uint64_t, 128> MakeSign7Bytes() {
  std::array<uint64_t, 128> t{};
  for (int f = 0; f < 128; ++f) {
    const int s = kSignsFrom7.v[f];
    uint64_t m = 0;
    for (int j = 0; j < 8; ++j) m |= uint64_t{((s >> j) & 1) ? 0xFFu : 0x01u} << (8 * j);
    t[f] = m;
  }
  return t;
}
constexpr std::array<uint64_t, 128> kSign7Bytes = MakeSign7Bytes();

// Table entries i0..i3 as the four 64-bit lanes, loaded straight into vector
// registers (vmovq, vpinsrq): on the Zen 4 this was tuned on, vpgatherdq was
// slower than these scalar-indexed loads.
COLIBRI_INLINE __m256i Lookup4(const uint64_t* table, uint32_t i0, uint32_t i1, uint32_t i2,
                               uint32_t i3) {
  const __m128i lo = _mm_insert_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(table + i0)),
                                      static_cast<int64_t>(table[i1]), 1);
  const __m128i hi = _mm_insert_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(table + i2)),
                                      static_cast<int64_t>(table[i3]), 1);
  return _mm256_set_m128i(hi, lo);
}

// Eight 32-bit table entries at i[0..7].
COLIBRI_INLINE __m256i Lookup8(const uint32_t* table, const uint32_t i[8]) {
  __m128i lo = _mm_cvtsi32_si128(static_cast<int>(table[i[0]]));
  __m128i hi = _mm_cvtsi32_si128(static_cast<int>(table[i[4]]));
  lo = _mm_insert_epi32(lo, static_cast<int>(table[i[1]]), 1);
  hi = _mm_insert_epi32(hi, static_cast<int>(table[i[5]]), 1);
  lo = _mm_insert_epi32(lo, static_cast<int>(table[i[2]]), 2);
  hi = _mm_insert_epi32(hi, static_cast<int>(table[i[6]]), 2);
  lo = _mm_insert_epi32(lo, static_cast<int>(table[i[3]]), 3);
  hi = _mm_insert_epi32(hi, static_cast<int>(table[i[7]]), 3);
  return _mm256_set_m128i(hi, lo);
}

// The sign bytes of the four 7-bit sign fields at bits 0, 7, 14 and 21 of aux.
COLIBRI_INLINE __m256i Sign7BytesOf(uint32_t aux) {
  return Lookup4(kSign7Bytes.data(), aux & 127, (aux >> 7) & 127, (aux >> 14) & 127,
                 (aux >> 21) & 127);
}

// Byte j is -1 where bit j of the 32-bit word w is set, +1 elsewhere.
COLIBRI_INLINE __m256i SignBytes(uint32_t w) {
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(w)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                         _mm256_set1_epi8(1));
}

// The int16 scale vector of a sub-block: s_lo for its first 16 weights (the
// low 128 bits of vpmaddubsw's pair sums), s_hi for the others.
COLIBRI_INLINE __m256i Scales(int s_lo, int s_hi) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s_hi)),
                          _mm_set1_epi16(static_cast<int16_t>(s_lo)));
}

// One scale for all 32 weights (one broadcast).
COLIBRI_INLINE __m256i Scales(int s) { return _mm256_set1_epi16(static_cast<int16_t>(s)); }

// One decoded sub-block. Grid types (kSignedQ false): q holds the unsigned
// magnitudes and sign -1 where the weight is negative, +1 elsewhere. IQ1
// (kSignedQ true): q holds the signed weights and sign is unused.
struct Chunk {
  __m256i q;
  __m256i sign;
  __m256i scales;
};

// Each decoder: Scale(b) (the fp16 d as float), Decode(b, c, iq1) (sub-block
// c; iq1 is Iq1Entries(false), fetched once per row), kFinal and kSignedQ. The index and scale
// logic restates iq_decode.cc's; the kernel-set tests hold the two to the same integers.
struct IQ2_XXSAvx2 {
  using Block = BlockIQ2_XXS;
  static constexpr float kFinal = 0.125f;
  static constexpr bool kSignedQ = false;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  COLIBRI_INLINE static Chunk Decode(const Block& b, int c, const uint64_t* /*iq1*/) {
    const auto* qs = reinterpret_cast<const uint8_t*>(b.qs) + 8 * c;
    const uint32_t aux = Load32(qs + 4);
    const int s = static_cast<int>(2 * (aux >> 28) + 1);
    return {Lookup4(kIq2xxsGrid, qs[0], qs[1], qs[2], qs[3]), Sign7BytesOf(aux), Scales(s)};
  }
};

struct IQ2_XSAvx2 {
  using Block = BlockIQ2_XS;
  static constexpr float kFinal = 0.125f;
  static constexpr bool kSignedQ = false;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  COLIBRI_INLINE static Chunk Decode(const Block& b, int c, const uint64_t* /*iq1*/) {
    // Four 16-bit words: a 9-bit grid index and a 7-bit sign field each.
    uint64_t v;
    std::memcpy(&v, reinterpret_cast<const uint8_t*>(b.qs) + 8 * c, sizeof(v));
    const auto w = [v](int l) { return static_cast<uint32_t>(v >> (16 * l)); };
    return {Lookup4(kIq2xsGrid, w(0) & 511, w(1) & 511, w(2) & 511, w(3) & 511),
            Lookup4(kSign7Bytes.data(), (w(0) >> 9) & 127, (w(1) >> 9) & 127, (w(2) >> 9) & 127,
                    (w(3) >> 9) & 127),
            Scales(2 * (b.scales[c] & 0xF) + 1, 2 * (b.scales[c] >> 4) + 1)};
  }
};

struct IQ2_SAvx2 {
  using Block = BlockIQ2_S;
  static constexpr float kFinal = 0.125f;
  static constexpr bool kSignedQ = false;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  COLIBRI_INLINE static Chunk Decode(const Block& b, int c, const uint64_t* /*iq1*/) {
    // Index l: qs[4c + l] | bits 2l, 2l+1 of qh[c] as bits 8, 9.
    const uint8_t* qs = b.qs + 4 * c;
    const uint32_t h = b.qh[c];
    return {Lookup4(kIq2sGrid, qs[0] | ((h << 8) & 0x300), qs[1] | ((h << 6) & 0x300),
                    qs[2] | ((h << 4) & 0x300), qs[3] | ((h << 2) & 0x300)),
            SignBytes(Load32(b.qs + 32 + 4 * c)),
            Scales(2 * (b.scales[c] & 0xF) + 1, 2 * (b.scales[c] >> 4) + 1)};
  }
};

struct IQ3_XXSAvx2 {
  using Block = BlockIQ3_XXS;
  static constexpr float kFinal = 0.25f;
  static constexpr bool kSignedQ = false;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  COLIBRI_INLINE static Chunk Decode(const Block& b, int c, const uint64_t* /*iq1*/) {
    const uint8_t* qs = b.qs + 8 * c;
    const uint32_t idx[8] = {qs[0], qs[1], qs[2], qs[3], qs[4], qs[5], qs[6], qs[7]};
    const uint32_t aux = Load32(b.qs + 64 + 4 * c);
    const int s = static_cast<int>(2 * (aux >> 28) + 1);
    return {Lookup8(kIq3xxsGrid, idx), Sign7BytesOf(aux), Scales(s)};
  }
};

struct IQ3_SAvx2 {
  using Block = BlockIQ3_S;
  static constexpr float kFinal = 1.0f;
  static constexpr bool kSignedQ = false;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  COLIBRI_INLINE static Chunk Decode(const Block& b, int c, const uint64_t* /*iq1*/) {
    // Index k: qs[8c + k] | bit k of qh[c] as bit 8.
    const uint8_t* qs = b.qs + 8 * c;
    const uint32_t h = static_cast<uint32_t>(b.qh[c]) << 8;
    uint32_t idx[8];
    for (int k = 0; k < 8; ++k) idx[k] = qs[k] | ((h >> k) & 0x100);
    const int s = 2 * ((b.scales[c / 2] >> (4 * (c % 2))) & 0xF) + 1;
    return {Lookup8(kIq3sGrid, idx), SignBytes(Load32(b.signs + 4 * c)), Scales(s)};
  }
};

// IQ1_S / IQ1_M: 8 * grid ± 1 straight from the expanded table, whose entry
// idx + 2048 is entry idx with the negative shift (iq_decode.h).
struct IQ1_SAvx2 {
  using Block = BlockIQ1_S;
  static constexpr float kFinal = 0.125f;
  static constexpr bool kSignedQ = true;
  COLIBRI_INLINE static float Scale(const Block& b) { return Half(b.d); }
  COLIBRI_INLINE static Chunk Decode(const Block& b, int c, const uint64_t* iq1) {
    uint16_t qh;
    std::memcpy(&qh, reinterpret_cast<const uint8_t*>(b.qh) + 2 * c, sizeof(qh));
    // Index l: qs[4c + l] | qh bits 3l..3l+2 as bits 8..10 | the shift sign
    // (qh bit 15) as bit 11.
    const uint8_t* qs = b.qs + 4 * c;
    const uint32_t h = static_cast<uint32_t>(qh) << 8;
    const uint32_t shift = (qh & 0x8000u) >> 4;
    const int s = 2 * ((qh >> 12) & 7) + 1;
    return {Lookup4(iq1, qs[0] | (h & 0x700) | shift, qs[1] | ((h >> 3) & 0x700) | shift,
                    qs[2] | ((h >> 6) & 0x700) | shift, qs[3] | ((h >> 9) & 0x700) | shift),
            _mm256_setzero_si256(), Scales(s)};
  }
};

struct IQ1_MAvx2 {
  using Block = BlockIQ1_M;
  static constexpr float kFinal = 0.125f;
  static constexpr bool kSignedQ = true;
  COLIBRI_INLINE static float Scale(const Block& b) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof(sc));
    return Half(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                      ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
  }
  COLIBRI_INLINE static Chunk Decode(const Block& b, int c, const uint64_t* iq1) {
    uint16_t qh;
    std::memcpy(&qh, b.qh + 2 * c, sizeof(qh));
    // Index l: qs[4c + l] | nibble l of qh (three index bits, then the shift
    // sign) as bits 8..11.
    const uint8_t* qs = b.qs + 4 * c;
    const uint32_t h = static_cast<uint32_t>(qh) << 8;
    uint16_t word;
    std::memcpy(&word, b.scales + 2 * (c / 2), sizeof(word));
    const int w = word >> (6 * (c % 2));
    return {Lookup4(iq1, qs[0] | (h & 0xF00), qs[1] | ((h >> 4) & 0xF00),
                    qs[2] | ((h >> 8) & 0xF00), qs[3] | ((h >> 12) & 0xF00)),
            _mm256_setzero_si256(), Scales(2 * (w & 7) + 1, 2 * ((w >> 3) & 7) + 1)};
  }
};

template <typename D>
struct GridKernel {
  template <int T>
  static void Run(const uint8_t* row, const QuantizedRow* a, int64_t cols, float* out) {
    const auto* x = reinterpret_cast<const typename D::Block*>(row);
    const uint64_t* const iq1 = D::kSignedQ ? Iq1Entries(false) : nullptr;
    float acc[T];
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    for (int64_t b = 0; b < cols / kQK_K; ++b) {
      __m256i sum[T];
      for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const Chunk k = D::Decode(x[b], c, iq1);
        const __m256i mag = D::kSignedQ ? _mm256_sign_epi8(k.q, k.q) : k.q;
        for (int t = 0; t < T; ++t) {
          const __m256i av =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + b * kQK_K + 32 * c));
          const __m256i sv = _mm256_sign_epi8(av, D::kSignedQ ? k.q : k.sign);
          const __m256i pairs = _mm256_maddubs_epi16(mag, sv);
          sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(pairs, k.scales));
        }
      }
      const float d = D::Scale(x[b]);
      for (int t = 0; t < T; ++t) {
        __m128i r =
            _mm_add_epi32(_mm256_castsi256_si128(sum[t]), _mm256_extracti128_si256(sum[t], 1));
        r = _mm_hadd_epi32(r, r);
        r = _mm_hadd_epi32(r, r);
        acc[t] = acc[t] + (d * a[t].d[b]) * static_cast<float>(_mm_cvtsi128_si32(r));
      }
    }
    for (int t = 0; t < T; ++t) out[t] = acc[t] * D::kFinal;
  }
};
// IQ4_XS decodes in registers: 32 nibbles per sub-block looked up in the
// IQ4_NL table (vpshufb), the same integers as DecodeIQ4_XS.
struct IQ4_XSKernel {
  template <int T>
  static void Run(const uint8_t* row, const QuantizedRow* a, int64_t cols, float* out) {
    const auto* x = reinterpret_cast<const BlockIQ4_XS*>(row);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    float acc[T];
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
    for (int64_t b = 0; b < cols / kQK_K; ++b) {
      // Sub-block by sub-block for all tokens, so that its quants, their
      // magnitudes and its scale stay in registers (eight decoded sub-blocks
      // kept for a token loop after them spilled to the stack).
      __m256i sum[T];
      for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int ib = 0; ib < 8; ++ib) {
        const __m256i q = _mm256_shuffle_epi8(table, Nibbles32(x[b].qs + 16 * ib));
        const __m256i mag = _mm256_sign_epi8(q, q);
        const int ls = ((x[b].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                       (((x[b].scales_h >> (2 * ib)) & 3) << 4);
        const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(ls - 32));
        for (int t = 0; t < T; ++t) {
          const __m256i av = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(a[t].qs + b * kQK_K + 32 * ib));
          const __m256i pairs = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(av, q));
          sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(pairs, scale));
        }
      }
      const float d = Half(x[b].d);
      for (int t = 0; t < T; ++t) {
        __m128i r =
            _mm_add_epi32(_mm256_castsi256_si128(sum[t]), _mm256_extracti128_si256(sum[t], 1));
        r = _mm_hadd_epi32(r, r);
        r = _mm_hadd_epi32(r, r);
        acc[t] = acc[t] + (d * a[t].d[b]) * static_cast<float>(_mm_cvtsi128_si32(r));
      }
    }
    for (int t = 0; t < T; ++t) out[t] = acc[t];  // kFinal is 1
  }
};

}  // namespace

void FillIqKernels(KernelSet* k) {
  const KernelSet& portable = PortableKernels();  // the scalar decoders serve dequant
  for (TensorType type :
       {TensorType::kIQ2_XXS, TensorType::kIQ2_XS, TensorType::kIQ2_S, TensorType::kIQ3_XXS,
        TensorType::kIQ3_S, TensorType::kIQ1_S, TensorType::kIQ1_M, TensorType::kIQ4_XS}) {
    k->dequant[Slot(type)] = portable.dequant[Slot(type)];
  }
  k->quant_tile[Slot(TensorType::kIQ2_XXS)] = &QuantTile<GridKernel<IQ2_XXSAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ2_XS)] = &QuantTile<GridKernel<IQ2_XSAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ2_S)] = &QuantTile<GridKernel<IQ2_SAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ3_XXS)] = &QuantTile<GridKernel<IQ3_XXSAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ3_S)] = &QuantTile<GridKernel<IQ3_SAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ1_S)] = &QuantTile<GridKernel<IQ1_SAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ1_M)] = &QuantTile<GridKernel<IQ1_MAvx2>>;
  k->quant_tile[Slot(TensorType::kIQ4_XS)] = &QuantTile<IQ4_XSKernel>;
}

}  // namespace colibri::ops::internal::avx2
