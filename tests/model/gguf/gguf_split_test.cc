// Split models: writing `<prefix>-0000i-of-0000n.gguf`, opening the first file,
// the merged tensor table, and the ways a set of split files can disagree.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf/gguf_writer.h"
#include "tests/model/gguf/gguf_test_util.h"

namespace colibri::gguf {
namespace {

using ::testing::HasSubstr;
using testing::TempPath;
using testing::TensorBytes;

// 7 F32/Q8_0 tensors and some metadata.
GgufWriter SevenTensors(uint64_t alignment = 32) {
  GgufWriter w(alignment);
  w.SetValue("general.architecture", Value::String("mixtral"));
  w.SetValue("llama.block_count", Value::Uint32(7));
  for (int t = 0; t < 7; ++t) {
    const ops::TensorType type = t % 2 == 0 ? ops::TensorType::kF32 : ops::TensorType::kQ8_0;
    const std::vector<int64_t> dims = {32, t + 1};
    EXPECT_TRUE(
        w.AddTensor("blk." + std::to_string(t) + ".w", type, dims, TensorBytes(type, dims, 100 + t))
            .ok());
  }
  return w;
}

std::vector<std::string> WriteSplit(const GgufWriter& w, const std::string& prefix, int n) {
  absl::StatusOr<std::vector<std::string>> paths = w.WriteSplitFiles(prefix, n);
  EXPECT_TRUE(paths.ok()) << paths.status();
  return paths.ok() ? *paths : std::vector<std::string>();
}

void CopyFile(const std::string& from, const std::string& to) {
  std::FILE* in = std::fopen(from.c_str(), "rb");
  std::FILE* out = std::fopen(to.c_str(), "wb");
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), in)) > 0) std::fwrite(buf, 1, n, out);
  std::fclose(in);
  std::fclose(out);
}

TEST(GgufSplitTest, OpensAndMergesThreeFiles) {
  for (uint64_t alignment : {32u, 64u}) {
    const std::string prefix = TempPath("model" + std::to_string(alignment));
    const std::vector<std::string> paths = WriteSplit(SevenTensors(alignment), prefix, 3);
    ASSERT_EQ(paths.size(), 3u);
    EXPECT_EQ(paths[0], prefix + "-00001-of-00003.gguf");
    EXPECT_EQ(paths[2], prefix + "-00003-of-00003.gguf");

    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(paths[0]);
    ASSERT_TRUE(file.ok()) << file.status();
    const GgufFile& f = **file;
    EXPECT_EQ(f.split_count(), 3);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(*f.GetString("general.architecture"), "mixtral");
    EXPECT_EQ(*f.GetInt("split.tensors.count"), 7);
    ASSERT_EQ(f.tensors().size(), 7u);
    std::vector<int> per_split(3, 0);
    for (int t = 0; t < 7; ++t) {
      const TensorInfo& info = f.tensors()[t];
      EXPECT_EQ(info.name, "blk." + std::to_string(t) + ".w");
      EXPECT_EQ(f.FindTensor(info.name), &info);
      ASSERT_GE(info.split_index, 0);
      ASSERT_LT(info.split_index, 3);
      ++per_split[info.split_index];
      const MappedFile* m = f.mapping(info.split_index);
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(info.data, m->data() + info.offset_in_file);
      EXPECT_EQ(info.offset_in_file % alignment, 0u);
      const std::vector<uint8_t> want = TensorBytes(info.type, info.dims, 100 + t);
      ASSERT_EQ(info.n_bytes, want.size());
      EXPECT_TRUE(std::equal(want.begin(), want.end(), info.data)) << info.name;
    }
    EXPECT_THAT(per_split, ::testing::ElementsAre(2, 2, 3));
    EXPECT_EQ(f.mapping(3), nullptr);
  }
}

TEST(GgufSplitTest, SingleSplitIsAPlainFile) {
  const std::vector<std::string> paths = WriteSplit(SevenTensors(), TempPath("one"), 1);
  ASSERT_EQ(paths.size(), 1u);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(paths[0]);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->split_count(), 1);
  EXPECT_EQ((*file)->tensors().size(), 7u);
}

TEST(GgufSplitTest, MissingSiblingIsNotFound) {
  const std::vector<std::string> paths = WriteSplit(SevenTensors(), TempPath("model"), 3);
  ASSERT_EQ(paths.size(), 3u);
  ASSERT_EQ(std::remove(paths[2].c_str()), 0);
  const absl::Status s = GgufFile::Open(paths[0]).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("split file 3 of 3"));
  EXPECT_THAT(s.message(), HasSubstr("-00003-of-00003.gguf"));
}

TEST(GgufSplitTest, WrongSplitNoIsDataLoss) {
  const std::vector<std::string> paths = WriteSplit(SevenTensors(), TempPath("model"), 3);
  ASSERT_EQ(paths.size(), 3u);
  CopyFile(paths[2], paths[1]);  // file 2 now says split.no = 2
  const absl::Status s = GgufFile::Open(paths[0]).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("-00002-of-00003.gguf: split.no is 2"));
}

TEST(GgufSplitTest, OpeningALaterFileIsInvalidArgument) {
  const std::vector<std::string> paths = WriteSplit(SevenTensors(), TempPath("model"), 3);
  ASSERT_EQ(paths.size(), 3u);
  const absl::Status s = GgufFile::Open(paths[1]).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("split.no is 1"));
}

TEST(GgufSplitTest, MisnamedFirstFileIsInvalidArgument) {
  const std::vector<std::string> paths = WriteSplit(SevenTensors(), TempPath("model"), 3);
  ASSERT_EQ(paths.size(), 3u);
  const std::string renamed = TempPath("renamed.gguf");
  CopyFile(paths[0], renamed);
  const absl::Status s = GgufFile::Open(renamed).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("split.count is 3"));
}

// Writes one split file by hand with the given split keys and tensor names.
void WriteHandSplit(const std::string& path, int no, int count, int total,
                    const std::vector<std::string>& names) {
  GgufWriter w;
  w.SetValue("split.no", Value::Uint16(static_cast<uint16_t>(no)));
  w.SetValue("split.count", Value::Uint16(static_cast<uint16_t>(count)));
  w.SetValue("split.tensors.count", Value::Int32(total));
  for (const std::string& n : names) {
    ASSERT_TRUE(w.AddF32Tensor(n, {2}, std::vector<float>{1.0f, 2.0f}).ok());
  }
  ASSERT_TRUE(w.WriteFile(path).ok());
}

TEST(GgufSplitTest, DuplicateTensorAcrossFilesIsDataLoss) {
  const std::string prefix = TempPath("dup");
  WriteHandSplit(prefix + "-00001-of-00002.gguf", 0, 2, 2, {"a"});
  WriteHandSplit(prefix + "-00002-of-00002.gguf", 1, 2, 2, {"a"});
  const absl::Status s = GgufFile::Open(prefix + "-00001-of-00002.gguf").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'a' is also in split file 1"));
}

TEST(GgufSplitTest, TensorCountMismatchIsDataLoss) {
  const std::string prefix = TempPath("count");
  WriteHandSplit(prefix + "-00001-of-00002.gguf", 0, 2, 5, {"a"});
  WriteHandSplit(prefix + "-00002-of-00002.gguf", 1, 2, 5, {"b"});
  const absl::Status s = GgufFile::Open(prefix + "-00001-of-00002.gguf").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("split.tensors.count is 5"));
}

TEST(GgufSplitTest, WrongSplitCountInSiblingIsDataLoss) {
  const std::string prefix = TempPath("cnt");
  WriteHandSplit(prefix + "-00001-of-00002.gguf", 0, 2, 2, {"a"});
  WriteHandSplit(prefix + "-00002-of-00002.gguf", 1, 3, 2, {"b"});
  const absl::Status s = GgufFile::Open(prefix + "-00001-of-00002.gguf").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("split.count 3"));
}

TEST(GgufSplitTest, WriterRejectsBadSplitCount) {
  EXPECT_EQ(SevenTensors().WriteSplitFiles(TempPath("x"), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri::gguf
