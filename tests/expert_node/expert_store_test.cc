#include "expert_node/expert_store.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node {
namespace {

using testing::MakeExpert;
using testing::SyntheticExpert;
using testing::TempDir;

constexpr char kFp[] = "0123456789abcdef0123456789abcdef";

std::unique_ptr<ExpertStore> OpenStore(const std::string& dir, bool extent_files = true) {
  ExpertStore::Options options;
  options.data_dir = dir;
  options.extent_files = extent_files;
  absl::StatusOr<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

void ExpectSameBytes(const ExpertBlob& blob, const SyntheticExpert& e) {
  const moe::ExpertWeights& w = blob.weights();
  ASSERT_EQ(w.gate.rows * w.gate.row_bytes, e.gate.size());
  EXPECT_EQ(std::memcmp(w.gate.data, e.gate.data(), e.gate.size()), 0);
  EXPECT_EQ(std::memcmp(w.up.data, e.up.data(), e.up.size()), 0);
  EXPECT_EQ(std::memcmp(w.down.data, e.down.data(), e.down.size()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.gate.data) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.up.data) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.down.data) % 64, 0u);
}

TEST(ExpertStoreTest, PutGetRoundTrip) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  const SyntheticExpert e = MakeExpert(16, 24, 1);
  const ExpertId id{kFp, 3, 7};
  ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(id);
  ASSERT_TRUE(blob.ok()) << blob.status();
  ExpectSameBytes(**blob, e);
  EXPECT_EQ((*blob)->weights().n_embd(), 16);
  EXPECT_EQ((*blob)->weights().n_ff(), 24);
  EXPECT_EQ(store->experts_stored(), 1u);
  EXPECT_EQ(store->payload_bytes_stored(), e.layout.payload_bytes());

  EXPECT_EQ(store->Get(ExpertId{kFp, 3, 8}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(*store->Contains(id));
  EXPECT_FALSE(*store->Contains(ExpertId{kFp, 4, 7}));
}

TEST(ExpertStoreTest, GetTakesBuffersFromThePoolAndGivesThemBack) {
  TempDir dir;
  ExpertStore::Options options;
  options.data_dir = dir.path();
  options.buffer_pool = BlobBufferPool::Create(BlobBufferPool::Options{});
  absl::StatusOr<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  // [n_ff 2048][n_embd 64] F32: large enough for a mapped buffer.
  const SyntheticExpert a = MakeExpert(64, 2048, 1);
  const SyntheticExpert b = MakeExpert(64, 2048, 2);
  ASSERT_TRUE((*store)->Put(ExpertId{kFp, 0, 1}, a.layout, a.gate, a.up, a.down).ok());
  ASSERT_TRUE((*store)->Put(ExpertId{kFp, 0, 2}, b.layout, b.gate, b.up, b.down).ok());
  const uint8_t* first = nullptr;
  {
    absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = (*store)->Get(ExpertId{kFp, 0, 1});
    ASSERT_TRUE(blob.ok()) << blob.status();
    ExpectSameBytes(**blob, a);
    first = (*blob)->weights().gate.data;
  }
  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = (*store)->Get(ExpertId{kFp, 0, 2});
  ASSERT_TRUE(blob.ok()) << blob.status();
  ExpectSameBytes(**blob, b);
  EXPECT_EQ((*blob)->weights().gate.data, first);
  const BlobBufferPool::Counters c = (*store)->buffer_pool()->counters();
  EXPECT_EQ(c.allocations, 1u);
  EXPECT_EQ(c.reuses, 1u);
}

TEST(ExpertStoreTest, PutRejectsInconsistentInput) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  SyntheticExpert e = MakeExpert(16, 24, 2);
  ExpertLayout bad = e.layout;
  bad.down.rows = 15;  // not an FFN
  EXPECT_EQ(store->Put(ExpertId{kFp, 0, 0}, bad, e.gate, e.up, e.down).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Put(ExpertId{"bad/fp", 0, 0}, e.layout, e.gate, e.up, e.down).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->experts_stored(), 0u);
}

TEST(ExpertStoreTest, EverythingSurvivesReopen) {
  TempDir dir;
  std::vector<SyntheticExpert> experts;
  {
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutModel(kFp, ModelInfo{4, 8, 16}).ok());
    for (int l = 0; l < 4; ++l) {
      for (int x = 0; x < 8; x += 3) {
        experts.push_back(MakeExpert(16, 32, l * 8 + x));
        const SyntheticExpert& e = experts.back();
        ASSERT_TRUE(store->Put(ExpertId{kFp, l, x}, e.layout, e.gate, e.up, e.down).ok());
      }
    }
  }
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->experts_stored(), experts.size());
  auto models = store->ListModels();
  ASSERT_TRUE(models.ok());
  ASSERT_EQ(models->count(kFp), 1u);
  EXPECT_EQ(models->at(kFp).n_layer, 4);
  EXPECT_EQ(models->at(kFp).n_expert, 8);
  EXPECT_EQ(models->at(kFp).n_embd, 16);
  auto inventory = store->List(kFp);
  ASSERT_TRUE(inventory.ok());
  ASSERT_EQ(inventory->size(), 1u);
  const ExpertStore::Inventory& layers = inventory->at(kFp);
  ASSERT_EQ(layers.size(), 4u);
  for (const auto& [layer, ids] : layers) EXPECT_EQ(ids, (std::vector<int32_t>{0, 3, 6}));
  size_t i = 0;
  for (int l = 0; l < 4; ++l) {
    for (int x = 0; x < 8; x += 3) {
      auto blob = store->Get(ExpertId{kFp, l, x});
      ASSERT_TRUE(blob.ok()) << blob.status();
      ExpectSameBytes(**blob, experts[i++]);
    }
  }
}

TEST(ExpertStoreTest, CorruptValueIsDroppedAndReported) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  const SyntheticExpert e = MakeExpert(16, 24, 3);
  const ExpertId id{kFp, 1, 2};
  const ExpertId other{kFp, 1, 3};
  ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
  ASSERT_TRUE(store->Put(other, e.layout, e.gate, e.up, e.down).ok());

  // The same value with one payload bit flipped.
  std::string value = EncodeHeader(id.layer, id.expert, e.layout);
  value.append(reinterpret_cast<const char*>(e.gate.data()), e.gate.size());
  value.append(reinterpret_cast<const char*>(e.up.data()), e.up.size());
  value.append(reinterpret_cast<const char*>(e.down.data()), e.down.size());
  value[kHeaderBytes + 100] ^= 0x10;
  ASSERT_TRUE(store->PutRawValueForTesting(id, value).ok());

  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(id);
  EXPECT_EQ(blob.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store->checksum_failures(), 1u);
  EXPECT_FALSE(*store->Contains(id));
  EXPECT_EQ(store->Get(id).status().code(), absl::StatusCode::kNotFound);
  auto inventory = store->List(kFp);
  ASSERT_TRUE(inventory.ok());
  EXPECT_EQ(inventory->at(kFp).at(1), (std::vector<int32_t>{3}));
  EXPECT_EQ(store->experts_stored(), 1u);
  EXPECT_TRUE(store->Get(other).ok());
}

// Flips one byte in the middle of every file of `dir` whose name ends with
// `suffix`; returns how many files it damaged.
int FlipByteInFiles(const std::string& dir, const std::string& suffix, double where = 0.5) {
  int damaged = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(entry.file_size());
    if (!f || size == 0) continue;
    const std::streamoff at = static_cast<std::streamoff>(size * where);
    char c = 0;
    f.seekg(at);
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(at);
    f.write(&c, 1);
    ++damaged;
  }
  return damaged;
}

// A byte flipped on disk inside a blob file of the legacy layout: RocksDB's
// own checksum catches it. The expert is counted, dropped and reported as
// DataLoss; the others stay readable. (Extent records: extent_store_test.)
TEST(ExpertStoreTest, DamagedBlobFileIsCountedAndDropped) {
  TempDir dir;
  const SyntheticExpert e = MakeExpert(64, 128, 5);
  const ExpertId victim{kFp, 0, 0};
  {
    auto store = OpenStore(dir.path(), /*extent_files=*/false);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put(victim, e.layout, e.gate, e.up, e.down).ok());
  }
  const SyntheticExpert other_expert = MakeExpert(64, 128, 6);
  const ExpertId other{kFp, 0, 1};
  {
    // Reopening flushes the first expert into its own blob file.
    auto store = OpenStore(dir.path(), /*extent_files=*/false);
    ASSERT_NE(store, nullptr);
    ASSERT_EQ(FlipByteInFiles(dir.path(), ".blob"), 1);
    ASSERT_TRUE(
        store
            ->Put(other, other_expert.layout, other_expert.gate, other_expert.up, other_expert.down)
            .ok());
  }
  auto store = OpenStore(dir.path(), /*extent_files=*/false);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(victim);
  EXPECT_EQ(blob.status().code(), absl::StatusCode::kDataLoss) << blob.status();
  EXPECT_NE(blob.status().message().find("layer 0 expert 0"), std::string::npos) << blob.status();
  EXPECT_EQ(store->checksum_failures(), 1u);
  EXPECT_FALSE(*store->Contains(victim));
  EXPECT_EQ(store->experts_stored(), 1u);
  absl::StatusOr<std::unique_ptr<ExpertBlob>> good = store->Get(other);
  ASSERT_TRUE(good.ok()) << good.status();
  ExpectSameBytes(**good, other_expert);
  // Healed by storing it again.
  ASSERT_TRUE(store->Put(victim, e.layout, e.gate, e.up, e.down).ok());
  blob = store->Get(victim);
  ASSERT_TRUE(blob.ok()) << blob.status();
  ExpectSameBytes(**blob, e);
}

// Other bytes, another type or another width for a
// stored expert are refused; the stored bytes stay, also after a reopen.
TEST(ExpertStoreTest, StoredExpertsAreImmutable) {
  TempDir dir;
  const SyntheticExpert e = MakeExpert(16, 24, 3);
  const ExpertId id{kFp, 1, 2};
  {
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
    // The same bytes again: fine, nothing changes.
    ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
    EXPECT_EQ(store->experts_stored(), 1u);

    const SyntheticExpert other = MakeExpert(16, 24, 4);  // same shape, other bytes
    absl::Status s = store->Put(id, other.layout, other.gate, other.up, other.down);
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
    const SyntheticExpert wider = MakeExpert(32, 24, 5);  // another width
    s = store->Put(id, wider.layout, wider.gate, wider.up, wider.down);
    EXPECT_NE(s.code(), absl::StatusCode::kOk);
    EXPECT_EQ(store->checksum_failures(), 0u);
  }
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(id);
  ASSERT_TRUE(blob.ok()) << blob.status();
  ExpectSameBytes(**blob, e);
  EXPECT_EQ(store->experts_stored(), 1u);
  EXPECT_EQ(store->payload_bytes_stored(), e.layout.payload_bytes());
}

// Every expert of a layer has the layer's types and shapes.
TEST(ExpertStoreTest, ALayersExpertsShareOneLayout) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  const SyntheticExpert e = MakeExpert(16, 24, 3);
  ASSERT_TRUE(store->Put(ExpertId{kFp, 0, 0}, e.layout, e.gate, e.up, e.down).ok());
  const SyntheticExpert wider = MakeExpert(32, 24, 5);
  const SyntheticExpert longer = MakeExpert(16, 48, 6);
  for (const SyntheticExpert* bad : {&wider, &longer}) {
    absl::Status s = store->Put(ExpertId{kFp, 0, 1}, bad->layout, bad->gate, bad->up, bad->down);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  }
  // Another type: the same bytes declared F16 (twice the elements per row).
  SyntheticExpert f16 = MakeExpert(16, 24, 7);
  for (TensorLayout* t : {&f16.layout.gate, &f16.layout.up, &f16.layout.down}) {
    t->type = ops::TensorType::kF16;
    t->cols *= 2;
  }
  f16.layout.gate.cols = f16.layout.up.cols = 32;
  f16.layout.down.cols = 48;
  f16.layout.down.rows = 16;
  EXPECT_NE(store->Put(ExpertId{kFp, 0, 2}, f16.layout, f16.gate, f16.up, f16.down).code(),
            absl::StatusCode::kOk);
  // Another layer may differ (a GGUF may quantize layers differently).
  ASSERT_TRUE(store->Put(ExpertId{kFp, 1, 0}, wider.layout, wider.gate, wider.up, wider.down).ok());
  ASSERT_TRUE(store->Put(ExpertId{kFp, 0, 3}, e.layout, e.gate, e.up, e.down).ok());
  EXPECT_EQ(store->experts_stored(), 3u);
}

// A damaged stored copy does not block healing: the new bytes replace it.
TEST(ExpertStoreTest, ADamagedStoredCopyIsReplaced) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  const SyntheticExpert e = MakeExpert(16, 24, 3);
  const ExpertId id{kFp, 1, 2};
  ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
  std::string value = EncodeHeader(id.layer, id.expert, e.layout);
  value.append(e.layout.payload_bytes(), 'z');
  ASSERT_TRUE(store->PutRawValueForTesting(id, value).ok());
  ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
  EXPECT_EQ(store->checksum_failures(), 1u);
  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(id);
  ASSERT_TRUE(blob.ok()) << blob.status();
  ExpectSameBytes(**blob, e);
  EXPECT_EQ(store->experts_stored(), 1u);
}

// Write observers run once per expert written: a new one and a damaged copy
// replaced, not the same bytes again nor a refused Put, and not after they
// were removed.
TEST(ExpertStoreTest, WriteObserversSeeEveryExpertWritten) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  int calls = 0, other_calls = 0;
  ExpertId last;
  const int id1 = store->AddWriteObserver([&](const ExpertId& written) {
    ++calls;
    last = written;
  });
  const int id2 = store->AddWriteObserver([&](const ExpertId&) { ++other_calls; });
  EXPECT_NE(id1, id2);
  const SyntheticExpert e = MakeExpert(16, 24, 3);
  const ExpertId id{kFp, 1, 2};
  ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(last == id);
  ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());  // nothing written
  EXPECT_EQ(calls, 1);
  const SyntheticExpert other = MakeExpert(16, 24, 4);
  EXPECT_FALSE(store->Put(id, other.layout, other.gate, other.up, other.down).ok());
  EXPECT_EQ(calls, 1);
  std::string value = EncodeHeader(id.layer, id.expert, e.layout);
  value.append(e.layout.payload_bytes(), 'z');
  ASSERT_TRUE(store->PutRawValueForTesting(id, value).ok());
  ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());  // replaces the damage
  EXPECT_EQ(calls, 2);
  store->RemoveWriteObserver(id1);
  ASSERT_TRUE(store->Put(ExpertId{kFp, 1, 3}, e.layout, e.gate, e.up, e.down).ok());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(other_calls, 3);
}

// A store of `n` experts in layer 0, flushed into SST and blob files.
std::vector<SyntheticExpert> FillStore(const std::string& dir, int n) {
  std::vector<SyntheticExpert> experts;
  {
    auto store = OpenStore(dir);
    EXPECT_NE(store, nullptr);
    if (store == nullptr) return experts;
    for (int x = 0; x < n; ++x) {
      experts.push_back(MakeExpert(64, 128, 100 + x));
      const SyntheticExpert& e = experts.back();
      EXPECT_TRUE(store->Put(ExpertId{kFp, 0, x}, e.layout, e.gate, e.up, e.down).ok());
    }
  }
  OpenStore(dir);  // reopening flushes the WAL into SST and blob files
  return experts;
}

// A damaged MANIFEST, CURRENT or SST left the node
// unable to start with no way forward. Open names the damage and the ways
// forward; --repair's Repair + VerifyAll or --reset-store's ResetStore get a
// store that opens, keeps only verified experts and loses nothing else.
TEST(ExpertStoreTest, ADamagedStoreSaysSoAndCanBeRepairedOrReset) {
  struct Case {
    const char* name;
    const char* suffix;  // of the file damaged
    double where;        // where in it
  };
  for (const Case& c :
       {Case{"CURRENT", "CURRENT", 0.0}, Case{"MANIFEST", "", 0.5}, Case{"SST", ".sst", 0.3}}) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    const std::vector<SyntheticExpert> experts = FillStore(dir.path(), 4);
    { std::ofstream(dir.path() + "/NODE_ID") << "node-a\n"; }
    int damaged = 0;
    if (std::string(c.name) == "MANIFEST") {
      for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("MANIFEST-", 0) == 0) {
          std::filesystem::resize_file(entry.path(), entry.file_size() / 2);
          ++damaged;
        }
      }
    } else {
      damaged = FlipByteInFiles(dir.path(), c.suffix, c.where);
    }
    ASSERT_GT(damaged, 0);

    ExpertStore::Options options;
    options.data_dir = dir.path();
    {
      absl::StatusOr<std::unique_ptr<ExpertStore>> opened = ExpertStore::Open(options);
      if (!opened.ok()) {
        EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss) << opened.status();
        EXPECT_NE(opened.status().message().find("--repair"), std::string::npos);
        EXPECT_NE(opened.status().message().find("--reset-store"), std::string::npos);
      }
    }

    // --repair: what opens afterwards holds only experts that verify.
    {
      absl::Status repaired = ExpertStore::Repair(dir.path());
      if (repaired.ok()) {
        absl::StatusOr<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(options);
        if (store.ok()) {
          ASSERT_TRUE((*store)->VerifyAll().ok());
          auto inventory = (*store)->List(kFp);
          ASSERT_TRUE(inventory.ok());
          for (const auto& [fp, layers] : *inventory) {
            for (const auto& [layer, ids] : layers) {
              for (int32_t x : ids) {
                absl::StatusOr<std::unique_ptr<ExpertBlob>> blob =
                    (*store)->Get(ExpertId{kFp, layer, x});
                ASSERT_TRUE(blob.ok()) << blob.status();
                ExpectSameBytes(**blob, experts[x]);
              }
            }
          }
        }
      }
    }
    // --reset-store: always a way forward; the old store is kept aside.
    absl::StatusOr<std::string> aside = ExpertStore::ResetStore(dir.path());
    ASSERT_TRUE(aside.ok()) << aside.status();
    EXPECT_TRUE(std::filesystem::is_directory(*aside));
    EXPECT_FALSE(std::filesystem::is_empty(*aside));
    std::ifstream id(dir.path() + "/NODE_ID");
    std::string node_id;
    id >> node_id;
    EXPECT_EQ(node_id, "node-a");
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->experts_stored(), 0u);
    const SyntheticExpert& e = experts[0];
    ASSERT_TRUE(store->Put(ExpertId{kFp, 0, 0}, e.layout, e.gate, e.up, e.down).ok());
    std::error_code ec;
    std::filesystem::remove_all(*aside, ec);
  }
}

TEST(ExpertStoreTest, DamagedHeadersNeverCrash) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  const SyntheticExpert e = MakeExpert(8, 8, 4);
  const std::string good = EncodeHeader(0, 0, e.layout);
  std::mt19937 rng(42);
  std::vector<std::string> values = {"", "x", std::string(kHeaderBytes - 1, '\0'),
                                     std::string(kHeaderBytes, '\0'), good /* no payload */};
  for (int i = 0; i < 200; ++i) {
    std::string v = good + std::string(e.layout.payload_bytes(), 'a');
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) v[rng() % kHeaderBytes] = static_cast<char>(rng());
    values.push_back(v);
  }
  int i = 0;
  for (const std::string& v : values) {
    const ExpertId id{kFp, 0, i++};
    ASSERT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
    ASSERT_TRUE(store->PutRawValueForTesting(id, v).ok());
    absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(id);
    EXPECT_EQ(blob.status().code(), absl::StatusCode::kDataLoss) << "value " << i;
  }
  EXPECT_EQ(store->experts_stored(), 0u);
}

TEST(ExpertRecordTest, DecodeHeaderRejectsGarbage) {
  std::mt19937 rng(7);
  const SyntheticExpert e = MakeExpert(8, 8, 5);
  const std::string good = EncodeHeader(2, 5, e.layout);
  ASSERT_TRUE(DecodeHeader(good, 2, 5).ok());
  EXPECT_FALSE(DecodeHeader(good, 2, 6).ok());
  for (int i = 0; i < 2000; ++i) {
    std::string v = good;
    v[rng() % v.size()] = static_cast<char>(rng());
    absl::StatusOr<ExpertLayout> layout = DecodeHeader(v, 2, 5);
    if (!layout.ok()) {
      EXPECT_EQ(layout.status().code(), absl::StatusCode::kDataLoss);
    }
  }
  for (int n = 0; n < 200; ++n) {
    std::string v(n, '\0');
    for (char& c : v) c = static_cast<char>(rng());
    (void)DecodeHeader(v, 0, 0);
    (void)DecodeModelInfo(v);
    (void)ParseExpertKey(v);
  }
}

TEST(ExpertRecordTest, KeysRoundTrip) {
  const ExpertId id{kFp, 12, 345};
  EXPECT_EQ(ExpertValueKey(id), std::string("x/") + kFp + "/00012/00345");
  absl::StatusOr<ExpertId> parsed = ParseExpertKey(ExpertIndexKey(id));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, id);
  EXPECT_FALSE(ParseExpertKey("i/fp/1/2").ok());
  EXPECT_FALSE(ParseExpertKey("m/fp").ok());
}

}  // namespace
}  // namespace colibri::expert_node
