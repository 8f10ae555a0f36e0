#include "common/mapped_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/proc_self.h"

namespace colibri {
namespace {

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / "colibri-map-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(MappedFileTest, MapsARegularFile) {
  const std::string path = dir_ + "/f";
  std::ofstream(path) << "hello";
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->size(), 5u);
  EXPECT_EQ(std::memcmp((*f)->data(), "hello", 5), 0);
}

// Opening a FIFO blocked until a writer came (forever,
// for an Import or `inspect`). It must fail at once, as any non-regular file.
TEST_F(MappedFileTest, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(fifo);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  f = MappedFile::Open(dir_);  // a directory
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  f = MappedFile::Open("/dev/null");  // a character device
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  f = MappedFile::Open(dir_ + "/missing");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound) << f.status();
}

// Kilobytes of the mapping starting at `start` that are mapped into this
// process (its Rss in /proc/self/smaps); -1 when not found.
int64_t ResidentKb(const void* start) {
  const std::string line = testing::SmapsLine(start, "Rss:");
  return line.empty() ? -1 : std::stoll(line.substr(4));
}

// Populate maps every page into the process: the whole file counts as
// resident in this mapping, where a fresh mapping counts (almost) nothing.
TEST_F(MappedFileTest, PopulateMapsEveryPageIn) {
  const std::string path = dir_ + "/big";
  constexpr int64_t kBytes = 8 << 20;
  {
    std::ofstream out(path, std::ios::binary);
    const std::string block(1 << 20, 'x');
    for (int64_t i = 0; i < kBytes / static_cast<int64_t>(block.size()); ++i) out << block;
  }
  absl::StatusOr<std::unique_ptr<MappedFile>> fresh = MappedFile::Open(path);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const int64_t fresh_kb = ResidentKb((*fresh)->data());
  ASSERT_GE(fresh_kb, 0);
  EXPECT_LT(fresh_kb, kBytes / 1024 / 4);

  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  (*f)->Populate();
  EXPECT_EQ(ResidentKb((*f)->data()), kBytes / 1024);
  EXPECT_EQ((*f)->data()[kBytes - 1], 'x');
}

// Bytes that differ from chunk to chunk and within one: byte i of a file made
// by WritePattern(seed) is Pattern(seed, i).
uint8_t Pattern(int seed, uint64_t i) {
  return static_cast<uint8_t>((i * 131 + i / 4093 + seed) & 0xff);
}

void WritePattern(const std::string& path, uint64_t size, int seed) {
  std::string bytes(size, '\0');
  for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(Pattern(seed, i));
  std::ofstream(path, std::ios::binary) << bytes;
}

// Overwrites the whole file in place with WritePattern(seed)'s bytes (the
// same inode, so a shared mapping of it sees them).
void RewriteInPlace(const std::string& path, uint64_t size, int seed) {
  std::string bytes(size, '\0');
  for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(Pattern(seed, i));
  std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  out.write(bytes.data(), static_cast<std::streamsize>(size));
}

constexpr uint64_t kChunk = MappedFile::kHugePageBytes;

TEST_F(MappedFileTest, TheMappingStartsOnAHugePageBoundary) {
  const std::string path = dir_ + "/f";
  WritePattern(path, 3 * 4096 + 5, 1);
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*f)->data()) % kChunk, 0u);
}

TEST_F(MappedFileTest, CopyToRamKeepsTheBytesAndDetachesThemFromTheFile) {
  const std::string path = dir_ + "/f";
  const uint64_t size = 3 * kChunk + 12345;  // the last page is partial
  WritePattern(path, size, 1);
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const uint8_t* data = (*f)->data();
  // A range inside the second chunk: that whole chunk moves, no other.
  ASSERT_TRUE((*f)->CopyToRam(kChunk + 100, 5000).ok());
  EXPECT_EQ((*f)->data(), data);
  for (uint64_t i = 0; i < size; ++i) ASSERT_EQ(data[i], Pattern(1, i)) << "byte " << i;

  // The file changes under the mapping: the chunks still mapped from it show
  // the new bytes, the copied chunk keeps the old ones.
  RewriteInPlace(path, size, 2);
  EXPECT_EQ(data[0], Pattern(2, 0));
  EXPECT_EQ(data[kChunk - 1], Pattern(2, kChunk - 1));
  for (uint64_t i = kChunk; i < 2 * kChunk; ++i) ASSERT_EQ(data[i], Pattern(1, i)) << "byte " << i;
  EXPECT_EQ(data[2 * kChunk], Pattern(2, 2 * kChunk));
  EXPECT_EQ(data[size - 1], Pattern(2, size - 1));
}

TEST_F(MappedFileTest, CopyToRamOfTheWholeFileIncludesThePartialLastPage) {
  const std::string path = dir_ + "/f";
  const uint64_t size = kChunk + 4096 * 3 + 77;
  WritePattern(path, size, 3);
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->CopyToRam(0, size).ok());
  RewriteInPlace(path, size, 4);
  const uint8_t* data = (*f)->data();
  for (uint64_t i = 0; i < size; ++i) ASSERT_EQ(data[i], Pattern(3, i)) << "byte " << i;
  // Ranges past the end, or empty, change nothing and are not errors.
  EXPECT_TRUE((*f)->CopyToRam(size, 10).ok());
  EXPECT_TRUE((*f)->CopyToRam(0, 0).ok());
}

TEST_F(MappedFileTest, CopyToRamOfAShortenedFileIsDataLossAndKeepsTheMapping) {
  const std::string path = dir_ + "/f";
  const uint64_t size = 2 * kChunk + 999;
  WritePattern(path, size, 5);
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kChunk + 10)), 0);
  const absl::Status s = (*f)->CopyToRam(kChunk, kChunk);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  // Still mapped from the file: what is left of it reads as before.
  EXPECT_EQ((*f)->data()[kChunk + 5], Pattern(5, kChunk + 5));
}

TEST_F(MappedFileTest, DropPagesReleasesTheFilesPagesAndKeepsTheCopiedChunks) {
  const std::string path = dir_ + "/f";
  const uint64_t size = 4 * kChunk;
  WritePattern(path, size, 6);
  absl::StatusOr<std::unique_ptr<MappedFile>> f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->CopyToRam(2 * kChunk, 1).ok());
  (*f)->Populate();
  const uint8_t* data = (*f)->data();
  // The first mapping now ends where the copied chunk starts.
  ASSERT_EQ(ResidentKb(data), static_cast<int64_t>(2 * kChunk / 1024));

  (*f)->DropPages(0, size);
  EXPECT_LT(ResidentKb(data), static_cast<int64_t>(2 * kChunk / 1024 / 4));
  RewriteInPlace(path, size, 7);
  for (uint64_t i = 2 * kChunk; i < 3 * kChunk; ++i) {
    ASSERT_EQ(data[i], Pattern(6, i)) << "byte " << i;  // not zeroed, not refaulted
  }
  EXPECT_EQ(data[0], Pattern(7, 0));  // faulted back in from the file
  EXPECT_EQ(data[size - 1], Pattern(7, size - 1));
}

}  // namespace
}  // namespace colibri
