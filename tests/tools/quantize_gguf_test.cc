// colibri-quantize's library: which tensors are converted to which type, and a
// round trip through a small float GGUF (metadata kept, values within the
// target format's rounding error, non-float input refused).
#include "tools/quantize/quantize_gguf.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "model/ops/quantize.h"

namespace colibri::quantize {
namespace {

using ops::TensorType;

TEST(QuantizeGgufTest, ChooseTypeKeepsVectorsAndRoutersAndFallsBackByRowLength) {
  const TensorType f32 = TensorType::kF32;
  EXPECT_EQ(ChooseType("blk.0.attn_norm.weight", 1, 256, f32, TensorType::kQ4_K), f32);
  EXPECT_EQ(ChooseType("blk.0.ffn_gate_inp.weight", 2, 256, f32, TensorType::kQ4_K), f32);
  EXPECT_EQ(ChooseType("blk.0.ffn_up_exps.weight", 3, 256, f32, TensorType::kQ4_K),
            TensorType::kQ4_K);
  EXPECT_EQ(ChooseType("blk.0.attn_q.weight", 2, 128, f32, TensorType::kQ4_K), TensorType::kQ8_0);
  EXPECT_EQ(ChooseType("blk.0.attn_q.weight", 2, 48, f32, TensorType::kQ8_0), TensorType::kF16);
  EXPECT_EQ(ChooseType("token_embd.weight", 2, 64, TensorType::kF16, TensorType::kF16),
            TensorType::kF16);
}

std::string WriteFloatModel() {
  gguf::GgufWriter w;
  w.SetValue("general.architecture", gguf::Value::String("qwen3moe"));
  w.SetValue("general.name", gguf::Value::String("tiny"));
  w.SetValue("general.file_type", gguf::Value::Uint32(0));
  std::vector<float> matrix(64 * 3), norm(64, 1.5f), router(64 * 4);
  for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = std::sin(0.37f * i) * (1 + i % 7);
  for (size_t i = 0; i < router.size(); ++i) router[i] = 0.01f * i;
  EXPECT_TRUE(w.AddF32Tensor("blk.0.attn_q.weight", {64, 3}, matrix).ok());
  EXPECT_TRUE(w.AddF32Tensor("blk.0.attn_norm.weight", {64}, norm).ok());
  EXPECT_TRUE(w.AddF32Tensor("blk.0.ffn_gate_inp.weight", {64, 4}, router).ok());
  const std::string path = ::testing::TempDir() + "/quantize_in.gguf";
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

TEST(QuantizeGgufTest, Q8_0RoundTripKeepsMetadataAndValues) {
  const std::string in = WriteFloatModel();
  QuantizeOptions options;
  options.input_path = in;
  options.output_path = ::testing::TempDir() + "/quantize_out.gguf";
  options.type = TensorType::kQ8_0;
  absl::StatusOr<QuantizeReport> report = QuantizeGguf(options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->tensors, 3);
  EXPECT_EQ(report->converted, 1);
  EXPECT_TRUE(report->fallbacks.empty());

  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> a = gguf::GgufFile::Open(in);
  absl::StatusOr<std::unique_ptr<gguf::GgufFile>> b = gguf::GgufFile::Open(options.output_path);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*(*b)->GetString("general.name"), "tiny");
  EXPECT_EQ(*(*b)->GetInt("general.file_type"), 7);  // llama.cpp's MOSTLY_Q8_0
  const gguf::TensorInfo* q = (*b)->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, TensorType::kQ8_0);
  EXPECT_EQ((*b)->FindTensor("blk.0.attn_norm.weight")->type, TensorType::kF32);
  EXPECT_EQ((*b)->FindTensor("blk.0.ffn_gate_inp.weight")->type, TensorType::kF32);

  // Q8_0 stores each block of 32 as int8 times d = max|x|/127 kept in F16: the
  // error of an element is at most half a step, max|x|/254, plus 127 times the
  // scale's rounding error (at most d / 2048), i.e. max|x|/2048.
  const float* original =
      reinterpret_cast<const float*>((*a)->FindTensor("blk.0.attn_q.weight")->data);
  std::vector<float> decoded(64);
  for (int r = 0; r < 3; ++r) {
    ops::DequantizeRow(TensorType::kQ8_0, q->data + r * 2 * 34, decoded.data(), 64);
    for (int block = 0; block < 2; ++block) {
      float max = 0;
      for (int i = 0; i < 32; ++i)
        max = std::max(max, std::fabs(original[r * 64 + block * 32 + i]));
      for (int i = 0; i < 32; ++i) {
        const int k = block * 32 + i;
        EXPECT_NEAR(decoded[k], original[r * 64 + k], max / 254 + max / 2048 + 1e-6f)
            << r << " " << k;
      }
    }
  }
  // A quantized file is not a valid input.
  options.input_path = options.output_path;
  options.output_path = ::testing::TempDir() + "/quantize_again.gguf";
  absl::StatusOr<QuantizeReport> again = QuantizeGguf(options);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("only F32, F16 and BF16"), std::string::npos);
}

TEST(QuantizeGgufTest, MissingInputIsAnError) {
  QuantizeOptions options;
  options.input_path = ::testing::TempDir() + "/absent.gguf";
  options.output_path = ::testing::TempDir() + "/never.gguf";
  EXPECT_FALSE(QuantizeGguf(options).ok());
}

}  // namespace
}  // namespace colibri::quantize
