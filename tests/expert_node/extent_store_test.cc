// The expert store's extent layout: what it reads (both I/O engines, both
// layouts), what it does with damage and hostile pointers, and what a kill -9
// during writes leaves.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "expert_node/expert_store.h"
#include "expert_node/extent_files.h"
#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node {
namespace {

using testing::MakeExpert;
using testing::SyntheticExpert;
using testing::TempDir;

constexpr char kFp[] = "0123456789abcdef0123456789abcdef";

struct StoreSetup {
  bool extent_files = true;
  bool direct = false;
  DiskReadQueue::Engine engine = DiskReadQueue::Engine::kAuto;
};

std::unique_ptr<ExpertStore> OpenStore(const std::string& dir, const StoreSetup& setup = {}) {
  ExpertStore::Options options;
  options.data_dir = dir;
  options.extent_files = setup.extent_files;
  options.direct_reads = setup.direct;
  options.read_queue.engine = setup.engine;
  absl::StatusOr<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

bool SameBytes(const ExpertBlob& blob, const SyntheticExpert& e) {
  const moe::ExpertWeights& w = blob.weights();
  return w.gate.rows * w.gate.row_bytes == e.gate.size() &&
         std::memcmp(w.gate.data, e.gate.data(), e.gate.size()) == 0 &&
         std::memcmp(w.up.data, e.up.data(), e.up.size()) == 0 &&
         std::memcmp(w.down.data, e.down.data(), e.down.size()) == 0;
}

std::string ExtentPath(const std::string& dir, int file = 0) {
  char name[32];
  std::snprintf(name, sizeof(name), "/extents/%06d.ext", file);
  return dir + name;
}

void FlipByte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  char c = 0;
  f.seekg(static_cast<std::streamoff>(at));
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

// Experts of ~1.6 MiB (the Qwen3-30B-A3B expert's size at Q4_K_M, as F32 of
// a smaller shape), read back in one GetMany by io_uring and by threads,
// buffered and O_DIRECT: bitwise the stored bytes, the same for every engine.
TEST(ExtentStoreTest, BothEnginesReadTheStoredBytes) {
  TempDir dir;
  std::vector<SyntheticExpert> experts;
  std::vector<ExpertId> ids;
  {
    StoreSetup setup;
    auto store = OpenStore(dir.path(), setup);
    ASSERT_NE(store, nullptr);
    for (int e = 0; e < 12; ++e) {
      experts.push_back(MakeExpert(512, 272, 100 + e));
      ids.push_back(ExpertId{kFp, 2, e});
      const SyntheticExpert& x = experts.back();
      ASSERT_TRUE(store->Put(ids.back(), x.layout, x.gate, x.up, x.down).ok());
    }
  }
  ASSERT_TRUE(std::filesystem::exists(ExtentPath(dir.path())));
  for (DiskReadQueue::Engine engine : {DiskReadQueue::Engine::kUring, DiskReadQueue::Engine::kThreads}) {
    for (bool direct : {false, true}) {
      StoreSetup setup;
      setup.engine = engine;
      setup.direct = direct;
      ExpertStore::Options probe;
      probe.read_queue.engine = engine;
      if (!DiskReadQueue::Create(probe.read_queue).ok()) continue;  // io_uring refused here
      auto store = OpenStore(dir.path(), setup);
      ASSERT_NE(store, nullptr);
      EXPECT_EQ(store->read_engine(), engine);
      // Reversed and repeated: the order of results is the order of ids.
      std::vector<ExpertId> asked(ids.rbegin(), ids.rend());
      asked.push_back(ids[3]);
      std::vector<absl::StatusOr<std::unique_ptr<ExpertBlob>>> got = store->GetMany(asked);
      ASSERT_EQ(got.size(), asked.size());
      for (size_t i = 0; i < asked.size(); ++i) {
        ASSERT_TRUE(got[i].ok()) << got[i].status();
        EXPECT_TRUE(SameBytes(**got[i], experts[asked[i].expert]))
            << EngineName(engine) << (direct ? " direct" : " buffered") << " expert "
            << asked[i].expert;
      }
      EXPECT_EQ(store->checksum_failures(), 0u);
    }
  }
}

// A byte flipped in an expert's record (payload or header) is caught on
// read: the expert is dropped, counted and reported as DataLoss, the others
// stay readable, and storing it again heals it.
TEST(ExtentStoreTest, DamagedRecordIsDroppedAndStoredAgain) {
  for (const uint64_t at : {uint64_t{kHeaderBytes + 1000}, uint64_t{12}, uint64_t{kHeaderBytes - 3}}) {
    TempDir dir;
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    const SyntheticExpert e = MakeExpert(64, 96, 7);
    const SyntheticExpert f = MakeExpert(64, 96, 8);
    const ExpertId victim{kFp, 0, 0};
    const ExpertId other{kFp, 0, 1};
    ASSERT_TRUE(store->Put(victim, e.layout, e.gate, e.up, e.down).ok());  // at offset 0
    ASSERT_TRUE(store->Put(other, f.layout, f.gate, f.up, f.down).ok());
    FlipByte(ExtentPath(dir.path()), at);
    absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(victim);
    EXPECT_EQ(blob.status().code(), absl::StatusCode::kDataLoss) << at << ": " << blob.status();
    EXPECT_NE(blob.status().message().find("layer 0 expert 0"), std::string::npos);
    EXPECT_EQ(store->checksum_failures(), 1u);
    EXPECT_FALSE(*store->Contains(victim));
    EXPECT_EQ(store->experts_stored(), 1u);
    absl::StatusOr<std::unique_ptr<ExpertBlob>> good = store->Get(other);
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_TRUE(SameBytes(**good, f));
    ASSERT_TRUE(store->Put(victim, e.layout, e.gate, e.up, e.down).ok());
    blob = store->Get(victim);
    ASSERT_TRUE(blob.ok()) << blob.status();
    EXPECT_TRUE(SameBytes(**blob, e));
  }
}

// Pointers that a damaged or hostile database could hold are clean DataLoss
// errors naming the expert (never a crash, a huge allocation or a read of
// another record), and the expert is dropped.
TEST(ExtentStoreTest, HostilePointersAreCleanErrors) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  const SyntheticExpert e = MakeExpert(64, 96, 9);
  const ExpertId id{kFp, 1, 0};
  ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
  const SyntheticExpert f = MakeExpert(64, 96, 10);
  ASSERT_TRUE(store->Put(ExpertId{kFp, 1, 1}, f.layout, f.gate, f.up, f.down).ok());
  const uint64_t record = kHeaderBytes + e.layout.payload_bytes();

  // value: the pointer, given the extent file's size when it is written.
  struct Case {
    const char* what;
    std::function<std::string(uint64_t)> value;
    const char* says;
  };
  auto pointer = [&](uint32_t file, uint64_t offset, uint64_t length) {
    ExtentPointer p;
    p.file = file;
    p.offset = offset;
    p.length = length;
    return EncodeExtentPointer(p);
  };
  std::string bad_version = pointer(0, 0, record);
  bad_version[4] = 7;
  std::string reserved = pointer(0, 0, record);
  reserved[13] = 1;
  auto fixed = [](std::string v) { return [v](uint64_t) { return v; }; };
  const std::vector<Case> cases = {
      {"offset beyond the file",
       [&](uint64_t size) { return pointer(0, size + (uint64_t{1} << 30), record); },
       "beyond the end"},
      {"record running past the end",
       [&](uint64_t size) { return pointer(0, size - 4096, record); }, "beyond the end"},
      {"absurd length", fixed(pointer(0, 0, uint64_t{1} << 60)), "length"},
      {"zero length", fixed(pointer(0, 0, 0)), "length"},
      {"unaligned offset", fixed(pointer(0, 100, record)), "multiple of"},
      {"missing file", fixed(pointer(999, 0, record)), "missing"},
      {"another record (header mismatch)",
       fixed(pointer(0, (record + 4095) / 4096 * 4096, record)), "layer 1 expert 0"},
      {"bad version", fixed(bad_version), "version"},
      {"reserved bits", fixed(reserved), "reserved"},
      {"header checksum", fixed(pointer(0, 0, record)), "does not match its pointer"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok()) << c.what;
    const uint64_t size = std::filesystem::file_size(ExtentPath(dir.path()));
    ASSERT_TRUE(store->PutRawValueForTesting(id, c.value(size)).ok());
    const uint64_t failures = store->checksum_failures();
    absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(id);
    EXPECT_EQ(blob.status().code(), absl::StatusCode::kDataLoss) << c.what << ": " << blob.status();
    EXPECT_NE(blob.status().message().find(c.says), std::string::npos)
        << c.what << ": " << blob.status();
    EXPECT_EQ(store->checksum_failures(), failures + 1) << c.what;
    EXPECT_FALSE(*store->Contains(id)) << c.what;
  }
  absl::StatusOr<std::unique_ptr<ExpertBlob>> other = store->Get(ExpertId{kFp, 1, 1});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(SameBytes(**other, f));
}

// A store written in the legacy layout (values in RocksDB) opens and serves
// with extent files on; experts added then go to extents; a store holding
// both is read whole in either mode, and VerifyAll finds nothing to drop.
TEST(ExtentStoreTest, LegacyStoresOpenAndServeBothLayouts) {
  TempDir dir;
  const SyntheticExpert old_expert = MakeExpert(64, 96, 11);
  const SyntheticExpert new_expert = MakeExpert(64, 96, 12);
  const ExpertId old_id{kFp, 0, 0};
  const ExpertId new_id{kFp, 0, 1};
  {
    auto store = OpenStore(dir.path(), StoreSetup{/*extent_files=*/false});
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put(old_id, old_expert.layout, old_expert.gate, old_expert.up,
                           old_expert.down).ok());
  }
  EXPECT_EQ(std::filesystem::file_size(ExtentPath(dir.path())), 0u);
  {
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put(new_id, new_expert.layout, new_expert.gate, new_expert.up,
                           new_expert.down).ok());
    // Storing the legacy expert's bytes again is a no-op, not a second copy.
    ASSERT_TRUE(store->Put(old_id, old_expert.layout, old_expert.gate, old_expert.up,
                           old_expert.down).ok());
  }
  EXPECT_GT(std::filesystem::file_size(ExtentPath(dir.path())), 0u);
  for (bool extent_files : {true, false}) {
    auto store = OpenStore(dir.path(), StoreSetup{extent_files});
    ASSERT_NE(store, nullptr);
    std::vector<absl::StatusOr<std::unique_ptr<ExpertBlob>>> got =
        store->GetMany(std::vector<ExpertId>{old_id, new_id});
    ASSERT_TRUE(got[0].ok()) << got[0].status();
    ASSERT_TRUE(got[1].ok()) << got[1].status();
    EXPECT_TRUE(SameBytes(**got[0], old_expert));
    EXPECT_TRUE(SameBytes(**got[1], new_expert));
    absl::StatusOr<int64_t> dropped = store->VerifyAll();
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    EXPECT_EQ(*dropped, 0);
    EXPECT_EQ(store->experts_stored(), 2u);
  }
}

// A writer killed (SIGKILL) at an arbitrary point while storing experts
// loses none it acknowledged: each acknowledgement reaches the parent only
// after Put returned OK, and after the kill the store opens and every
// acknowledged expert reads back intact; appending resumes past whatever the
// kill left half-written.
TEST(ExtentStoreTest, KillDuringWritesLosesNothingAcknowledged) {
  TempDir dir;
  const SyntheticExpert e = MakeExpert(128, 200, 13);  // ~300 KiB: a write takes a while
  int next_expert = 0;
  std::vector<ExpertId> all_acked;  // over every round
  for (int kill_after : {3, 11, 26}) {
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    const int first = next_expert;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(pipe_fds[0]);
      ExpertStore::Options options;
      options.data_dir = dir.path();
      absl::StatusOr<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(options);
      if (!store.ok()) ::_exit(2);
      for (int32_t x = first;; ++x) {
        if (!(*store)->Put(ExpertId{kFp, 0, x}, e.layout, e.gate, e.up, e.down).ok()) ::_exit(3);
        if (::write(pipe_fds[1], &x, sizeof(x)) != sizeof(x)) ::_exit(4);
      }
    }
    ::close(pipe_fds[1]);
    std::vector<int32_t> acked;
    int32_t x = 0;
    while (static_cast<int>(acked.size()) < kill_after &&
           ::read(pipe_fds[0], &x, sizeof(x)) == sizeof(x)) {
      acked.push_back(x);
    }
    ASSERT_EQ(static_cast<int>(acked.size()), kill_after) << "the writer died on its own";
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited " << WEXITSTATUS(status);
    while (::read(pipe_fds[0], &x, sizeof(x)) == sizeof(x)) acked.push_back(x);  // sent before
    ::close(pipe_fds[0]);

    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    for (int32_t a : acked) all_acked.push_back(ExpertId{kFp, 0, a});
    const std::vector<ExpertId>& ids = all_acked;
    std::vector<absl::StatusOr<std::unique_ptr<ExpertBlob>>> got = store->GetMany(ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << "acknowledged expert " << ids[i].expert << ": " << got[i].status();
      EXPECT_TRUE(SameBytes(**got[i], e)) << ids[i].expert;
    }
    EXPECT_EQ(store->checksum_failures(), 0u);
    // Appending resumes after what the kill left.
    const SyntheticExpert probe = MakeExpert(128, 200, 14);
    ASSERT_TRUE(store->Put(ExpertId{kFp, 1, kill_after}, probe.layout, probe.gate, probe.up,
                           probe.down).ok());
    absl::StatusOr<std::unique_ptr<ExpertBlob>> back = store->Get(ExpertId{kFp, 1, kill_after});
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(SameBytes(**back, probe));
    next_expert = acked.back() + 1000;  // past any expert stored but not acknowledged
  }
}

}  // namespace
}  // namespace colibri::expert_node
