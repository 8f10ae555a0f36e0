#include "common/mapped_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace
}  // namespace colibri
