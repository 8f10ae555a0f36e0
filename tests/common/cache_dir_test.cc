// CacheDir's order of environment variables, and MakeCacheDirs.
#include "common/cache_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace colibri {
namespace {

TEST(CacheDirTest, FollowsTheEnvironment) {
  const char* saved_cache = std::getenv("COLIBRI_CACHE_DIR");
  const char* saved_xdg = std::getenv("XDG_CACHE_HOME");
  const char* saved_home = std::getenv("HOME");
  const std::string cache = saved_cache ? saved_cache : "";
  const std::string xdg = saved_xdg ? saved_xdg : "";
  const std::string home = saved_home ? saved_home : "";
  ::unsetenv("COLIBRI_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(CacheDir(), "/x/cache/colibri");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(CacheDir(), "/home/u/.cache/colibri");
  ::setenv("COLIBRI_CACHE_DIR", "/c", 1);
  EXPECT_EQ(CacheDir(), "/c");
  ::setenv("COLIBRI_CACHE_DIR", "", 1);  // set but empty: no cache
  EXPECT_EQ(CacheDir(), "");
  ::unsetenv("COLIBRI_CACHE_DIR");
  ::setenv("HOME", "relative", 1);  // only absolute paths count
  EXPECT_EQ(CacheDir(), "");
  ::unsetenv("HOME");
  EXPECT_EQ(CacheDir(), "");
  auto restore = [](const char* name, const char* saved, const std::string& value) {
    if (saved != nullptr) {
      ::setenv(name, value.c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  };
  restore("COLIBRI_CACHE_DIR", saved_cache, cache);
  restore("XDG_CACHE_HOME", saved_xdg, xdg);
  restore("HOME", saved_home, home);
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
