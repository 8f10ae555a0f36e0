// The internal kernel tables directly: every set's decoders equal DequantizeRow
// bit for bit, on random blocks and on blocks with extreme scale fields.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/cpu_features.h"
#include "gtest/gtest.h"
#include "model/ops/quantize.h"
#include "model/ops/tensor_type.h"
#include "model/ops/vec_dot.h"

namespace colibri::ops::internal {
namespace {

std::vector<const KernelSet*> RunnableSets() {
  std::vector<const KernelSet*> sets = {&PortableKernels()};
  if (Avx2Kernels() != nullptr && GetCpuFeatures().avx2) sets.push_back(Avx2Kernels());
  return sets;
}

const TensorType kTypes[] = {
    TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0,
    TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ2_K, TensorType::kQ3_K,
    TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
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

}  // namespace
}  // namespace colibri::ops::internal
