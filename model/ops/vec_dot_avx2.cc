// AVX2 + FMA + F16C kernel set: float dots, the float types and the 32-element
// block types. The K-quants are in vec_dot_avx2_k.cc. Same arithmetic as the
// portable set (vec_dot.h): products and sums stay separate instructions.
#include <immintrin.h>

#include <type_traits>

#include "model/ops/attend_avx2.h"
#include "model/ops/avx2_common.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/quant_reference.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {

namespace avx2 {
namespace {

// ---------------------------------------------------------------- float dots

// R rows by T tokens of canonical 8-lane dots. With kPrefetch (decode, where
// the weight rows stream from memory once), every 16 columns it prefetches the
// same columns of the R rows that follow, the next call's rows.
template <int R, int T, bool kPrefetch = false>
void FloatMicro(const float* w, int64_t w_stride, const float* x, int64_t x_stride, int64_t cols,
                float* y, int64_t y_stride) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    if constexpr (kPrefetch) {
      if (c % 16 == 0) {
        for (int r = 0; r < R; ++r) {
          PrefetchBytes(w, sizeof(float) * ((R + r) * w_stride + c), 64);
        }
      }
    }
    __m256 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + t * x_stride + c);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_loadu_ps(w + r * w_stride + c);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_add_ps(acc[r][t], _mm256_mul_ps(wv, xv[t]));
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float lanes[8];
      _mm256_storeu_ps(lanes, acc[r][t]);
      for (int64_t k = c; k < cols; ++k) {
        lanes[k - c] = lanes[k - c] + w[r * w_stride + k] * x[t * x_stride + k];
      }
      y[t * y_stride + r] = internal::ReduceLanes(lanes);
    }
  }
}

template <int T>
void FloatRowsForTokens(const float* w, int64_t w_stride, int64_t n_rows, const float* x,
                        int64_t x_stride, int64_t cols, float* y, int64_t y_stride) {
  int64_t r = 0;
  for (; r + 2 <= n_rows; r += 2) {
    FloatMicro<2, T>(w + r * w_stride, w_stride, x, x_stride, cols, y + r, y_stride);
  }
  if (r < n_rows) FloatMicro<1, T>(w + r * w_stride, w_stride, x, x_stride, cols, y + r, y_stride);
}

void FloatTile(const float* w, int64_t w_stride, int64_t n_rows, const float* x, int64_t x_stride,
               int64_t cols, int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens == 1) {
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
      FloatMicro<4, 1, true>(w + r * w_stride, w_stride, x, x_stride, cols, y + r, y_stride);
    }
    for (; r < n_rows; ++r) {
      FloatMicro<1, 1>(w + r * w_stride, w_stride, x, x_stride, cols, y + r, y_stride);
    }
    return;
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
    const float* xt = x + t0 * x_stride;
    float* yt = y + t0 * y_stride;
    switch (n_tokens - t0 < 4 ? n_tokens - t0 : 4) {
      case 1:
        FloatRowsForTokens<1>(w, w_stride, n_rows, xt, x_stride, cols, yt, y_stride);
        break;
      case 2:
        FloatRowsForTokens<2>(w, w_stride, n_rows, xt, x_stride, cols, yt, y_stride);
        break;
      case 3:
        FloatRowsForTokens<3>(w, w_stride, n_rows, xt, x_stride, cols, yt, y_stride);
        break;
      default:
        FloatRowsForTokens<4>(w, w_stride, n_rows, xt, x_stride, cols, yt, y_stride);
        break;
    }
  }
}

// The 16-bit float decoders run on the weights as MatMul reads them, row after
// row: each 64-byte line asks for the line kPrefetchBytes further on (the
// following rows' at a row's end).
COLIBRI_INLINE __m256 F16x8(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

COLIBRI_INLINE __m256 BF16x8(const uint16_t* h) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

template <__m256 (*kDecode8)(const uint16_t*), float (*kDecode1)(uint16_t)>
void Dequant16Bit(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    PrefetchBytes(h, 2 * i + kPrefetchBytes, 64);
    for (int k = 0; k < 32; k += 8) _mm256_storeu_ps(dst + i + k, kDecode8(h + i + k));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, kDecode8(h + i));
  for (; i < n; ++i) dst[i] = kDecode1(h[i]);
}

float HalfScalar(uint16_t h) { return Half(h); }

// ------------------------------------------------------ 32-element block types

// Each decoder yields the block's 32 quants in element order: signed values for
// the symmetric types, unsigned for the types with a min.
struct Q4_0Avx2 {
  using Block = BlockQ4_0;
  static constexpr bool kSigned = true;
  static __m256i Quants(const Block& b) {
    return _mm256_sub_epi8(Nibbles32(b.qs), _mm256_set1_epi8(8));
  }
};

struct Q4_1Avx2 {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false;
  static __m256i Quants(const Block& b) { return Nibbles32(b.qs); }
};

struct Q5_0Avx2 {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = true;
  // nibble | 0xF0 where the fifth bit is clear: as int8 that is value - 16.
  static __m256i Quants(const Block& b) {
    const __m256i high =
        _mm256_andnot_si256(BitsToBytes32(b.qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
    return _mm256_or_si256(Nibbles32(b.qs), high);
  }
};

struct Q5_1Avx2 {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false;
  static __m256i Quants(const Block& b) {
    const __m256i high = _mm256_and_si256(BitsToBytes32(b.qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(Nibbles32(b.qs), high);
  }
};

struct Q8_0Avx2 {
  using Block = BlockQ8_0;
  static constexpr bool kSigned = true;
  static __m256i Quants(const Block& b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  }
};

// MXFP4 and IQ4_NL: table values looked up by nibble (vpshufb).
COLIBRI_INLINE __m256i LookUp16(const int8_t table[16], __m256i codes) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), codes);
}

struct MXFP4Avx2 {
  using Block = BlockMXFP4;
  static constexpr bool kSigned = true;
  static __m256i Quants(const Block& b) { return LookUp16(kMxfp4Values, Nibbles32(b.qs)); }
};

struct IQ4_NLAvx2 {
  using Block = BlockIQ4_NL;
  static constexpr bool kSigned = true;
  static __m256i Quants(const Block& b) { return LookUp16(kIq4nlValues, Nibbles32(b.qs)); }
};

// The float scale of a 32-element block: fp16 d, or MXFP4's power of two.
template <typename Block>
COLIBRI_INLINE float BlockScale(const Block& b) {
  if constexpr (std::is_same_v<Block, BlockMXFP4>) {
    return E8M0Half(b.e);
  } else {
    return Half(b.d);
  }
}

// R rows (4, or 1 for a matrix's last rows) by T tokens (1-4) of a
// 32-element block type in GGUF order. Per block and token the rows' quad
// sums reduce to one exact integer per row (SumLanes4), and the R rows' float
// updates are one 4-lane operation in vec_dot.h's order.
template <typename D, int R, int T>
void Blocks32Rows(const uint8_t* w, uint64_t row_bytes, const QuantizedRow* a, int64_t cols,
                  float* y, int64_t y_stride) {
  static_assert(R == 1 || R == 4, "4 rows, or one");
  constexpr bool kHasMin = !D::kSigned;
  using Block = typename D::Block;
  const Block* x[R];
  for (int r = 0; r < R; ++r) x[r] = reinterpret_cast<const Block*>(w + r * row_bytes);
  __m128 acc[T], summs[T];
  for (int t = 0; t < T; ++t) acc[t] = summs[t] = _mm_setzero_ps();
  for (int64_t b = 0; b < cols / kQK; ++b) {
    __m256i qx[R], ux[R];
    alignas(16) float dw[4] = {};
    alignas(16) float mw[4] = {};
    for (int r = 0; r < R; ++r) {
      qx[r] = D::Quants(x[r][b]);
      ux[r] = D::kSigned ? _mm256_sign_epi8(qx[r], qx[r]) : qx[r];
      dw[r] = BlockScale(x[r][b]);
      if constexpr (kHasMin) mw[r] = Half(x[r][b].m);
    }
    const __m128 dwv = _mm_load_ps(dw);
    for (int t = 0; t < T; ++t) {
      const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t].qs + b * kQK));
      __m256i p[4];
      for (int r = 0; r < R; ++r) {
        p[r] =
            D::kSigned ? DotU8S8Quads(ux[r], _mm256_sign_epi8(qa, qx[r])) : DotU8S8Quads(qx[r], qa);
      }
      __m128i sums;
      if constexpr (R == 4) {
        sums = SumLanes4(p);
      } else {
        sums = _mm_cvtsi32_si128(SumLanes(p[0]));
      }
      const __m128 dd = _mm_mul_ps(dwv, _mm_set1_ps(a[t].d[b]));
      acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(dd, _mm_cvtepi32_ps(sums)));
      if constexpr (kHasMin) {
        summs[t] = _mm_add_ps(summs[t], _mm_mul_ps(_mm_load_ps(mw), _mm_set1_ps(a[t].s[b])));
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(16) float out[4];
    // acc + summs, vec_dot.h's last step (summs stays zero without mins).
    _mm_store_ps(out, _mm_add_ps(acc[t], summs[t]));
    for (int r = 0; r < R; ++r) y[t * y_stride + r] = out[r];
  }
}

template <typename D, int R>
void Blocks32RowsForTokens(int64_t nt, const uint8_t* w, uint64_t row_bytes, const QuantizedRow* a,
                           int64_t cols, float* y, int64_t y_stride) {
  switch (nt) {
    case 1:
      Blocks32Rows<D, R, 1>(w, row_bytes, a, cols, y, y_stride);
      break;
    case 2:
      Blocks32Rows<D, R, 2>(w, row_bytes, a, cols, y, y_stride);
      break;
    case 3:
      Blocks32Rows<D, R, 3>(w, row_bytes, a, cols, y, y_stride);
      break;
    default:
      Blocks32Rows<D, R, 4>(w, row_bytes, a, cols, y, y_stride);
      break;
  }
}

// QuantTileFn for a 32-element block type in GGUF order: rows four at a time
// (the rest one by one), tokens in groups of up to four. Before a row block
// it prefetches the rows PrefetchRowsAhead() further on.
template <typename D>
void Blocks32Tile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
                  const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  QuantizedRow a[kMaxTokenTile];
  QuantizedRow::AtEach(layout, act, n_tokens, a);
  const int64_t ahead = PrefetchRowsAhead(row_bytes);
  for (int64_t r = 0; r < n_rows; r += 4) {
    const int64_t nr = n_rows - r < 4 ? n_rows - r : 4;
    PrefetchBytes(w, (r + ahead) * row_bytes, nr * row_bytes);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 4) {
      const int64_t nt = n_tokens - t0 < 4 ? n_tokens - t0 : 4;
      float* yt = y + t0 * y_stride + r;
      if (nr == 4) {
        Blocks32RowsForTokens<D, 4>(nt, w + r * row_bytes, row_bytes, a + t0, layout.cols, yt,
                                    y_stride);
      } else {
        for (int64_t k = 0; k < nr; ++k) {
          Blocks32RowsForTokens<D, 1>(nt, w + (r + k) * row_bytes, row_bytes, a + t0, layout.cols,
                                      yt + k, y_stride);
        }
      }
    }
  }
}

template <typename D>
void DequantBlocks32(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const typename D::Block*>(src);
  for (int64_t b = 0; b < n / kQK; ++b, dst += kQK) {
    const __m256 d = _mm256_set1_ps(BlockScale(x[b]));
    if constexpr (D::kSigned) {
      StoreScaled32(D::Quants(x[b]), d, dst);
    } else {
      const __m256 m = _mm256_set1_ps(Half(x[b].m));
      const __m256i q = D::Quants(x[b]);
      // x*d + m: the unsigned quants fit int8, so the shared converter works.
      float tmp[32];
      StoreScaled32(q, d, tmp);
      for (int k = 0; k < 32; k += 8) {
        _mm256_storeu_ps(dst + k, _mm256_add_ps(_mm256_loadu_ps(tmp + k), m));
      }
    }
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  float y;
  FloatMicro<1, 1>(a, 0, b, 0, n, &y, 0);
  return y;
}

KernelSet MakeAvx2() {
  KernelSet k{};
  k.name = "avx2";
  k.float_tile = &FloatTile;
  k.dot = &Dot;
  InstallAvx2AttendKernels(&k);
  k.dequant[Slot(TensorType::kF32)] = &DequantizeF32;
  k.dequant[Slot(TensorType::kF16)] = &Dequant16Bit<&F16x8, &HalfScalar>;
  k.dequant[Slot(TensorType::kBF16)] = &Dequant16Bit<&BF16x8, &BfloatToFloat>;
  k.dequant[Slot(TensorType::kQ4_0)] = &DequantBlocks32<Q4_0Avx2>;
  k.dequant[Slot(TensorType::kQ4_1)] = &DequantBlocks32<Q4_1Avx2>;
  k.dequant[Slot(TensorType::kQ5_0)] = &DequantBlocks32<Q5_0Avx2>;
  k.dequant[Slot(TensorType::kQ5_1)] = &DequantBlocks32<Q5_1Avx2>;
  k.dequant[Slot(TensorType::kQ8_0)] = &DequantBlocks32<Q8_0Avx2>;
  k.quant_tile[Slot(TensorType::kQ4_0)] = &Blocks32Tile<Q4_0Avx2>;
  k.quant_tile[Slot(TensorType::kQ4_1)] = &Blocks32Tile<Q4_1Avx2>;
  k.quant_tile[Slot(TensorType::kQ5_0)] = &Blocks32Tile<Q5_0Avx2>;
  k.quant_tile[Slot(TensorType::kQ5_1)] = &Blocks32Tile<Q5_1Avx2>;
  k.quant_tile[Slot(TensorType::kQ8_0)] = &Blocks32Tile<Q8_0Avx2>;
  k.dequant[Slot(TensorType::kMXFP4)] = &DequantBlocks32<MXFP4Avx2>;
  k.dequant[Slot(TensorType::kIQ4_NL)] = &DequantBlocks32<IQ4_NLAvx2>;
  k.quant_tile[Slot(TensorType::kMXFP4)] = &Blocks32Tile<MXFP4Avx2>;
  k.quant_tile[Slot(TensorType::kIQ4_NL)] = &Blocks32Tile<IQ4_NLAvx2>;
  FillKQuantKernels(&k);
  FillIqKernels(&k);
  // R x T GEMM tiles for the K-quants; the per-row tiles above take the edges.
  InstallGemmTiles(&k);
  // 8-row tiles for Q4_K weights in the interleaved layout.
  InstallInterleavedTiles(&k);
  return k;
}

}  // namespace
}  // namespace avx2

const KernelSet& Avx2KernelsUnchecked() {
  static const KernelSet kernels = avx2::MakeAvx2();
  return kernels;
}

}  // namespace colibri::ops::internal
