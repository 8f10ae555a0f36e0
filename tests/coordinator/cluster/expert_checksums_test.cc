// The expert hash cache: hashes equal ExpertChecksum whether computed or read
// back; a second start reads them all; a damaged, truncated or stale file, or
// one of another model file, is ignored (everything computed again); a cache
// that cannot be written is reported, not fatal.
#include "coordinator/cluster/expert_checksums.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster/cluster_setup.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "model/gguf/gguf_fingerprint.h"
#include "tests/support/paths.h"

namespace colibri::coordinator {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

class ExpertChecksumsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string fixtures = colibri::testing::FixturesDir();
    if (fixtures.empty()) GTEST_SKIP() << "fixtures dir not found";
    char tmpl[] = "/tmp/colibri-checksums-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // A copy, so that the test can change its modification time.
    model_path_ = dir_ + "/model.gguf";
    WriteAll(model_path_, ReadAll(fixtures + "/models/mixtral-tiny-q4_k_m.gguf"));
    Reopen();
  }
  void TearDown() override {
    model_.reset();
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  void Reopen() {
    model_.reset();
    absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(model_path_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    fingerprint_ = *gguf::ModelFingerprint(model_->file());
  }
  std::string CacheDir() const { return dir_ + "/cache/colibri"; }

  // Gets every expert's hash, checking each against ExpertChecksum.
  void GetAll(ExpertChecksums* checksums) {
    const auto& experts = model_->experts();
    for (size_t l = 0; l < experts.size(); ++l) {
      for (size_t e = 0; e < experts[l].size(); ++e) {
        ASSERT_EQ(checksums->Get(static_cast<int>(l), static_cast<int>(e)),
                  ExpertChecksum(experts[l][e]))
            << "L" << l << "E" << e;
      }
    }
  }
  int64_t NumExperts() const {
    int64_t n = 0;
    for (const auto& layer : model_->experts()) n += static_cast<int64_t>(layer.size());
    return n;
  }

  std::string dir_;
  std::string model_path_;
  std::unique_ptr<arch::Model> model_;
  std::string fingerprint_;
};

TEST_F(ExpertChecksumsTest, ASecondStartReadsEveryHashBack) {
  ASSERT_GT(NumExperts(), 0);
  {
    ExpertChecksums first(CacheDir(), model_.get(), fingerprint_);
    GetAll(&first);
    EXPECT_EQ(first.computed(), NumExperts());
    EXPECT_EQ(first.hits(), 0);
    ASSERT_TRUE(first.Save().ok()) << first.Save();
    EXPECT_EQ(first.path(), CacheDir() + "/experts-" + fingerprint_ + ".xxh64");
    struct stat st;
    ASSERT_EQ(::stat(first.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  ExpertChecksums second(CacheDir(), model_.get(), fingerprint_);
  GetAll(&second);
  EXPECT_EQ(second.hits(), NumExperts());
  EXPECT_EQ(second.computed(), 0);
}

TEST_F(ExpertChecksumsTest, DamagedOrTruncatedFilesAreIgnored) {
  ExpertChecksums first(CacheDir(), model_.get(), fingerprint_);
  GetAll(&first);
  ASSERT_TRUE(first.Save().ok());
  const std::string good = ReadAll(first.path());
  ASSERT_GT(good.size(), 64u);
  std::vector<std::string> bad;
  // A bit of the last entry's hash (the 8 bytes before the trailer), then one
  // in the middle: only the trailer tells.
  for (size_t at : {good.size() - 12, good.size() / 2}) {
    std::string flipped = good;
    flipped[at] ^= 0x10;
    bad.push_back(flipped);
  }
  bad.push_back(good.substr(0, good.size() - 9));
  bad.push_back(good.substr(0, 5));
  bad.push_back("");
  bad.push_back(std::string(good.size(), '\xff'));
  for (const std::string& contents : bad) {
    WriteAll(first.path(), contents);
    ExpertChecksums again(CacheDir(), model_.get(), fingerprint_);
    GetAll(&again);  // still the right hashes
    EXPECT_EQ(again.hits(), 0) << "file of " << contents.size() << " bytes";
    EXPECT_EQ(again.computed(), NumExperts());
  }
}

TEST_F(ExpertChecksumsTest, AChangedModelFileOrAnotherFingerprintIsNotTrusted) {
  {
    ExpertChecksums first(CacheDir(), model_.get(), fingerprint_);
    GetAll(&first);
    ASSERT_TRUE(first.Save().ok());
  }
  // The same bytes under a new modification time: rewritten, so hashed again.
  struct timespec times[2] = {{0, UTIME_OMIT}, {1234567, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, model_path_.c_str(), times, 0), 0);
  {
    ExpertChecksums stale(CacheDir(), model_.get(), fingerprint_);
    GetAll(&stale);
    EXPECT_EQ(stale.hits(), 0);
    ASSERT_TRUE(stale.Save().ok());  // now recorded for the new time
  }
  {
    ExpertChecksums fresh(CacheDir(), model_.get(), fingerprint_);
    GetAll(&fresh);
    EXPECT_EQ(fresh.hits(), NumExperts());
  }
  // A file written for another fingerprint, renamed to this one's name.
  {
    ExpertChecksums other(CacheDir(), model_.get(), "0123456789abcdef0123456789abcdef");
    GetAll(&other);
    ASSERT_TRUE(other.Save().ok());
    ASSERT_EQ(::rename(other.path().c_str(),
                       (CacheDir() + "/experts-" + fingerprint_ + ".xxh64").c_str()),
              0);
  }
  ExpertChecksums renamed(CacheDir(), model_.get(), fingerprint_);
  GetAll(&renamed);
  EXPECT_EQ(renamed.hits(), 0);
}

TEST_F(ExpertChecksumsTest, AnUnwritableCacheIsReportedAndNoDirectoryMeansNoFile) {
  // The cache directory's parent is a regular file.
  WriteAll(dir_ + "/blocker", "x");
  ExpertChecksums blocked(dir_ + "/blocker/colibri", model_.get(), fingerprint_);
  GetAll(&blocked);
  const absl::Status s = blocked.Save();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir_ + "/blocker"), std::string::npos) << s;

  ExpertChecksums none("", model_.get(), fingerprint_);
  GetAll(&none);
  EXPECT_EQ(none.path(), "");
  EXPECT_TRUE(none.Save().ok());
  EXPECT_EQ(none.computed(), NumExperts());
}

}  // namespace
}  // namespace colibri::coordinator
