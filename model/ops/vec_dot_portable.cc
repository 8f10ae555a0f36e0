// Portable kernel set: plain C++ in the canonical order of vec_dot.h. Builds on
// every target; the compiler may vectorise it, which keeps the per-lane
// operation order and therefore the results.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/cpu_features.h"
#include "model/ops/iq_decode.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/quant_reference.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {
namespace {

float FloatDot(const float* w, const float* x, int64_t n) {
  float acc[8] = {};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    for (int l = 0; l < 8; ++l) acc[l] = acc[l] + w[c + l] * x[c + l];
  }
  for (; c < n; ++c) acc[c & 7] = acc[c & 7] + w[c] * x[c];
  return ReduceLanes(acc);
}

void FloatTile(const float* w, int64_t w_stride, int64_t n_rows, const float* x, int64_t x_stride,
               int64_t cols, int64_t n_tokens, float* y, int64_t y_stride) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[t * y_stride + r] = FloatDot(w + r * w_stride, x + t * x_stride, cols);
    }
  }
}

// ---- 32-element blocks: decoders to signed/unsigned integer quants.

struct Q4_0Traits {
  using Block = BlockQ4_0;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int q[32]) {
    for (int j = 0; j < 16; ++j) {
      q[j] = (b.qs[j] & 0x0F) - 8;
      q[j + 16] = (b.qs[j] >> 4) - 8;
    }
  }
};

struct Q4_1Traits {
  using Block = BlockQ4_1;
  static constexpr bool kHasMin = true;
  static void Decode(const Block& b, int q[32]) {
    for (int j = 0; j < 16; ++j) {
      q[j] = b.qs[j] & 0x0F;
      q[j + 16] = b.qs[j] >> 4;
    }
  }
};

inline void DecodeQ5(const uint8_t qs[16], const uint8_t qh_bytes[4], int offset, int q[32]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  for (int j = 0; j < 16; ++j) {
    q[j] = ((qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4)) - offset;
    q[j + 16] = ((qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - offset;
  }
}

struct Q5_0Traits {
  using Block = BlockQ5_0;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int q[32]) { DecodeQ5(b.qs, b.qh, 16, q); }
};

struct Q5_1Traits {
  using Block = BlockQ5_1;
  static constexpr bool kHasMin = true;
  static void Decode(const Block& b, int q[32]) { DecodeQ5(b.qs, b.qh, 0, q); }
};

struct Q8_0Traits {
  using Block = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int q[32]) {
    for (int j = 0; j < 32; ++j) q[j] = b.qs[j];
  }
};

struct MXFP4Traits {
  using Block = BlockMXFP4;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int q[32]) {
    for (int j = 0; j < 16; ++j) {
      q[j] = kMxfp4Values[b.qs[j] & 0x0F];
      q[j + 16] = kMxfp4Values[b.qs[j] >> 4];
    }
  }
};

struct IQ4_NLTraits {
  using Block = BlockIQ4_NL;
  static constexpr bool kHasMin = false;
  static void Decode(const Block& b, int q[32]) {
    for (int j = 0; j < 16; ++j) {
      q[j] = kIq4nlValues[b.qs[j] & 0x0F];
      q[j + 16] = kIq4nlValues[b.qs[j] >> 4];
    }
  }
};

// The float scale of a 32-element block: fp16 d, or MXFP4's power of two.
template <typename Block>
float BlockScale(const Block& b) {
  if constexpr (std::is_same_v<Block, BlockMXFP4>) {
    return E8M0Half(b.e);
  } else {
    return HalfToFloat(b.d);
  }
}

template <typename Traits>
float DotBlocks32(const uint8_t* row, const QuantizedRow& a, int64_t cols) {
  const auto* x = reinterpret_cast<const typename Traits::Block*>(row);
  float acc = 0.0f;
  float summs = 0.0f;
  for (int64_t b = 0; b < cols / kQK; ++b) {
    int q[32];
    Traits::Decode(x[b], q);
    const int8_t* qa = a.qs + b * kQK;
    int p = 0;
    for (int k = 0; k < kQK; ++k) p += q[k] * qa[k];
    acc = acc + (BlockScale(x[b]) * a.d[b]) * static_cast<float>(p);
    if constexpr (Traits::kHasMin) summs = summs + HalfToFloat(x[b].m) * a.s[b];
  }
  return acc + summs;
}

// ---- K-quants: each decoder yields the 256 signed quants, the scale of each
// 16-element group and the min of each group (zero for Q3_K and Q6_K).

struct SuperBlockInts {
  int8_t q[kQK_K];
  int scale[16];
  int min[16];
  float d;
  float dmin;
};

void DecodeQ2_K(const uint8_t* p, SuperBlockInts* s) {
  const auto& b = *reinterpret_cast<const BlockQ2_K*>(p);
  for (int half = 0; half < 2; ++half) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        s->q[128 * half + 32 * k + l] = static_cast<int8_t>((b.qs[32 * half + l] >> (2 * k)) & 3);
      }
    }
  }
  for (int g = 0; g < 16; ++g) {
    s->scale[g] = b.scales[g] & 0xF;
    s->min[g] = b.scales[g] >> 4;
  }
  s->d = HalfToFloat(b.d);
  s->dmin = HalfToFloat(b.dmin);
}

void DecodeQ3_K(const uint8_t* p, SuperBlockInts* s) {
  const auto& b = *reinterpret_cast<const BlockQ3_K*>(p);
  for (int half = 0; half < 2; ++half) {
    for (int k = 0; k < 4; ++k) {
      const int bit = 4 * half + k;
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * half + l] >> (2 * k)) & 3;
        const int high = (b.hmask[l] >> bit) & 1;
        s->q[128 * half + 32 * k + l] = static_cast<int8_t>(low - (high ? 0 : 4));
      }
    }
  }
  int8_t sc[16];
  UnpackQ3KScales(b.scales, sc);
  for (int g = 0; g < 16; ++g) {
    s->scale[g] = sc[g];
    s->min[g] = 0;
  }
  s->d = HalfToFloat(b.d);
  s->dmin = 0.0f;
}

void DecodeQ45K(const uint16_t d, const uint16_t dmin, const uint8_t* scales, const uint8_t* qs,
                const uint8_t* qh, SuperBlockInts* s) {
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * chunk + l] & 0xF;
      int hi = qs[32 * chunk + l] >> 4;
      if (qh != nullptr) {
        lo |= ((qh[l] >> (2 * chunk)) & 1) << 4;
        hi |= ((qh[l] >> (2 * chunk + 1)) & 1) << 4;
      }
      s->q[64 * chunk + l] = static_cast<int8_t>(lo);
      s->q[64 * chunk + 32 + l] = static_cast<int8_t>(hi);
    }
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    GetScaleMinK4(j, scales, &sc, &m);
    s->scale[2 * j] = s->scale[2 * j + 1] = sc;
    s->min[2 * j] = s->min[2 * j + 1] = m;
  }
  s->d = HalfToFloat(d);
  s->dmin = HalfToFloat(dmin);
}

void DecodeQ4_K(const uint8_t* p, SuperBlockInts* s) {
  const auto& b = *reinterpret_cast<const BlockQ4_K*>(p);
  DecodeQ45K(b.d, b.dmin, b.scales, b.qs, nullptr, s);
}

void DecodeQ5_K(const uint8_t* p, SuperBlockInts* s) {
  const auto& b = *reinterpret_cast<const BlockQ5_K*>(p);
  DecodeQ45K(b.d, b.dmin, b.scales, b.qs, b.qh, s);
}

void DecodeQ6_K(const uint8_t* p, SuperBlockInts* s) {
  const auto& b = *reinterpret_cast<const BlockQ6_K*>(p);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    int8_t* q = s->q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      q[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      q[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      q[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      q[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
  for (int g = 0; g < 16; ++g) {
    s->scale[g] = b.scales[g];
    s->min[g] = 0;
  }
  s->d = HalfToFloat(b.d);
  s->dmin = 0.0f;
}

template <void (*Decode)(const uint8_t*, SuperBlockInts*), int kBlockBytes, bool kHasMin>
float DotSuperBlocks(const uint8_t* row, const QuantizedRow& a, int64_t cols) {
  float acc = 0.0f;
  SuperBlockInts s;
  for (int64_t b = 0; b < cols / kQK_K; ++b) {
    Decode(row + b * kBlockBytes, &s);
    const int8_t* qa = a.qs + b * kQK_K;
    const int16_t* bsums = a.bsums + 16 * b;
    int isum = 0;
    int summs = 0;
    for (int g = 0; g < 16; ++g) {
      int gsum = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) gsum += s.q[e] * qa[e];
      isum += s.scale[g] * gsum;
      summs += s.min[g] * bsums[g];
    }
    acc = acc + (s.d * a.d[b]) * static_cast<float>(isum);
    if constexpr (kHasMin) acc = acc - (s.dmin * a.d[b]) * static_cast<float>(summs);
  }
  return acc;
}

// The 256-element i-quants through their integer form (iq_decode.h).
template <TensorType kType>
float DotIqSuperBlocks(const uint8_t* row, const QuantizedRow& a, int64_t cols) {
  const IqTypeInfo info = GetIqTypeInfo(kType);
  float acc = 0.0f;
  IqSuperBlock s;
  for (int64_t b = 0; b < cols / kQK_K; ++b) {
    info.decode(row + b * info.block_bytes, &s);
    const int8_t* qa = a.qs + b * kQK_K;
    int isum = 0;
    for (int g = 0; g < 16; ++g) {
      int gsum = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) gsum += s.q[e] * qa[e];
      isum += s.scale[g] * gsum;
    }
    acc = acc + (s.d * a.d[b]) * static_cast<float>(isum);
  }
  return acc * info.final_scale;
}

// Weight bytes the tiles prefetch ahead of the row they compute: rows of 2048
// columns are 1-2 KiB, too short a stream for the hardware prefetchers to ramp
// up (the AVX2 and AVX-512 tiles read memory faster with the same prefetch).
constexpr uint64_t kPrefetchBytes = 12 * 1024;

// Prefetches (for reading, into every cache level) the bytes at w + offset,
// one request per 64-byte line. A prefetch never faults, so addresses past
// the matrix's end are harmless; uintptr_t arithmetic keeps the pointer
// itself from going out of bounds.
void PrefetchBytes(const uint8_t* w, uint64_t offset, uint64_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(w) + offset;
  for (uint64_t b = 0; b < bytes; b += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(at + b), 0, 3);
  }
}

// Per-row tile. Before each row it prefetches the row about kPrefetchBytes
// further on (the next call's rows at the end of a tile).
template <float (*Dot)(const uint8_t*, const QuantizedRow&, int64_t)>
void QuantTile(const uint8_t* w, uint64_t row_bytes, int64_t n_rows, const uint8_t* act,
               const ActivationLayout& layout, int64_t n_tokens, float* y, int64_t y_stride) {
  const int64_t ahead = static_cast<int64_t>((kPrefetchBytes + row_bytes - 1) / row_bytes);
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + r * row_bytes;
    PrefetchBytes(w, (r + ahead) * row_bytes, row_bytes);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const QuantizedRow a = QuantizedRow::At(layout, act + t * layout.row_bytes);
      y[t * y_stride + r] = Dot(row, a, layout.cols);
    }
  }
}

QuantTileFn IqPortableTile(TensorType type) {
  switch (type) {
    case TensorType::kIQ2_XXS:
      return &QuantTile<&DotIqSuperBlocks<TensorType::kIQ2_XXS>>;
    case TensorType::kIQ2_XS:
      return &QuantTile<&DotIqSuperBlocks<TensorType::kIQ2_XS>>;
    case TensorType::kIQ2_S:
      return &QuantTile<&DotIqSuperBlocks<TensorType::kIQ2_S>>;
    case TensorType::kIQ3_XXS:
      return &QuantTile<&DotIqSuperBlocks<TensorType::kIQ3_XXS>>;
    case TensorType::kIQ3_S:
      return &QuantTile<&DotIqSuperBlocks<TensorType::kIQ3_S>>;
    case TensorType::kIQ1_S:
      return &QuantTile<&DotIqSuperBlocks<TensorType::kIQ1_S>>;
    case TensorType::kIQ1_M:
      return &QuantTile<&DotIqSuperBlocks<TensorType::kIQ1_M>>;
    case TensorType::kIQ4_XS:
      return &QuantTile<&DotIqSuperBlocks<TensorType::kIQ4_XS>>;
    default:
      return nullptr;
  }
}

KernelSet MakePortable() {
  KernelSet k{};
  k.name = "portable";
  k.float_tile = &FloatTile;
  k.dot = &FloatDot;
  k.dequant[Slot(TensorType::kF32)] = &DequantizeF32;
  k.dequant[Slot(TensorType::kF16)] = &DequantizeF16;
  k.dequant[Slot(TensorType::kBF16)] = &DequantizeBF16;
  k.dequant[Slot(TensorType::kQ4_0)] = &DequantizeQ4_0;
  k.dequant[Slot(TensorType::kQ4_1)] = &DequantizeQ4_1;
  k.dequant[Slot(TensorType::kQ5_0)] = &DequantizeQ5_0;
  k.dequant[Slot(TensorType::kQ5_1)] = &DequantizeQ5_1;
  k.dequant[Slot(TensorType::kQ8_0)] = &DequantizeQ8_0;
  k.dequant[Slot(TensorType::kQ2_K)] = &DequantizeQ2_K;
  k.dequant[Slot(TensorType::kQ3_K)] = &DequantizeQ3_K;
  k.dequant[Slot(TensorType::kQ4_K)] = &DequantizeQ4_K;
  k.dequant[Slot(TensorType::kQ5_K)] = &DequantizeQ5_K;
  k.dequant[Slot(TensorType::kQ6_K)] = &DequantizeQ6_K;
  k.quant_tile[Slot(TensorType::kQ4_0)] = &QuantTile<&DotBlocks32<Q4_0Traits>>;
  k.quant_tile[Slot(TensorType::kQ4_1)] = &QuantTile<&DotBlocks32<Q4_1Traits>>;
  k.quant_tile[Slot(TensorType::kQ5_0)] = &QuantTile<&DotBlocks32<Q5_0Traits>>;
  k.quant_tile[Slot(TensorType::kQ5_1)] = &QuantTile<&DotBlocks32<Q5_1Traits>>;
  k.quant_tile[Slot(TensorType::kQ8_0)] = &QuantTile<&DotBlocks32<Q8_0Traits>>;
  k.quant_tile[Slot(TensorType::kQ2_K)] =
      &QuantTile<&DotSuperBlocks<&DecodeQ2_K, sizeof(BlockQ2_K), true>>;
  k.quant_tile[Slot(TensorType::kQ3_K)] =
      &QuantTile<&DotSuperBlocks<&DecodeQ3_K, sizeof(BlockQ3_K), false>>;
  k.quant_tile[Slot(TensorType::kQ4_K)] =
      &QuantTile<&DotSuperBlocks<&DecodeQ4_K, sizeof(BlockQ4_K), true>>;
  k.quant_tile[Slot(TensorType::kQ5_K)] =
      &QuantTile<&DotSuperBlocks<&DecodeQ5_K, sizeof(BlockQ5_K), true>>;
  k.quant_tile[Slot(TensorType::kQ6_K)] =
      &QuantTile<&DotSuperBlocks<&DecodeQ6_K, sizeof(BlockQ6_K), false>>;
  k.dequant[Slot(TensorType::kMXFP4)] = &DequantizeMXFP4;
  k.dequant[Slot(TensorType::kIQ4_NL)] = &DequantizeIQ4_NL;
  k.dequant[Slot(TensorType::kIQ4_XS)] = &DequantizeIQ4_XS;
  k.dequant[Slot(TensorType::kIQ2_XXS)] = &DequantizeIQ2_XXS;
  k.dequant[Slot(TensorType::kIQ2_XS)] = &DequantizeIQ2_XS;
  k.dequant[Slot(TensorType::kIQ2_S)] = &DequantizeIQ2_S;
  k.dequant[Slot(TensorType::kIQ3_XXS)] = &DequantizeIQ3_XXS;
  k.dequant[Slot(TensorType::kIQ3_S)] = &DequantizeIQ3_S;
  k.dequant[Slot(TensorType::kIQ1_S)] = &DequantizeIQ1_S;
  k.dequant[Slot(TensorType::kIQ1_M)] = &DequantizeIQ1_M;
  k.quant_tile[Slot(TensorType::kMXFP4)] = &QuantTile<&DotBlocks32<MXFP4Traits>>;
  k.quant_tile[Slot(TensorType::kIQ4_NL)] = &QuantTile<&DotBlocks32<IQ4_NLTraits>>;
  for (TensorType type :
       {TensorType::kIQ2_XXS, TensorType::kIQ2_XS, TensorType::kIQ2_S, TensorType::kIQ3_XXS,
        TensorType::kIQ3_S, TensorType::kIQ1_S, TensorType::kIQ1_M, TensorType::kIQ4_XS}) {
    k.quant_tile[Slot(type)] = IqPortableTile(type);
  }
  return k;
}

}  // namespace

const KernelSet& PortableKernels() {
  static const KernelSet kernels = MakePortable();
  return kernels;
}

// These check the CPU here, in a file compiled for any target of its
// architecture, before anything of the set's own file runs.
const KernelSet* Avx2Kernels() {
#if defined(COLIBRI_OPS_HAVE_AVX2)
  if (GetCpuFeatures().avx2) return &Avx2KernelsUnchecked();
#endif
  return nullptr;
}

const KernelSet* Avx512Kernels() {
#if defined(COLIBRI_OPS_HAVE_AVX512)
  const CpuFeatures& cpu = GetCpuFeatures();
  if (cpu.avx512f && cpu.avx512_vnni && cpu.avx2) return &Avx512KernelsUnchecked();
#endif
  return nullptr;
}

const KernelSet* NeonKernels() {
#if defined(COLIBRI_OPS_HAVE_NEON)
  if (GetCpuFeatures().neon) return &NeonKernelsUnchecked();
#endif
  return nullptr;
}

const KernelSet* NeonDotprodKernels() {
#if defined(COLIBRI_OPS_HAVE_NEON)
  const CpuFeatures& cpu = GetCpuFeatures();
  if (cpu.neon && cpu.neon_dotprod) return &NeonDotprodKernelsUnchecked();
#endif
  return nullptr;
}

const KernelSet& DefaultKernels() {
  if (const KernelSet* avx512 = Avx512Kernels()) return *avx512;
  if (const KernelSet* avx2 = Avx2Kernels()) return *avx2;
  if (const KernelSet* dotprod = NeonDotprodKernels()) return *dotprod;
  if (const KernelSet* neon = NeonKernels()) return *neon;
  return PortableKernels();
}

}  // namespace colibri::ops::internal
