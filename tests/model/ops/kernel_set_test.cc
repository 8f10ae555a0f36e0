// The internal kernel tables directly: every set's decoders equal DequantizeRow
// bit for bit, on random blocks and on blocks with extreme scale fields, and
// every set's quantized tiles equal the portable ones bit for bit, on random
// and extreme blocks, for every tile shape.
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/cpu_features.h"
#include "gtest/gtest.h"
#include "model/ops/activation_quant.h"
#include "model/ops/iq_decode.h"
#include "model/ops/iq_grids.h"
#include "model/ops/matmul.h"
#include "model/ops/quant_blocks.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {
namespace {

bool CanRunAvx512() { return Avx512Kernels() != nullptr; }

std::vector<const KernelSet*> RunnableSets() {
  std::vector<const KernelSet*> sets = {&PortableKernels()};
  if (Avx2Kernels() != nullptr) sets.push_back(Avx2Kernels());
  if (CanRunAvx512()) sets.push_back(Avx512Kernels());
  if (NeonKernels() != nullptr) sets.push_back(NeonKernels());
  if (NeonDotprodKernels() != nullptr) sets.push_back(NeonDotprodKernels());
  return sets;
}

const TensorType kTypes[] = {
    TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0,
    TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ2_K, TensorType::kQ3_K,
    TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
    // MXFP4 and the i-quants.
    TensorType::kMXFP4,   TensorType::kIQ4_NL, TensorType::kIQ4_XS, TensorType::kIQ2_XXS,
    TensorType::kIQ2_XS,  TensorType::kIQ2_S,  TensorType::kIQ3_XXS, TensorType::kIQ3_S,
    TensorType::kIQ1_S,   TensorType::kIQ1_M,
};

TEST(KernelSetTest, EveryKernelSetFillsEveryType) {
  for (const KernelSet* k : RunnableSets()) {
    ASSERT_NE(k->float_tile, nullptr) << k->name;
    ASSERT_NE(k->dot, nullptr) << k->name;
    for (TensorType type : kTypes) {
      EXPECT_NE(k->dequant[Slot(type)], nullptr) << k->name << " " << TypeName(type);
      const bool quantized = GetTraits(type).block_size > 1;
      EXPECT_EQ(k->quant_tile[Slot(type)] != nullptr, quantized) << k->name << " " << TypeName(type);
    }
  }
}

// Random bytes are valid blocks of every type except for their fp16 fields,
// which random bytes may make inf or NaN: those are kept (they must decode the
// same way too) but NaN payloads are compared as NaN.
TEST(KernelSetTest, DecodersMatchDequantizeRowOnRandomBytes) {
  std::mt19937 rng(123);
  for (TensorType type : kTypes) {
    const int64_t n = GetTraits(type).block_size == 1 ? 1003 : 1024;
    const uint64_t bytes = RowBytesUnchecked(type, n);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint8_t> row(bytes);
      for (uint8_t& b : row) b = static_cast<uint8_t>(rng());
      std::vector<float> want(n);
      DequantizeRow(type, row.data(), want.data(), n);
      for (const KernelSet* k : RunnableSets()) {
        std::vector<float> got(n, -7.0f);
        k->dequant[Slot(type)](row.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(got[i])) << k->name << " " << TypeName(type) << " " << i;
          } else {
            ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0)
                << k->name << " " << TypeName(type) << " " << i << ": " << got[i] << " vs "
                << want[i];
          }
        }
      }
    }
  }
}

// The getters hand out only sets this CPU runs (as GetCpuFeatures() reports
// it, under the cap of COLIBRI_CPU): building a set runs its instructions, so
// a getter that built the AVX-512 set first and left the CPU check to its
// callers killed every program on an AVX2-only machine with SIGILL.
TEST(KernelSetTest, GettersOfferOnlySetsTheCpuRuns) {
  const CpuFeatures& cpu = GetCpuFeatures();
  if (!cpu.avx2) {
    EXPECT_EQ(Avx2Kernels(), nullptr);
  }
  if (!(cpu.avx512f && cpu.avx512_vnni && cpu.avx2)) {
    EXPECT_EQ(Avx512Kernels(), nullptr);
  }
  if (!cpu.neon) {
    EXPECT_EQ(NeonKernels(), nullptr);
  }
  if (!(cpu.neon && cpu.neon_dotprod)) {
    EXPECT_EQ(NeonDotprodKernels(), nullptr);
  }
  // Forcing a set refuses what the getters refuse.
  EXPECT_EQ(ForceKernelSetForTesting(KernelSetChoice::kAvx2), Avx2Kernels() != nullptr);
  EXPECT_EQ(ForceKernelSetForTesting(KernelSetChoice::kAvx512), Avx512Kernels() != nullptr);
  EXPECT_EQ(ForceKernelSetForTesting(KernelSetChoice::kNeon), NeonKernels() != nullptr);
  EXPECT_EQ(ForceKernelSetForTesting(KernelSetChoice::kNeonDotprod),
            NeonDotprodKernels() != nullptr);
  EXPECT_TRUE(ForceKernelSetForTesting(KernelSetChoice::kAuto));
}

TEST(KernelSetTest, DefaultIsTheBestRunnableSet) {
  if (!CanRunAvx512()) {
    std::printf("note: no AVX-512 VNNI here (or the CPU cap hides it); AVX-512 set not tested\n");
  }
  EXPECT_EQ(&DefaultKernels(), RunnableSets().back());
  switch (GetCpuCap()) {
    case CpuCap::kNone:
      break;
    case CpuCap::kAvx2:
      EXPECT_NE(&DefaultKernels(), Avx512Kernels());
      break;
    case CpuCap::kNeon:
      EXPECT_EQ(NeonDotprodKernels(), nullptr);
      break;
    case CpuCap::kPortable:
      EXPECT_EQ(&DefaultKernels(), &PortableKernels());
      break;
  }
}

// Byte offsets, within a block, of the fp16 scale fields of each quantized type.
std::vector<size_t> HalfFields(TensorType type) {
  switch (type) {
    case TensorType::kQ4_0: return {offsetof(BlockQ4_0, d)};
    case TensorType::kQ4_1: return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
    case TensorType::kQ5_0: return {offsetof(BlockQ5_0, d)};
    case TensorType::kQ5_1: return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case TensorType::kQ8_0: return {offsetof(BlockQ8_0, d)};
    case TensorType::kQ2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case TensorType::kQ3_K: return {offsetof(BlockQ3_K, d)};
    case TensorType::kQ4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case TensorType::kQ5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case TensorType::kQ6_K: return {offsetof(BlockQ6_K, d)};
    case TensorType::kIQ4_NL: return {offsetof(BlockIQ4_NL, d)};
    case TensorType::kIQ4_XS: return {offsetof(BlockIQ4_XS, d)};
    case TensorType::kIQ2_XXS: return {offsetof(BlockIQ2_XXS, d)};
    case TensorType::kIQ2_XS: return {offsetof(BlockIQ2_XS, d)};
    case TensorType::kIQ2_S: return {offsetof(BlockIQ2_S, d)};
    case TensorType::kIQ3_XXS: return {offsetof(BlockIQ3_XXS, d)};
    case TensorType::kIQ3_S: return {offsetof(BlockIQ3_S, d)};
    case TensorType::kIQ1_S: return {offsetof(BlockIQ1_S, d)};
    default: return {};  // MXFP4 and IQ1_M: see SetScale
  }
}

// Sets the block scale of the types whose scale is not a plain fp16 field:
// MXFP4's exponent byte, IQ1_M's fp16 spread over the top nibbles of its four
// scale words.
void SetScale(TensorType type, uint8_t* block, uint16_t half, int exponent) {
  if (type == TensorType::kMXFP4) {
    block[0] = static_cast<uint8_t>(exponent);
  } else if (type == TensorType::kIQ1_M) {
    uint8_t* sc = block + offsetof(BlockIQ1_M, scales);
    for (int k = 0; k < 4; ++k) {
      sc[2 * k + 1] = static_cast<uint8_t>((sc[2 * k + 1] & 0x0F) | (((half >> (4 * k)) & 0xF) << 4));
    }
  }
}

// Weight rows of `type`: every quant and packed scale byte is `fill` (random
// when fill < 0), every fp16 field a random value of moderate magnitude, so
// that the products stay finite and every bit of the result matters.
std::vector<uint8_t> WeightRows(TensorType type, int64_t rows, int64_t cols, int fill,
                                std::mt19937* rng) {
  const uint64_t row_bytes = RowBytesUnchecked(type, cols);
  const int64_t block = GetTraits(type).block_size;
  const uint64_t block_bytes = row_bytes / (cols / block);
  std::vector<uint8_t> w(rows * row_bytes);
  for (uint8_t& b : w) b = static_cast<uint8_t>(fill < 0 ? (*rng)() : fill);
  std::uniform_real_distribution<float> mag(-4.0f, 4.0f);
  for (uint64_t off = 0; off < w.size(); off += block_bytes) {
    for (size_t field : HalfFields(type)) {
      const uint16_t h = FloatToHalf(std::ldexp(mag(*rng), -6));
      std::memcpy(&w[off + field], &h, sizeof(h));
    }
    SetScale(type, &w[off], FloatToHalf(std::ldexp(mag(*rng), -6)),
             118 + static_cast<int>((*rng)() % 8));
  }
  return w;
}

// Activations: normal values with a few dominating ones, or (extreme) ±1 with
// random signs, which quantize to ±127 everywhere.
std::vector<float> Activations(int64_t n_tokens, int64_t cols, bool extreme, std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n_tokens * cols);
  for (float& v : x) v = extreme ? ((*rng)() & 1 ? 1.0f : -1.0f) : dist(*rng);
  if (!extreme) {
    for (int64_t t = 0; t < n_tokens; ++t) x[t * cols + (7 * t) % cols] = 40.0f;
  }
  return x;
}

TEST(KernelSetTest, QuantTilesMatchPortableBitwise) {
  const std::vector<const KernelSet*> sets = RunnableSets();
  if (sets.size() == 1) GTEST_SKIP() << "only the portable kernel set runs here";
  const KernelSet& portable = PortableKernels();
  std::mt19937 rng(77);
  const int64_t n_rows = 5;  // odd: the AVX-512 row-pair kernels have a tail
  for (TensorType type : kTypes) {
    if (GetTraits(type).block_size == 1) continue;
    const int64_t cols = GetTraits(type).block_size == 256 ? 3 * 256 : 7 * 32;
    const uint64_t row_bytes = RowBytesUnchecked(type, cols);
    const ActivationLayout layout = MakeActivationLayout(ActivationFormatFor(type), cols);
    for (int fill : {-1, -1, 0xFF, 0x80, 0x7F, 0x00}) {
      const std::vector<uint8_t> w = WeightRows(type, n_rows, cols, fill, &rng);
      for (bool extreme : {false, true}) {
        for (int64_t n_tokens = 1; n_tokens <= kMaxTokenTile; ++n_tokens) {
          const std::vector<float> x = Activations(n_tokens, cols, extreme, &rng);
          std::vector<uint8_t> act_buf(n_tokens * layout.row_bytes + 64);
          uint8_t* act = act_buf.data() + (64 - reinterpret_cast<uintptr_t>(act_buf.data()) % 64);
          for (int64_t t = 0; t < n_tokens; ++t) {
            QuantizeActivationRow(layout, x.data() + t * cols, act + t * layout.row_bytes);
          }
          for (int64_t rows = 1; rows <= n_rows; rows += 2) {
            const int64_t y_stride = rows + 1;
            std::vector<float> want(n_tokens * y_stride, -3.0f);
            portable.quant_tile[Slot(type)](w.data(), row_bytes, rows, act, layout, n_tokens,
                                            want.data(), y_stride);
            for (const KernelSet* k : sets) {
              std::vector<float> got(n_tokens * y_stride, -3.0f);
              k->quant_tile[Slot(type)](w.data(), row_bytes, rows, act, layout, n_tokens,
                                        got.data(), y_stride);
              for (size_t i = 0; i < got.size(); ++i) {
                ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0)
                    << k->name << " " << TypeName(type) << " fill=" << fill
                    << " extreme=" << extreme << " rows=" << rows << " n_tokens=" << n_tokens
                    << " t=" << i / y_stride << " r=" << i % y_stride << ": " << got[i]
                    << " vs portable " << want[i];
              }
            }
          }
        }
      }
    }
  }
}

// The integer form the i-quant dot products use (iq_decode.h) is the
// reference decoder's value exactly: d * scale * q * kFinal, on random blocks.
TEST(KernelSetTest, IqIntegerFormEqualsDequantizeRow) {
  std::mt19937 rng(99);
  for (TensorType type : kTypes) {
    const IqTypeInfo info = GetIqTypeInfo(type);
    if (info.decode == nullptr) continue;
    ASSERT_EQ(info.block_bytes, GetTraits(type).type_size) << TypeName(type);
    for (int fill : {-1, -1, -1, 0xFF, 0x00, 0x80}) {
      const std::vector<uint8_t> w = WeightRows(type, 1, 256, fill, &rng);
      std::vector<float> want(256);
      DequantizeRow(type, w.data(), want.data(), 256);
      IqSuperBlock s;
      info.decode(w.data(), &s);
      for (int e = 0; e < 256; ++e) {
        const double v = static_cast<double>(s.d) * s.scale[e / 16] * s.q[e] * info.final_scale;
        ASSERT_EQ(static_cast<double>(want[e]), v)
            << TypeName(type) << " fill=" << fill << " e=" << e << " q=" << int{s.q[e]}
            << " scale=" << s.scale[e / 16];
      }
    }
  }
}

// The IQ1 tables the SIMD kernels index with the shift sign as bit 11: one
// array, entry i + 2048 the negative-shift form of entry i, every byte 8 times
// the grid value plus or minus one.
TEST(KernelSetTest, Iq1EntriesAreOneTableIndexedByShiftSign) {
  const uint64_t* plus = Iq1Entries(false);
  ASSERT_EQ(Iq1Entries(true), plus + 2048);
  for (int i = 0; i < 4096; ++i) {
    const uint64_t grid = kIq1sGrid[i % 2048];
    for (int j = 0; j < 8; ++j) {
      const int want = 8 * GridSignedByte(grid, j) + (i < 2048 ? 1 : -1);
      ASSERT_EQ(GridSignedByte(plus[i], j), want) << "entry " << i << " byte " << j;
    }
  }
}

}  // namespace
}  // namespace colibri::ops::internal
