// CacheDirFrom's order of environment variables, MakeCacheDirs and WriteCacheFile.
#include "common/cache_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace colibri {
namespace {

TEST(CacheDirTest, FollowsTheEnvironmentsOrder) {
  EXPECT_EQ(CacheDirFrom(nullptr, "/x/cache", "/home/u"), "/x/cache/colibri");
  EXPECT_EQ(CacheDirFrom(nullptr, nullptr, "/home/u"), "/home/u/.cache/colibri");
  EXPECT_EQ(CacheDirFrom("/c", "/x/cache", "/home/u"), "/c");
  EXPECT_EQ(CacheDirFrom("", "/x/cache", "/home/u"), "");  // set but empty: no cache
  // Only absolute paths count.
  EXPECT_EQ(CacheDirFrom(nullptr, "x/cache", "/home/u"), "/home/u/.cache/colibri");
  EXPECT_EQ(CacheDirFrom(nullptr, nullptr, "relative"), "");
  EXPECT_EQ(CacheDirFrom(nullptr, nullptr, nullptr), "");
}

TEST(CacheDirTest, MakeCacheDirsCreatesPrivateParents) {
  char tmpl[] = "/tmp/colibri-cachedir-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string base = tmpl;
  EXPECT_TRUE(MakeCacheDirs(base + "/a/b/c"));
  struct stat st;
  ASSERT_EQ(::stat((base + "/a/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(MakeCacheDirs(base + "/a/b/c"));  // already there
  ASSERT_EQ(::close(::creat((base + "/file").c_str(), 0600)), 0);
  EXPECT_FALSE(MakeCacheDirs(base + "/file/d"));
  EXPECT_FALSE(MakeCacheDirs(""));
  std::system(("rm -rf '" + base + "'").c_str());
}

TEST(CacheDirTest, WriteCacheFileReplacesWholeAndReportsFailures) {
  char tmpl[] = "/tmp/colibri-cachefile-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string base = tmpl;
  const std::string path = base + "/f";
  ASSERT_TRUE(WriteCacheFile(path, "first, longer contents").ok());
  ASSERT_TRUE(WriteCacheFile(path, "second").ok());
  std::ifstream in(path);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, "second");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A directory that is not there: an error naming the path, nothing left.
  const absl::Status s = WriteCacheFile(base + "/missing/f", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(base + "/missing/f"), std::string::npos) << s;
  // Only the file itself: no temporary left behind.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(base)) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "f");
  }
  EXPECT_EQ(entries, 1);
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace colibri
