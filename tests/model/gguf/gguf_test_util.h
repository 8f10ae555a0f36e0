// Helpers shared by the GGUF tests: building small models, patching bytes of an
// image in place, temporary paths and the fixtures folder.
#ifndef COLIBRI_TESTS_MODEL_GGUF_GGUF_TEST_UTIL_H_
#define COLIBRI_TESTS_MODEL_GGUF_GGUF_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/support/paths.h"
#include "model/gguf/gguf_writer.h"
#include "model/ops/tensor_type.h"

namespace colibri::gguf::testing {

// Deterministic bytes (quantized blocks need not be meaningful to the reader).
inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Bytes of a tensor of `type` and `dims` (filled deterministically).
inline std::vector<uint8_t> TensorBytes(ops::TensorType type, const std::vector<int64_t>& dims,
                                        uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  const ops::TensorTypeTraits& t = ops::GetTraits(type);
  return RandomBytes(static_cast<size_t>(n / t.block_size * t.type_size), seed);
}

// A small model: a few metadata keys and tensors of several types.
inline GgufWriter SmallModel(uint64_t alignment = 32) {
  GgufWriter w(alignment);
  w.SetValue("general.architecture", Value::String("qwen3moe"));
  w.SetValue("general.name", Value::String("tiny"));
  w.SetValue("qwen3moe.block_count", Value::Uint32(2));
  w.SetValue("tokenizer.ggml.tokens", Value::StringArray({"<unk>", "a", "b"}));
  struct Spec {
    const char* name;
    ops::TensorType type;
    std::vector<int64_t> dims;
  };
  const Spec specs[] = {
      {"token_embd.weight", ops::TensorType::kF32, {8, 3}},
      {"blk.0.attn_q.weight", ops::TensorType::kF16, {8, 8}},
      {"blk.0.ffn_gate_exps.weight", ops::TensorType::kQ4_K, {256, 2, 2}},
      {"blk.1.ffn_down_exps.weight", ops::TensorType::kQ8_0, {64, 3, 2}},
      {"output.weight", ops::TensorType::kQ6_K, {256, 3}},
      {"output_norm.weight", ops::TensorType::kF32, {7}},
  };
  uint32_t seed = 1;
  for (const Spec& s : specs) {
    EXPECT_TRUE(w.AddTensor(s.name, s.type, s.dims, TensorBytes(s.type, s.dims, seed++)).ok());
  }
  return w;
}

inline void PutU32(std::vector<uint8_t>& image, size_t offset, uint32_t v) {
  ASSERT_LE(offset + 4, image.size());
  for (int k = 0; k < 4; ++k) image[offset + k] = static_cast<uint8_t>(v >> (8 * k));
}

inline void PutU64(std::vector<uint8_t>& image, size_t offset, uint64_t v) {
  ASSERT_LE(offset + 8, image.size());
  for (int k = 0; k < 8; ++k) image[offset + k] = static_cast<uint8_t>(v >> (8 * k));
}

// Offset just past the first occurrence of `text` in `image` (npos if absent).
inline size_t OffsetAfter(const std::vector<uint8_t>& image, absl::string_view text) {
  const absl::string_view hay(reinterpret_cast<const char*>(image.data()), image.size());
  const size_t at = hay.find(text);
  return at == absl::string_view::npos ? at : at + text.size();
}

// A fresh path under the test temporary directory.
inline std::string TempPath(absl::string_view name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + info->test_suite_name() + "_" + info->name() + "_" + std::string(name);
}

using ::colibri::testing::FixturesDir;

}  // namespace colibri::gguf::testing

#endif  // COLIBRI_TESTS_MODEL_GGUF_GGUF_TEST_UTIL_H_
