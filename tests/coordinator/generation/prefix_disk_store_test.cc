// PrefixDiskStore on its own: blocks written and read back bitwise, also by
// a store opened later on the same directory; every class of damaged or
// foreign file a clean miss with one log line naming the file and the
// reason (damaged ones removed, foreign ones left alone); the byte budget
// evicting leaves first; the directory's lock; leftovers of a crash removed.
#include "coordinator/generation/prefix_disk_store.h"

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "coordinator/generation/prefix_disk_record.h"
#include "gtest/gtest.h"

namespace colibri::coordinator {
namespace {

namespace fs = std::filesystem;

constexpr int kBlock = 4;
constexpr int64_t kBlockBytes = 96;
const PrefixCache::RowsKind kFast{ops::NumericPath::kFast, arch::KvType::kF32};

std::vector<int32_t> Tokens(int n, int first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Rows of each block of a prefix: every byte tag + the block's index.
std::vector<PrefixCache::Rows> Blocks(int n, int tag) {
  std::vector<PrefixCache::Rows> blocks;
  for (int i = 0; i < n; ++i) {
    blocks.push_back(std::make_shared<const std::vector<uint8_t>>(
        static_cast<size_t>(kBlockBytes), static_cast<uint8_t>(tag + i)));
  }
  return blocks;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

class PrefixDiskStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/prefix_disk_store_test-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
  }

  PrefixDiskStore::Options StoreOptions(const std::string& model = "model-a") {
    PrefixDiskStore::Options o;
    o.dir = dir_;
    o.capacity_bytes = 1 << 20;
    o.model = model;
    o.block_tokens = kBlock;
    o.block_bytes = kBlockBytes;
    o.log = &log_;
    return o;
  }

  std::unique_ptr<PrefixDiskStore> Open(const PrefixDiskStore::Options& options) {
    auto store = PrefixDiskStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  std::unique_ptr<PrefixDiskStore> Open() { return Open(StoreOptions()); }

  // Writes the 3 blocks of Tokens(12) (tags 10, 11, 12) and closes the store.
  void WriteThreeBlocks() {
    std::unique_ptr<PrefixDiskStore> store = Open();
    ASSERT_NE(store, nullptr);
    store->Enqueue(kFast, Tokens(3 * kBlock), Blocks(3, 10));
    store->Flush();
    ASSERT_EQ(store->stats().files, 3);
  }

  // The block files in the directory, shallowest (fewest tokens) first.
  std::vector<std::string> BlockFiles() {
    std::vector<std::pair<size_t, std::string>> files;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() == ".kvb") files.push_back({fs::file_size(e), e.path().string()});
    }
    std::sort(files.begin(), files.end());
    std::vector<std::string> paths;
    for (const auto& f : files) paths.push_back(f.second);
    return paths;
  }

  // Rewrites `path` with its header changed by `change` (its checksum made
  // right again, so that only the check of the changed field can notice).
  static void RewriteHeader(const std::string& path,
                            const std::function<void(PrefixRecordHeader*)>& change) {
    const std::string bytes = ReadFile(path);
    const uint32_t n = *PrefixRecordTokenCount(bytes, bytes.size());
    const size_t header_bytes = PrefixRecordHeaderBytes(n);
    absl::StatusOr<PrefixRecordHeader> h = DecodePrefixRecordHeader(bytes.substr(0, header_bytes));
    ASSERT_TRUE(h.ok()) << h.status();
    change(&*h);
    WriteFile(path, EncodePrefixRecordHeader(*h) + bytes.substr(header_bytes));
  }

  // Loads Tokens(12) from a new store: the blocks found.
  int LoadThree() {
    std::unique_ptr<PrefixDiskStore> store = Open();
    if (store == nullptr) return -1;
    const std::vector<PrefixCache::Rows> rows = store->Load(kFast, Tokens(3 * kBlock), 0, 3);
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(*rows[i], *Blocks(3, 10)[i]) << "block " << i;
    }
    return static_cast<int>(rows.size());
  }

  // The log's lines naming `path`.
  std::vector<std::string> LinesAbout(const std::string& path) {
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(log_.str(), '\n')) {
      if (absl::StrContains(line, path)) lines.emplace_back(line);
    }
    return lines;
  }

  // Damages block 1's file with `damage`, then expects a store opened after
  // to find block 0 only, with one log line naming the file and `reason`,
  // and the file removed (`removed`) or left alone.
  void ExpectMissAfter(const std::function<void(const std::string&)>& damage,
                       const std::string& reason, bool removed) {
    WriteThreeBlocks();
    const std::string victim = BlockFiles()[1];
    damage(victim);
    EXPECT_EQ(LoadThree(), 1);
    const std::vector<std::string> lines = LinesAbout(victim);
    ASSERT_EQ(lines.size(), 1u) << log_.str();
    EXPECT_TRUE(absl::StrContains(lines[0], reason)) << lines[0];
    EXPECT_EQ(fs::exists(victim), !removed);
  }

  std::string dir_;
  std::ostringstream log_;
};

TEST_F(PrefixDiskStoreTest, BlocksComeBackBitwiseAlsoAfterAReopen) {
  std::unique_ptr<PrefixDiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  store->Enqueue(kFast, Tokens(3 * kBlock + 2), Blocks(3, 10));
  store->Flush();
  PrefixDiskStore::Stats s = store->stats();
  EXPECT_EQ(s.files, 3);
  EXPECT_EQ(s.written_blocks, 3);
  EXPECT_EQ(s.bytes, static_cast<int64_t>(PrefixRecordBytes(kBlock, kBlockBytes) +
                                          PrefixRecordBytes(2 * kBlock, kBlockBytes) +
                                          PrefixRecordBytes(3 * kBlock, kBlockBytes)));
  EXPECT_EQ(s.pending_bytes, 0);
  // From block 1 on, and not past the end asked for.
  std::vector<PrefixCache::Rows> rows = store->Load(kFast, Tokens(3 * kBlock), 1, 2);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(*rows[0], *Blocks(3, 10)[1]);
  // Another prefix, another numeric path and another KV type find nothing.
  EXPECT_TRUE(store->Load(kFast, Tokens(3 * kBlock, 7), 0, 3).empty());
  EXPECT_TRUE(store->Load({ops::NumericPath::kExact, arch::KvType::kF32}, Tokens(3 * kBlock), 0, 3)
                  .empty());
  EXPECT_TRUE(store->Load({ops::NumericPath::kFast, arch::KvType::kF16}, Tokens(3 * kBlock), 0, 3)
                  .empty());
  // A prefix diverging in block 2 shares blocks 0 and 1.
  std::vector<int32_t> other = Tokens(3 * kBlock);
  other.back() = 1;
  EXPECT_EQ(store->Load(kFast, other, 0, 3).size(), 2u);
  store.reset();

  EXPECT_EQ(LoadThree(), 3);
  EXPECT_TRUE(absl::StrContains(log_.str(), "3 blocks of this model")) << log_.str();
}

TEST_F(PrefixDiskStoreTest, NamesAreHashesAndFilesArePrivate) {
  WriteThreeBlocks();
  for (const std::string& path : BlockFiles()) {
    const std::string name = fs::path(path).filename().string();
    EXPECT_EQ(name.size(), 16u + 4u) << name;
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
  }
}

TEST_F(PrefixDiskStoreTest, ATruncatedFileIsAMissAndRemoved) {
  ExpectMissAfter([](const std::string& path) { fs::resize_file(path, fs::file_size(path) - 5); },
                  "truncated", true);
}

TEST_F(PrefixDiskStoreTest, AFileShorterThanAHeaderIsAMissAndRemoved) {
  ExpectMissAfter([](const std::string& path) { fs::resize_file(path, 20); }, "truncated", true);
}

TEST_F(PrefixDiskStoreTest, AFlippedHeaderByteIsAMissAndRemoved) {
  // A token of the prefix, in the header.
  ExpectMissAfter(
      [](const std::string& path) {
        std::string bytes = ReadFile(path);
        bytes[kPrefixRecordFixedBytes + 4 * kBlock + 1] ^= 0x10;
        WriteFile(path, bytes);
      },
      "header checksum mismatch", true);
}

TEST_F(PrefixDiskStoreTest, AHeaderClaimingHugeSizesIsAMissBeforeAnyAllocation) {
  ExpectMissAfter(
      [](const std::string& path) {
        std::string bytes = ReadFile(path);
        bytes[24 + 3] = 0x7f;  // n_tokens near 2^31
        WriteFile(path, bytes);
      },
      "the header claims", true);
}

TEST_F(PrefixDiskStoreTest, AFlippedPayloadByteIsAMissAndRemoved) {
  ExpectMissAfter(
      [](const std::string& path) {
        std::string bytes = ReadFile(path);
        bytes[bytes.size() - 8 - kBlockBytes / 2] ^= 0x01;
        WriteFile(path, bytes);
      },
      "rows checksum mismatch", true);
}

TEST_F(PrefixDiskStoreTest, AWrongTokenCountIsAMissAndRemoved) {
  ExpectMissAfter(
      [](const std::string& path) {
        RewriteHeader(path, [](PrefixRecordHeader* h) { h->tokens.resize(h->tokens.size() - 1); });
      },
      "7 tokens are not whole blocks", true);
}

TEST_F(PrefixDiskStoreTest, ABlockShortOfItsNameIsAMissAndRemoved) {
  ExpectMissAfter(
      [](const std::string& path) {
        RewriteHeader(path, [](PrefixRecordHeader* h) { h->tokens.resize(kBlock); });
      },
      "does not match its header", true);
}

TEST_F(PrefixDiskStoreTest, AnotherModelsFileIsAMissAndLeftAlone) {
  ExpectMissAfter(
      [](const std::string& path) {
        RewriteHeader(path, [](PrefixRecordHeader* h) { h->kind.model = "model-b"; });
      },
      "another model", false);
}

TEST_F(PrefixDiskStoreTest, AnotherKvTypesFileIsAMissAndLeftAlone) {
  ExpectMissAfter(
      [](const std::string& path) {
        RewriteHeader(path, [](PrefixRecordHeader* h) {
          h->kind.kv_type = static_cast<int>(arch::KvType::kF16);
        });
      },
      "another KV type (f16", false);
}

TEST_F(PrefixDiskStoreTest, AQ8_0FileIsAMissForAnotherKvType) {
  ExpectMissAfter(
      [](const std::string& path) {
        RewriteHeader(path, [](PrefixRecordHeader* h) {
          h->kind.kv_type = static_cast<int>(arch::KvType::kQ8_0);
        });
      },
      "another KV type (q8_0, this one is f32)", false);
}

TEST_F(PrefixDiskStoreTest, AnotherLayoutVersionsFileIsAMissAndLeftAlone) {
  ExpectMissAfter(
      [](const std::string& path) {
        RewriteHeader(path, [](PrefixRecordHeader* h) { ++h->kind.rows_layout_version; });
      },
      "another rows layout version", false);
}

// Layout version 1 stored q8_0 rows unrotated (arch::KvType): such a file
// must not be read as rotated rows.
TEST_F(PrefixDiskStoreTest, AFileOfRowsLayoutOneIsAMissAndLeftAlone) {
  ASSERT_GT(arch::KvCache::kRowsLayoutVersion, 1);
  ExpectMissAfter(
      [](const std::string& path) {
        RewriteHeader(path, [](PrefixRecordHeader* h) { h->kind.rows_layout_version = 1; });
      },
      "another rows layout version (1,", false);
}

TEST_F(PrefixDiskStoreTest, AnotherRecordFormatIsAMissAndLeftAlone) {
  ExpectMissAfter(
      [](const std::string& path) {
        std::string bytes = ReadFile(path);
        bytes[7] = 2;
        WriteFile(path, bytes);
      },
      "record format version 2", false);
}

TEST_F(PrefixDiskStoreTest, AFileUnderAnotherPrefixsNameIsAMissAndRemoved) {
  WriteThreeBlocks();
  const std::vector<std::string> files = BlockFiles();
  fs::copy_file(files[0], files[1], fs::copy_options::overwrite_existing);
  EXPECT_EQ(LoadThree(), 1);
  ASSERT_EQ(LinesAbout(files[1]).size(), 1u) << log_.str();
  EXPECT_TRUE(absl::StrContains(LinesAbout(files[1])[0], "does not match its header"));
}

TEST_F(PrefixDiskStoreTest, AnotherModelsStoreSharesNothing) {
  WriteThreeBlocks();
  {
    std::unique_ptr<PrefixDiskStore> other = Open(StoreOptions("model-b"));
    ASSERT_NE(other, nullptr);
    EXPECT_TRUE(other->Load(kFast, Tokens(3 * kBlock), 0, 3).empty());
    EXPECT_EQ(other->stats().files, 0);
    EXPECT_EQ(other->stats().rejected_files, 3);
  }
  EXPECT_EQ(LoadThree(), 3);
}

TEST_F(PrefixDiskStoreTest, ALoadedFileDamagedAfterTheIndexIsAMiss) {
  WriteThreeBlocks();
  std::unique_ptr<PrefixDiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  const std::string victim = BlockFiles()[2];
  std::string bytes = ReadFile(victim);
  bytes[bytes.size() - 1] ^= 0x80;  // the rows' checksum
  WriteFile(victim, bytes);
  EXPECT_EQ(store->Load(kFast, Tokens(3 * kBlock), 0, 3).size(), 2u);
  EXPECT_EQ(LinesAbout(victim).size(), 1u) << log_.str();
  EXPECT_FALSE(fs::exists(victim));
  EXPECT_EQ(store->stats().files, 2);
  // Written again when the prefix comes back.
  store->Enqueue(kFast, Tokens(3 * kBlock), Blocks(3, 10));
  store->Flush();
  EXPECT_EQ(store->Load(kFast, Tokens(3 * kBlock), 0, 3).size(), 3u);
}

TEST_F(PrefixDiskStoreTest, TheBudgetEvictsTheLeastRecentlyUsedLeafFirst) {
  PrefixDiskStore::Options options = StoreOptions();
  const auto record = [](int blocks) {
    return static_cast<int64_t>(PrefixRecordBytes(blocks * kBlock, kBlockBytes));
  };
  // Room for A's two blocks and B's two, minus a little.
  options.capacity_bytes = record(1) + record(2) + record(1) + record(2) - 1;
  std::unique_ptr<PrefixDiskStore> store = Open(options);
  ASSERT_NE(store, nullptr);
  const std::vector<int32_t> a = Tokens(2 * kBlock, 100);
  const std::vector<int32_t> b = Tokens(2 * kBlock, 500);
  store->Enqueue(kFast, a, Blocks(2, 10));
  store->Enqueue(kFast, b, Blocks(2, 20));
  store->Flush();
  PrefixDiskStore::Stats s = store->stats();
  EXPECT_EQ(s.files, 3);
  EXPECT_EQ(s.evicted_files, 1);
  EXPECT_LE(s.bytes, options.capacity_bytes);
  // A's deeper block went, its first stays.
  EXPECT_EQ(store->Load(kFast, a, 0, 2).size(), 1u);
  EXPECT_EQ(store->Load(kFast, b, 0, 2).size(), 2u);
  // Using A again makes B the oldest.
  store->Enqueue(kFast, a, Blocks(2, 10));
  store->Flush();
  EXPECT_EQ(store->Load(kFast, a, 0, 2).size(), 2u);
  EXPECT_EQ(store->Load(kFast, b, 0, 2).size(), 1u);
  store.reset();
  // A smaller budget at the next open evicts at once.
  options.capacity_bytes = record(1);
  store = Open(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->stats().files, 1);
  EXPECT_EQ(BlockFiles().size(), 1u);
}

TEST_F(PrefixDiskStoreTest, ABlockBiggerThanTheBudgetIsNotKept) {
  PrefixDiskStore::Options options = StoreOptions();
  options.capacity_bytes = kBlockBytes;
  std::unique_ptr<PrefixDiskStore> store = Open(options);
  ASSERT_NE(store, nullptr);
  store->Enqueue(kFast, Tokens(kBlock), Blocks(1, 10));
  store->Flush();
  EXPECT_EQ(store->stats().files, 0);
  EXPECT_TRUE(BlockFiles().empty());
}

TEST_F(PrefixDiskStoreTest, RandomDamageIsNeverACrashNorWrongRows) {
  WriteThreeBlocks();
  const std::vector<std::string> files = BlockFiles();
  std::vector<std::string> originals;
  for (const std::string& path : files) originals.push_back(ReadFile(path));
  std::mt19937 rng(47);
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    for (size_t f = 0; f < files.size(); ++f) WriteFile(files[f], originals[f]);
    const size_t f = rng() % files.size();
    std::string bytes = originals[f];
    switch (rng() % 3) {
      case 0:  // flipped bytes anywhere
        for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
          bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
        }
        break;
      case 1:  // cut short
        bytes.resize(rng() % bytes.size());
        break;
      default:  // junk appended
        bytes += std::string(1 + rng() % 64, static_cast<char>(rng()));
        break;
    }
    WriteFile(files[f], bytes);
    const int found = LoadThree();  // checks every block it returns
    EXPECT_LE(found, static_cast<int>(f));
  }
}

TEST_F(PrefixDiskStoreTest, ADirectoryServesOneProcessAtATime) {
  std::unique_ptr<PrefixDiskStore> store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::unique_ptr<PrefixDiskStore>> second = PrefixDiskStore::Open(StoreOptions());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), dir_)) << second.status();
  store.reset();
  EXPECT_TRUE(PrefixDiskStore::Open(StoreOptions()).ok());
}

TEST_F(PrefixDiskStoreTest, TemporaryFilesOfACrashedWriteAreRemoved) {
  WriteThreeBlocks();
  const std::string tmp = BlockFiles()[0] + ".tmp";
  WriteFile(tmp, "half a record");
  EXPECT_EQ(LoadThree(), 3);
  EXPECT_FALSE(fs::exists(tmp));
}

TEST_F(PrefixDiskStoreTest, OneEnqueueIsTakenWhateverTheQueuesBound) {
  PrefixDiskStore::Options options = StoreOptions();
  options.queue_bytes = 1;
  std::unique_ptr<PrefixDiskStore> store = Open(options);
  ASSERT_NE(store, nullptr);
  store->Enqueue(kFast, Tokens(3 * kBlock), Blocks(3, 10));
  store->Flush();
  EXPECT_EQ(store->stats().files, 3);
}

TEST_F(PrefixDiskStoreTest, MissingOptionsAreInvalid) {
  PrefixDiskStore::Options options = StoreOptions();
  options.model.clear();
  EXPECT_EQ(PrefixDiskStore::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = StoreOptions();
  options.dir.clear();
  EXPECT_EQ(PrefixDiskStore::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri::coordinator
