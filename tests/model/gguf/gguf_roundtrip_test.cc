// Writer -> reader round trips: every value type, nested arrays, alignments,
// tensors of several types; the typed getters; display and fingerprint helpers.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_fingerprint.h"
#include "model/gguf/gguf_value.h"
#include "model/gguf/gguf_writer.h"
#include "tests/model/gguf/gguf_test_util.h"

namespace colibri::gguf {
namespace {

using ::testing::HasSubstr;
using testing::SmallModel;
using testing::TempPath;
using testing::TensorBytes;

std::unique_ptr<GgufFile> Parse(const std::vector<uint8_t>& image) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(image, "test.gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : nullptr;
}

std::vector<std::pair<std::string, Value>> EveryValueType() {
  return {
      {"u8", Value::Uint8(255)},
      {"i8", Value::Int8(-128)},
      {"u16", Value::Uint16(65535)},
      {"i16", Value::Int16(-32768)},
      {"u32", Value::Uint32(4294967295u)},
      {"i32", Value::Int32(std::numeric_limits<int32_t>::min())},
      {"f32", Value::Float32(0.125f)},
      {"bool_t", Value::Bool(true)},
      {"bool_f", Value::Bool(false)},
      {"str", Value::String("h\xc3\xa9llo\nworld")},
      {"empty_str", Value::String("")},
      {"u64", Value::Uint64(std::numeric_limits<uint64_t>::max())},
      {"i64", Value::Int64(std::numeric_limits<int64_t>::min())},
      {"f64", Value::Float64(-1e300)},
      {"a_u8", Value::IntArray(ValueType::kUint8, {0, 1, 255})},
      {"a_i8", Value::IntArray(ValueType::kInt8, {-128, 0, 127})},
      {"a_u16", Value::IntArray(ValueType::kUint16, {0, 65535})},
      {"a_i16", Value::IntArray(ValueType::kInt16, {-32768, 32767})},
      {"a_u32", Value::IntArray(ValueType::kUint32, {0, 4294967295})},
      {"a_i32", Value::Int32Array({-1, 2, -3})},
      {"a_i64", Value::IntArray(ValueType::kInt64, {std::numeric_limits<int64_t>::min(), 7})},
      {"a_u64", Value::Uint64Array({1, std::numeric_limits<uint64_t>::max()})},
      {"a_bool", Value::IntArray(ValueType::kBool, {1, 0, 1})},
      {"a_f32", Value::Float32Array({1.5f, -2.25f})},
      {"a_f64", Value::Float64Array({1e-300, 3.0})},
      {"a_str", Value::StringArray({"", "x", std::string("nul\0in", 6)})},
      {"a_empty", Value::Int32Array({})},
      {"a_nested", Value::ArrayOfArrays({Value::Int32Array({1, 2}), Value::StringArray({"p", "q"}),
                                         Value::ArrayOfArrays({Value::Float32Array({0.5f})}),
                                         Value::ArrayOfArrays({})})},
  };
}

TEST(GgufRoundTripTest, EveryValueTypeSurvives) {
  GgufWriter w;
  const auto values = EveryValueType();
  for (const auto& [k, v] : values) w.SetValue(k, v);
  std::unique_ptr<GgufFile> file = Parse(w.Serialize());
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 3u);
  ASSERT_EQ(file->metadata().size(), values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    EXPECT_EQ(file->metadata()[k].first, values[k].first);
    EXPECT_TRUE(file->metadata()[k].second == values[k].second) << values[k].first;
    const Value* found = file->FindValue(values[k].first);
    ASSERT_NE(found, nullptr);
    EXPECT_TRUE(*found == values[k].second) << values[k].first;
  }
  EXPECT_EQ(file->FindValue("absent"), nullptr);
  EXPECT_TRUE(file->tensors().empty());
}

TEST(GgufRoundTripTest, SetValueReplaces) {
  GgufWriter w;
  w.SetValue("k", Value::Uint32(1));
  w.SetValue("k", Value::String("two"));
  std::unique_ptr<GgufFile> file = Parse(w.Serialize());
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->metadata().size(), 1u);
  EXPECT_EQ(*file->GetString("k"), "two");
}

TEST(GgufRoundTripTest, GettersConvertAndRangeCheck) {
  GgufWriter w;
  for (const auto& [k, v] : EveryValueType()) w.SetValue(k, v);
  std::unique_ptr<GgufFile> file = Parse(w.Serialize());
  ASSERT_NE(file, nullptr);

  EXPECT_EQ(*file->GetInt("u8"), 255);
  EXPECT_EQ(*file->GetInt("i16"), -32768);
  EXPECT_EQ(*file->GetInt("u32"), 4294967295);
  EXPECT_EQ(*file->GetUint("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(file->GetInt("u64").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file->GetInt("u64").status().message(), HasSubstr("'u64'"));
  EXPECT_EQ(file->GetUint("i8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(*file->GetFloat("f32"), 0.125);
  EXPECT_DOUBLE_EQ(*file->GetFloat("i32"), -2147483648.0);
  EXPECT_EQ(file->GetFloat("str").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(*file->GetBool("bool_t"));
  EXPECT_EQ(file->GetBool("u8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->GetInt("bool_t").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*file->GetString("empty_str"), "");
  const absl::Status wrong = file->GetString("u8").status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), HasSubstr("test.gguf"));
  EXPECT_THAT(wrong.message(), HasSubstr("'u8'"));

  const absl::Status missing = file->GetInt("nope").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("'nope'"));
  EXPECT_EQ(*file->GetIntOr("nope", 7), 7);
  EXPECT_EQ(*file->GetIntOr("u8", 7), 255);
  EXPECT_EQ(file->GetIntOr("str", 7).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(*file->GetFloatOr("nope", 2.5), 2.5);
  EXPECT_FALSE(*file->GetBoolOr("nope", false));
  EXPECT_EQ(file->GetBoolOr("str", false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*file->GetStringOr("nope", "dflt"), "dflt");

  EXPECT_THAT(*file->GetIntArray("a_u8"), ::testing::ElementsAre(0, 1, 255));
  EXPECT_THAT(*file->GetIntArray("a_bool"), ::testing::ElementsAre(1, 0, 1));
  EXPECT_EQ(file->GetIntArray("a_u64").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->GetIntArray("a_f32").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->GetIntArray("u8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(*file->GetFloatArray("a_f32"), ::testing::ElementsAre(1.5f, -2.25f));
  EXPECT_THAT(*file->GetFloatArray("a_i32"), ::testing::ElementsAre(-1.0f, 2.0f, -3.0f));
  EXPECT_EQ(file->GetFloatArray("a_str").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(**file->GetStringArray("a_str"),
              ::testing::ElementsAre("", "x", std::string("nul\0in", 6)));
  EXPECT_EQ(file->GetStringArray("a_i32").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->GetStringArray("nope").status().code(), absl::StatusCode::kNotFound);
}

class GgufAlignmentTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufAlignmentTest, TensorsRoundTrip) {
  const uint64_t alignment = GetParam();
  GgufWriter w = SmallModel(alignment);
  const std::vector<uint8_t> image = w.Serialize();
  std::unique_ptr<GgufFile> file = Parse(image);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->alignment(), alignment);
  if (alignment == 32) {
    EXPECT_EQ(file->FindValue("general.alignment"), nullptr);
  } else {
    EXPECT_EQ(*file->GetUint("general.alignment"), alignment);
  }
  EXPECT_EQ(file->data_offset(0) % alignment, 0u);
  ASSERT_EQ(file->tensors().size(), 6u);

  const TensorInfo* q4k = file->FindTensor("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(q4k, nullptr);
  EXPECT_EQ(q4k->type, ops::TensorType::kQ4_K);
  EXPECT_THAT(q4k->dims, ::testing::ElementsAre(256, 2, 2));
  EXPECT_EQ(q4k->n_elements, 1024);
  EXPECT_EQ(q4k->n_bytes, 4u * 144u);
  EXPECT_EQ(q4k->rows(), 4);
  EXPECT_EQ(q4k->row_length(), 256);
  EXPECT_EQ(q4k->split_index, 0);

  uint32_t seed = 1;
  for (const TensorInfo& t : file->tensors()) {
    EXPECT_EQ(t.offset_in_file % alignment, 0u) << t.name;
    EXPECT_EQ(t.data, image.data() + t.offset_in_file);
    const std::vector<uint8_t> want = TensorBytes(t.type, t.dims, seed++);
    ASSERT_EQ(t.n_bytes, want.size()) << t.name;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), t.data)) << t.name;
    EXPECT_EQ(file->FindTensor(t.name), &t);
  }
  const TensorInfo* norm = file->FindTensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->rows(), 1);
  EXPECT_EQ(file->FindTensor("nope"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignmentTest, ::testing::Values(32, 64, 1, 4096));

TEST(GgufRoundTripTest, WriteFileStreamsTheSameBytesAsSerialize) {
  for (uint64_t alignment : {64u, 4096u}) {
    GgufWriter w = SmallModel(alignment);
    const std::string path = TempPath("model" + std::to_string(alignment) + ".gguf");
    ASSERT_TRUE(w.WriteFile(path).ok());
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
    EXPECT_EQ(on_disk, w.Serialize());
    EXPECT_FALSE(std::ifstream(path + ".tmp").good());

    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->path(), path);
    EXPECT_EQ((*file)->split_count(), 1);
    ASSERT_NE((*file)->mapping(0), nullptr);
    EXPECT_EQ((*file)->mapping(1), nullptr);
    EXPECT_EQ((*file)->tensors()[0].data,
              (*file)->mapping(0)->data() + (*file)->tensors()[0].offset_in_file);
    EXPECT_EQ(*(*file)->GetString("general.architecture"), "qwen3moe");
  }
}

TEST(GgufRoundTripTest, OpenMissingFileIsNotFound) {
  const absl::Status s = GgufFile::Open(TempPath("absent.gguf")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("absent.gguf"));
}

TEST(GgufWriterTest, RejectsBadTensors) {
  GgufWriter w;
  EXPECT_TRUE(w.AddTensor("a", ops::TensorType::kF32, {4}, std::vector<uint8_t>(16)).ok());
  EXPECT_EQ(w.AddTensor("a", ops::TensorType::kF32, {4}, std::vector<uint8_t>(16)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("b", ops::TensorType::kF32, {4}, std::vector<uint8_t>(15)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("c", ops::TensorType::kQ4_K, {128}, std::vector<uint8_t>(72)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("d", ops::TensorType::kF32, {}, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      w.AddTensor("e", ops::TensorType::kF32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("f", ops::TensorType::kF32, {-4}, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.AddF32Tensor("g", {2}, std::vector<float>{1.0f, 2.0f}).ok());
  EXPECT_EQ(w.tensor_count(), 2u);
}

TEST(GgufWriterTest, WriteFileRejectsNonPowerOfTwoAlignment) {
  GgufWriter w(48);
  EXPECT_EQ(w.WriteFile(TempPath("bad.gguf")).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GgufRoundTripTest, F32TensorValues) {
  GgufWriter w;
  const std::vector<float> values = {1.0f, -2.0f, 0.5f, 3.25f, 0.0f, -0.0f};
  ASSERT_TRUE(w.AddF32Tensor("t", {3, 2}, values).ok());
  const std::vector<uint8_t> image = w.Serialize();
  std::unique_ptr<GgufFile> file = Parse(image);
  ASSERT_NE(file, nullptr);
  const TensorInfo& t = file->tensors()[0];
  ASSERT_EQ(t.n_bytes, values.size() * sizeof(float));
  std::vector<float> read(values.size());
  std::memcpy(read.data(), t.data, t.n_bytes);
  EXPECT_EQ(read, values);
}

TEST(GgufValueTest, ToStringIsShort) {
  EXPECT_EQ(ValueToString(Value::Uint32(42)), "42");
  EXPECT_EQ(ValueToString(Value::Int32(-3)), "-3");
  EXPECT_EQ(ValueToString(Value::Bool(true)), "true");
  EXPECT_EQ(ValueToString(Value::Float32(0.5f)), "0.5");
  EXPECT_EQ(ValueToString(Value::String("a\"b\n")), "\"a\\\"b\\n\"");
  EXPECT_EQ(ValueToString(Value::String(std::string(100, 'x')), 4, 5), "\"xxxxx...\"");
  std::vector<std::string> vocab(32000, "tok");
  vocab[0] = "<unk>";
  EXPECT_EQ(ValueToString(Value::StringArray(vocab), 2),
            "[array of 32000 string: \"<unk>\", \"tok\", ...]");
  EXPECT_EQ(ValueToString(Value::Int32Array({})), "[array of 0 int32]");
  EXPECT_EQ(ValueToString(Value::ArrayOfArrays({Value::Int32Array({1, 2})})),
            "[array of 1 array: [array of 2 int32: 1, 2]]");
  EXPECT_EQ(ValueToString(Value::Uint64Array({18446744073709551615u})),
            "[array of 1 uint64: 18446744073709551615]");
  EXPECT_STREQ(ValueTypeName(ValueType::kFloat64), "float64");
}

TEST(GgufFingerprintTest, StableAndSensitiveToStructureOnly) {
  auto fingerprint = [](const GgufWriter& w) {
    const std::vector<uint8_t> image = w.Serialize();
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(image, "m.gguf");
    EXPECT_TRUE(file.ok());
    absl::StatusOr<std::string> fp = ModelFingerprint(**file);
    EXPECT_TRUE(fp.ok()) << fp.status();
    return fp.ok() ? *fp : std::string();
  };
  const std::string base = fingerprint(SmallModel());
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(base.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(fingerprint(SmallModel()), base);

  GgufWriter renamed = SmallModel();
  renamed.SetValue("general.name", Value::String("other name"));
  renamed.SetValue("general.license", Value::String("mit"));
  EXPECT_EQ(fingerprint(renamed), base);

  GgufWriter changed_hparam = SmallModel();
  changed_hparam.SetValue("qwen3moe.block_count", Value::Uint32(3));
  EXPECT_NE(fingerprint(changed_hparam), base);

  GgufWriter extra_tensor = SmallModel();
  ASSERT_TRUE(extra_tensor.AddF32Tensor("extra", {1}, std::vector<float>{1.0f}).ok());
  EXPECT_NE(fingerprint(extra_tensor), base);

  EXPECT_NE(fingerprint(SmallModel(64)), base);  // offsets and alignment key differ

  GgufWriter no_arch;
  const std::vector<uint8_t> image = no_arch.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(image, "m.gguf");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(ModelFingerprint(**file).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(IsDescriptiveKey("general.source.url"));
  EXPECT_FALSE(IsDescriptiveKey("general.architecture"));
}

}  // namespace
}  // namespace colibri::gguf
