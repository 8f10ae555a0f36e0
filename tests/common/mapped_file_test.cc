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

// Defect 5 of issue 9: opening a FIFO blocked until a writer came (forever,
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
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    if (dash != std::string::npos && dash > 0 && line.find(' ') > dash) {
      in_mapping =
          std::stoull(line.substr(0, dash), nullptr, 16) == reinterpret_cast<uintptr_t>(start);
      continue;
    }
    if (in_mapping && line.rfind("Rss:", 0) == 0) return std::stoll(line.substr(4));
  }
  return -1;
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

}  // namespace
}  // namespace colibri
