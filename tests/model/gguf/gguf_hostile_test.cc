// Damaged and hostile GGUF images: every class of damage must yield a specific
// status naming the field, never a crash, a huge allocation or an OOB read
// (run under ASan: every image is parsed from an exactly-sized buffer).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "tests/model/gguf/gguf_test_util.h"

namespace colibri::gguf {
namespace {

using ::testing::HasSubstr;
using testing::OffsetAfter;
using testing::PutU32;
using testing::PutU64;
using testing::SmallModel;

constexpr uint64_t kHuge = uint64_t{1} << 60;

absl::Status ParseStatus(const std::vector<uint8_t>& image) {
  return GgufFile::FromBytes(image, "test.gguf").status();
}

void ExpectError(const std::vector<uint8_t>& image, absl::StatusCode code,
                 absl::string_view needle) {
  const absl::Status s = ParseStatus(image);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(s.message(), HasSubstr("test.gguf: "));
  EXPECT_THAT(s.message(), HasSubstr(needle));
}

// An image with one metadata value `key` and no tensors.
std::vector<uint8_t> OneValue(absl::string_view key, Value v) {
  GgufWriter w;
  w.SetValue(std::string(key), std::move(v));
  return w.Serialize();
}

// An image with no metadata and F32 tensors of 16 elements each.
std::vector<uint8_t> Tensors(std::vector<std::string> names) {
  GgufWriter w;
  for (const std::string& n : names) {
    EXPECT_TRUE(w.AddTensor(n, ops::TensorType::kF32, {16}, std::vector<uint8_t>(64)).ok());
  }
  return w.Serialize();
}

TEST(GgufHostileTest, ValidBaselineParses) {
  EXPECT_TRUE(ParseStatus(SmallModel().Serialize()).ok());
  EXPECT_TRUE(ParseStatus(Tensors({"a", "b"})).ok());
}

TEST(GgufHostileTest, TruncationAtEveryOffsetFails) {
  const std::vector<uint8_t> image = SmallModel().Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> full = GgufFile::FromBytes(image, "test.gguf");
  ASSERT_TRUE(full.ok()) << full.status();
  uint64_t data_end = 0;
  for (const TensorInfo& t : (*full)->tensors()) {
    data_end = std::max(data_end, t.offset_in_file + t.n_bytes);
  }
  const uint64_t data_start = (*full)->data_offset(0);
  ASSERT_GT(data_end, data_start + 100);
  auto check = [&](uint64_t len) {
    const std::vector<uint8_t> prefix(image.begin(), image.begin() + len);  // exact size
    const absl::Status s = ParseStatus(prefix);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << "length " << len << ": " << s;
  };
  for (uint64_t len = 0; len <= data_start; ++len) check(len);
  for (uint64_t len = data_start; len < data_end; len += 7) check(len);
  check(data_end - 1);
}

TEST(GgufHostileTest, EmptyImage) { ExpectError({}, absl::StatusCode::kDataLoss, "magic"); }

TEST(GgufHostileTest, BadMagic) {
  std::vector<uint8_t> image = SmallModel().Serialize();
  image[3] = 'G';
  ExpectError(image, absl::StatusCode::kInvalidArgument, "magic");
}

TEST(GgufHostileTest, UnsupportedVersions) {
  std::vector<uint8_t> image = SmallModel().Serialize();
  PutU32(image, 4, 1);
  ExpectError(image, absl::StatusCode::kInvalidArgument, "version 1");
  PutU32(image, 4, 4);
  ExpectError(image, absl::StatusCode::kInvalidArgument, "version 4");
  PutU32(image, 4, 2);  // v2 has the same layout as v3
  EXPECT_TRUE(ParseStatus(image).ok());
}

TEST(GgufHostileTest, HugeTensorCount) {
  std::vector<uint8_t> image = SmallModel().Serialize();
  PutU64(image, 8, kHuge);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor_count");
  PutU64(image, 8, UINT64_MAX);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor_count");
  PutU64(image, 8, 7);  // one more than present: the data is read as a tensor info
  EXPECT_EQ(ParseStatus(image).code(), absl::StatusCode::kDataLoss);
}

TEST(GgufHostileTest, HugeKvCount) {
  std::vector<uint8_t> image = SmallModel().Serialize();
  PutU64(image, 16, kHuge);
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata_kv_count");
  PutU64(image, 16, UINT64_MAX);
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata_kv_count");
}

TEST(GgufHostileTest, HugeKeyLength) {
  std::vector<uint8_t> image = SmallModel().Serialize();
  PutU64(image, 24, kHuge);  // length of the first key
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata key #0");
}

TEST(GgufHostileTest, HugeStringValueLength) {
  std::vector<uint8_t> image = OneValue("name", Value::String("hello"));
  PutU64(image, 24 + 8 + 4 + 4, kHuge);  // key length, "name", type
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata 'name' string");
}

TEST(GgufHostileTest, HugeArrayLength) {
  std::vector<uint8_t> image = OneValue("arr", Value::Int32Array({1, 2, 3}));
  const size_t count_at = 24 + 8 + 3 + 4 + 4;  // key length, "arr", type, element type
  PutU64(image, count_at, kHuge);
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata 'arr': array of");
  PutU64(image, count_at, 4);  // just one element too many
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata 'arr'");

  std::vector<uint8_t> strings = OneValue("arr", Value::StringArray({"a", "b"}));
  PutU64(strings, count_at, kHuge);
  ExpectError(strings, absl::StatusCode::kDataLoss, "metadata 'arr': array of");
  PutU64(strings, count_at + 8, kHuge);  // first element's length
  PutU64(strings, count_at, 2);
  ExpectError(strings, absl::StatusCode::kDataLoss, "metadata 'arr' element 0");
}

TEST(GgufHostileTest, UnknownValueType) {
  std::vector<uint8_t> image = OneValue("arr", Value::Int32Array({1, 2, 3}));
  PutU32(image, 24 + 8 + 3, 13);
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata 'arr': value type 13 is unknown");
  image = OneValue("arr", Value::Int32Array({1, 2, 3}));
  PutU32(image, 24 + 8 + 3 + 4, 77);
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata 'arr': array element type 77");
}

TEST(GgufHostileTest, BoolOutOfRange) {
  std::vector<uint8_t> image = OneValue("flag", Value::Bool(true));
  image[24 + 8 + 4 + 4] = 2;
  ExpectError(image, absl::StatusCode::kDataLoss, "metadata 'flag': bool value 2");
}

TEST(GgufHostileTest, DuplicateMetadataKeys) {
  GgufWriter w;
  w.SetValue("k1", Value::Uint32(1));
  w.SetValue("k2", Value::Uint32(2));
  std::vector<uint8_t> image = w.Serialize();
  image[OffsetAfter(image, "k2") - 1] = '1';
  ExpectError(image, absl::StatusCode::kDataLoss, "duplicate metadata key 'k1'");
}

TEST(GgufHostileTest, NestingTooDeep) {
  Value v = Value::Int32Array({1});
  for (int depth = 2; depth <= 8; ++depth) v = Value::ArrayOfArrays({v});
  EXPECT_TRUE(ParseStatus(OneValue("deep", v)).ok());  // depth 8 is the limit
  v = Value::ArrayOfArrays({v});
  ExpectError(OneValue("deep", v), absl::StatusCode::kDataLoss,
              "metadata 'deep': arrays nested deeper than 8");
}

void PutU64Or32(std::vector<uint8_t>& image, size_t offset, uint32_t v) {
  PutU32(image, offset, v);
}
void PutU64Or32(std::vector<uint8_t>& image, size_t offset, uint64_t v) {
  PutU64(image, offset, v);
}

// One metadata value: an array of n empty uint8 arrays (12 bytes each in the
// file, a whole Value each once parsed).
std::vector<uint8_t> NestedEmptyArrays(uint64_t n) {
  std::vector<uint8_t> image = {'G', 'G', 'U', 'F'};
  const auto append = [&image](auto v) {
    image.resize(image.size() + sizeof(v));
    PutU64Or32(image, image.size() - sizeof(v), v);
  };
  append(uint32_t{3});  // version
  append(uint64_t{0});  // tensors
  append(uint64_t{1});  // metadata values
  const std::string key = "nested";
  append(uint64_t{key.size()});
  image.insert(image.end(), key.begin(), key.end());
  append(static_cast<uint32_t>(ValueType::kArray));
  append(static_cast<uint32_t>(ValueType::kArray));
  append(n);
  for (uint64_t k = 0; k < n; ++k) {
    append(static_cast<uint32_t>(ValueType::kUint8));
    append(uint64_t{0});
  }
  return image;
}

TEST(GgufHostileTest, NestedArraysCannotAmplifyMemory) {
  EXPECT_TRUE(ParseStatus(NestedEmptyArrays(1000)).ok());
  // 24 MB of file would become several hundred MB of parsed values.
  ExpectError(NestedEmptyArrays(2'000'000), absl::StatusCode::kResourceExhausted,
              "metadata 'nested': the parsed header would take more than 256 MiB");
}

TEST(GgufHostileTest, BadAlignment) {
  for (uint32_t bad : {0u, 3u, 48u}) {
    GgufWriter w = SmallModel();
    w.SetValue("general.alignment", Value::Uint32(bad));
    ExpectError(w.Serialize(), absl::StatusCode::kDataLoss, "'general.alignment'");
  }
  GgufWriter w = SmallModel();
  w.SetValue("general.alignment", Value::Uint64(64));
  ExpectError(w.Serialize(), absl::StatusCode::kDataLoss, "'general.alignment' has type uint64");
}

// Offset of the n_dims field of tensor `name` in an image without metadata.
size_t NDimsAt(const std::vector<uint8_t>& image, absl::string_view name) {
  return OffsetAfter(image, name);
}

TEST(GgufHostileTest, UnknownTensorTypeNamesTheTensor) {
  const std::string name = "blk.3.ffn_down_exps.weight";
  std::vector<uint8_t> image = Tensors({"a", name});
  PutU32(image, NDimsAt(image, name) + 4 + 8, 99);
  const absl::Status s = ParseStatus(image);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(),
            "test.gguf: tensor 'blk.3.ffn_down_exps.weight': type 99 is not a GGML type");
}

TEST(GgufHostileTest, KnownButUnsupportedTensorTypeIsAccepted) {
  GgufWriter w;
  ASSERT_TRUE(
      w.AddTensor("tq", ops::TensorType::kTQ1_0, {256, 2}, std::vector<uint8_t>(2 * 54)).ok());
  const std::vector<uint8_t> image = w.Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(image, "x");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors()[0].type, ops::TensorType::kTQ1_0);
  EXPECT_EQ((*file)->tensors()[0].n_bytes, 108u);
}

TEST(GgufHostileTest, NDimsOutOfRange) {
  for (uint32_t n_dims : {0u, 5u, 0xffffffffu}) {
    std::vector<uint8_t> image = Tensors({"t"});
    PutU32(image, NDimsAt(image, "t"), n_dims);
    ExpectError(image, absl::StatusCode::kDataLoss, "tensor 't': n_dims");
  }
}

TEST(GgufHostileTest, DimsOverflow) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("t", ops::TensorType::kF32, {4, 2}, std::vector<uint8_t>(32)).ok());
  const std::vector<uint8_t> base = w.Serialize();
  const size_t dims_at = NDimsAt(base, "t") + 4;

  std::vector<uint8_t> image = base;
  PutU64(image, dims_at, uint64_t{1} << 32);
  PutU64(image, dims_at + 8, uint64_t{1} << 32);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 't': element count of dims overflows");

  image = base;
  PutU64(image, dims_at, uint64_t{1} << 63);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 't': dim 0");

  image = base;  // 2^62 F64 elements: 2^65 bytes
  PutU64(image, dims_at, uint64_t{1} << 31);
  PutU64(image, dims_at + 8, uint64_t{1} << 31);
  PutU32(image, dims_at + 16, static_cast<uint32_t>(ops::TensorType::kF64));
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 't': byte size overflows");

  image = base;  // fits int64 and uint64 but not the file
  PutU64(image, dims_at, uint64_t{1} << 30);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 't': data at offset");
}

TEST(GgufHostileTest, RowNotMultipleOfBlockSize) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("q", ops::TensorType::kQ4_K, {256}, std::vector<uint8_t>(144)).ok());
  std::vector<uint8_t> image = w.Serialize();
  PutU64(image, NDimsAt(image, "q") + 4, 128);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 'q': row length 128");
}

// MXFP4 (32-element blocks of 17 bytes) and the 256-element i-quants: a row
// that is not a whole number of blocks is rejected, naming the type.
TEST(GgufHostileTest, Mxfp4AndIQuantRowsMustBeWholeBlocks) {
  struct Case {
    ops::TensorType type;
    int64_t good_row, block_bytes, bad_row;
    const char* name;
  };
  for (const Case& c : {Case{ops::TensorType::kMXFP4, 64, 17, 48, "MXFP4"},
                        Case{ops::TensorType::kMXFP4, 32, 17, 16, "MXFP4"},
                        Case{ops::TensorType::kIQ2_XXS, 256, 66, 128, "IQ2_XXS"},
                        Case{ops::TensorType::kIQ1_S, 512, 50, 384, "IQ1_S"},
                        Case{ops::TensorType::kIQ4_NL, 32, 18, 40, "IQ4_NL"},
                        Case{ops::TensorType::kIQ4_XS, 256, 136, 320, "IQ4_XS"}}) {
    GgufWriter w;
    const int64_t bytes = c.good_row / (c.block_bytes == 17 || c.block_bytes == 18 ? 32 : 256) *
                          c.block_bytes * 3;
    ASSERT_TRUE(w.AddTensor("blk.0.ffn_down_exps.weight", c.type, {c.good_row, 3},
                            std::vector<uint8_t>(bytes))
                    .ok())
        << c.name;
    std::vector<uint8_t> image = w.Serialize();
    ASSERT_TRUE(ParseStatus(image).ok()) << c.name;
    PutU64(image, NDimsAt(image, "blk.0.ffn_down_exps.weight") + 4, c.bad_row);
    const absl::Status s = ParseStatus(image);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.name;
    EXPECT_THAT(s.message(), HasSubstr("tensor 'blk.0.ffn_down_exps.weight': row length " +
                                       std::to_string(c.bad_row)));
    EXPECT_THAT(s.message(), HasSubstr(c.name));
  }
}

TEST(GgufHostileTest, OffsetsOutOfRangeMisalignedOrOverlapping) {
  const std::vector<uint8_t> base = Tensors({"a", "b"});
  const size_t b_offset_at = NDimsAt(base, "b") + 4 + 8 + 4;

  std::vector<uint8_t> image = base;
  PutU64(image, b_offset_at, uint64_t{1} << 40);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 'b': data at offset");
  PutU64(image, b_offset_at, UINT64_MAX - 31);  // aligned, and overflows when added
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 'b': data at offset");
  PutU64(image, b_offset_at, 96);  // aligned, in the file, but runs past the end
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 'b': data at offset");
  PutU64(image, b_offset_at, 1);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensor 'b': offset 1 is not a multiple");
  PutU64(image, b_offset_at, 32);
  ExpectError(image, absl::StatusCode::kDataLoss, "tensors 'a' and 'b' overlap");
  PutU64(image, b_offset_at, 64);  // the original
  EXPECT_TRUE(ParseStatus(image).ok());
}

TEST(GgufHostileTest, DuplicateTensorNames) {
  std::vector<uint8_t> image = Tensors({"t1", "t2"});
  image[OffsetAfter(image, "t2") - 1] = '1';
  ExpectError(image, absl::StatusCode::kDataLoss, "duplicate tensor name 't1'");
}

// Names read from the file reach error messages (and logs) escaped: a key or
// tensor name with newlines or control bytes cannot forge or garble lines.
TEST(GgufHostileTest, NamesInErrorsAreEscaped) {
  const std::string key = std::string("evil\nkey\x01\x1b[31m") + std::string(200, 'k');
  std::vector<uint8_t> image = OneValue(key, Value::Uint32(7));
  PutU32(image, OffsetAfter(image, key), 99);
  absl::Status s = ParseStatus(image);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("metadata 'evil\\nkey\\x01\\x1b[31mkkk"));
  EXPECT_THAT(s.message(), HasSubstr("k...': value type 99 is unknown"));
  EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find('\x1b'), absl::string_view::npos) << s;

  const std::string name = "t\r\nINFO forged line";
  image = Tensors({"a", name});
  PutU32(image, NDimsAt(image, name) + 4 + 8, 99);
  s = ParseStatus(image);
  EXPECT_THAT(s.message(), HasSubstr("tensor 't\\x0d\\nINFO forged line': type 99"));
  EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;
}

TEST(GgufHostileTest, RandomCorruptionNeverCrashes) {
  const std::vector<uint8_t> base = SmallModel().Serialize();
  absl::StatusOr<std::unique_ptr<GgufFile>> full = GgufFile::FromBytes(base, "test.gguf");
  ASSERT_TRUE(full.ok());
  const size_t head = (*full)->data_offset(0);
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> image = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) image[rng() % head] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) image.resize(rng() % image.size());
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(image, "test.gguf");
    if (!file.ok()) continue;
    for (const TensorInfo& t : (*file)->tensors()) {
      ASSERT_LE(t.offset_in_file + t.n_bytes, image.size());
    }
  }
}

}  // namespace
}  // namespace colibri::gguf
