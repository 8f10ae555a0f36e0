// Version 2 expert records (per-expert biases and the clamped SwiGLU of
// gpt-oss) and the compatibility of version 1: the encodings are written out
// here byte by byte from the format in expert_record.h, not by the encoder.
#include <rocksdb/db.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "expert_node/expert_record.h"
#include "expert_node/expert_store.h"
#include "gtest/gtest.h"
#include "model/moe/expert_ffn.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node {
namespace {

using testing::MakeExpert;
using testing::SyntheticExpert;
using testing::TempDir;

constexpr char kFp[] = "0123456789abcdef0123456789abcdef";

void U32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void U64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void F32(std::string* out, float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  U32(out, v);
}

// The version 1 header, field by field.
std::string HandMadeV1Header(int32_t layer, int32_t expert, const ExpertLayout& l) {
  std::string h;
  U32(&h, 0x45584C43);  // "CLXE"
  U32(&h, 1);
  U32(&h, static_cast<uint32_t>(layer));
  U32(&h, static_cast<uint32_t>(expert));
  for (const TensorLayout* t : {&l.gate, &l.up, &l.down}) {
    U32(&h, static_cast<uint32_t>(t->type));
    U32(&h, 0);
    U64(&h, static_cast<uint64_t>(t->rows));
    U64(&h, static_cast<uint64_t>(t->cols));
    U64(&h, t->bytes);
  }
  U64(&h, l.xxh64);
  return h;
}

// A gpt-oss-like F32 expert: biases on gate, up and down, clamped SwiGLU.
struct BiasedExpert {
  SyntheticExpert e;
  std::vector<float> gate_bias, up_bias, down_bias;
  std::string bias_bytes;  // gate|up|down biases, little-endian f32

  absl::Span<const uint8_t> biases() const {
    return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bias_bytes.data()),
                                     bias_bytes.size());
  }
  // The weights computed from the source vectors (not from any record).
  moe::ExpertWeights Weights() const {
    moe::ExpertWeights w;
    auto m = [](const TensorLayout& t, const std::vector<uint8_t>& bytes) {
      return ops::WeightMatrix{t.type, bytes.data(), t.rows, t.cols,
                               static_cast<size_t>(t.cols) * 4};
    };
    w.gate = m(e.layout.gate, e.gate);
    w.up = m(e.layout.up, e.up);
    w.down = m(e.layout.down, e.down);
    w.gate_bias = gate_bias.data();
    w.up_bias = up_bias.data();
    w.down_bias = down_bias.data();
    w.activation = moe::Activation::kSwigluOai;
    return w;
  }
};

BiasedExpert MakeBiasedExpert(int64_t n_embd, int64_t n_ff, uint32_t seed) {
  BiasedExpert b;
  b.e = MakeExpert(n_embd, n_ff, seed);
  std::mt19937 rng(seed + 100);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (auto [v, n] : {std::pair{&b.gate_bias, n_ff}, {&b.up_bias, n_ff}, {&b.down_bias, n_embd}}) {
    v->resize(n);
    for (float& x : *v) x = dist(rng);
    for (float x : *v) F32(&b.bias_bytes, x);
  }
  b.e.layout.gate_bias = b.e.layout.up_bias = b.e.layout.down_bias = true;
  b.e.layout.activation = moe::Activation::kSwigluOai;
  b.e.layout.alpha = 1.702f;
  b.e.layout.limit = 7.0f;
  b.e.layout.xxh64 = PayloadChecksum(b.e.gate, b.e.up, b.e.down, b.biases());
  return b;
}

std::vector<float> Ffn(const moe::ExpertWeights& w, const std::vector<float>& x, int64_t n,
                       ops::NumericPath path) {
  ThreadPool pool(2);
  moe::ExpertFfnScratch scratch;
  std::vector<float> out(static_cast<size_t>(n * w.n_embd()));
  moe::ExpertFfn(w, x.data(), n, out.data(), path, &pool, &scratch);
  return out;
}

std::vector<float> Inputs(int64_t n, int64_t n_embd) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);  // large enough to reach the clamp
  std::vector<float> x(static_cast<size_t>(n * n_embd));
  for (float& v : x) v = dist(rng);
  return x;
}

std::unique_ptr<ExpertStore> OpenStore(const std::string& dir) {
  ExpertStore::Options options;
  options.data_dir = dir;
  absl::StatusOr<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

TEST(ExpertRecordV2Test, PlainExpertsKeepTheirVersion1Bytes) {
  const SyntheticExpert e = MakeExpert(16, 24, 1);
  const std::string header = EncodeHeader(3, 7, e.layout);
  EXPECT_EQ(header, HandMadeV1Header(3, 7, e.layout));
  EXPECT_EQ(header.size(), kHeaderBytes);
}

TEST(ExpertRecordV2Test, TheVersion2HeaderHasTheDocumentedBytes) {
  const BiasedExpert b = MakeBiasedExpert(16, 24, 2);
  std::string expected = HandMadeV1Header(1, 4, b.e.layout);
  expected[4] = 2;    // version
  U32(&expected, 1);  // clamped SwiGLU
  F32(&expected, 1.702f);
  F32(&expected, 7.0f);
  U32(&expected, 7);  // gate, up and down biases
  const std::string header = EncodeHeader(1, 4, b.e.layout);
  EXPECT_EQ(header, expected);
  EXPECT_EQ(header.size(), kHeaderBytesV2);
  absl::StatusOr<ExpertLayout> back = DecodeHeader(header, 1, 4);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->gate_bias && back->up_bias && back->down_bias);
  EXPECT_EQ(back->activation, moe::Activation::kSwigluOai);
  EXPECT_EQ(back->alpha, 1.702f);
  EXPECT_EQ(back->limit, 7.0f);
  EXPECT_EQ(back->payload_bytes(), b.e.layout.matrix_bytes() + 4 * (24 + 24 + 16));

  // Only a down bias: bit 2 alone, SiLU.
  ExpertLayout down_only = MakeExpert(16, 24, 3).layout;
  down_only.down_bias = true;
  const std::string h = EncodeHeader(0, 0, down_only);
  ASSERT_EQ(h.size(), kHeaderBytesV2);
  EXPECT_EQ(h.substr(120), std::string("\0\0\0\0\0\0\0\0\0\0\0\0\4\0\0\0", 16));
  EXPECT_EQ(DecodeHeader(h, 0, 0)->bias_bytes(), 16u * 4);
}

TEST(ExpertRecordV2Test, MalformedVersion2HeadersAreDataLoss) {
  const BiasedExpert b = MakeBiasedExpert(8, 8, 4);
  const std::string good = EncodeHeader(0, 0, b.e.layout);
  auto with = [&](size_t at, const std::string& bytes) {
    std::string v = good;
    v.replace(at, bytes.size(), bytes);
    return v;
  };
  auto le = [](uint32_t v) {
    std::string s;
    U32(&s, v);
    return s;
  };
  auto f32 = [](float f) {
    std::string s;
    F32(&s, f);
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"short", good.substr(0, kHeaderBytesV2 - 1)},
      {"nothing of version 2", with(120, le(0) + f32(0) + f32(0) + le(0))},
      {"unknown activation", with(120, le(2))},
      {"unknown bias bit", with(132, le(8))},
      {"SiLU with parameters", with(120, le(0))},
      {"negative alpha", with(124, f32(-1.702f))},
      {"zero limit", with(128, f32(0.0f))},
      {"NaN alpha", with(124, f32(std::nanf("")))},
      {"infinite limit", with(128, f32(INFINITY))},
      {"version 3", with(4, le(3))},
  };
  for (const auto& [what, v] : bad) {
    absl::StatusOr<ExpertLayout> layout = DecodeHeader(v, 0, 0);
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kDataLoss) << what;
  }
  // A version 1 header whose version says 2 is too short for version 2.
  std::string v1 = EncodeHeader(0, 0, MakeExpert(8, 8, 5).layout);
  v1[4] = 2;
  EXPECT_EQ(DecodeHeader(v1, 0, 0).status().code(), absl::StatusCode::kDataLoss);
}

// The store keeps the biases and the activation, and what a node computes
// from the stored expert is bitwise what the weights give, on both paths.
TEST(ExpertRecordV2Test, BiasesAndActivationSurviveTheStore) {
  TempDir dir;
  const BiasedExpert b = MakeBiasedExpert(32, 64, 6);
  const ExpertId id{kFp, 2, 9};
  {
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put(id, b.e.layout, b.e.gate, b.e.up, b.e.down, b.biases()).ok());
    // The same bytes again are accepted; other biases are not.
    EXPECT_TRUE(store->Put(id, b.e.layout, b.e.gate, b.e.up, b.e.down, b.biases()).ok());
    BiasedExpert other = b;
    other.bias_bytes[0] ^= 1;
    other.e.layout.xxh64 = PayloadChecksum(b.e.gate, b.e.up, b.e.down, other.biases());
    EXPECT_EQ(store->Put(id, other.e.layout, b.e.gate, b.e.up, b.e.down, other.biases()).code(),
              absl::StatusCode::kAlreadyExists);
    // The biases must have the size the layout says.
    EXPECT_EQ(store
                  ->Put(ExpertId{kFp, 2, 10}, b.e.layout, b.e.gate, b.e.up, b.e.down,
                        b.biases().subspan(4))
                  .code(),
              absl::StatusCode::kInvalidArgument);
    // A layer's experts all have the same biases and activation.
    const SyntheticExpert plain = MakeExpert(32, 64, 7);
    EXPECT_EQ(
        store->Put(ExpertId{kFp, 2, 11}, plain.layout, plain.gate, plain.up, plain.down).code(),
        absl::StatusCode::kFailedPrecondition);
  }
  auto store = OpenStore(dir.path());  // reopened: read back from disk
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->payload_bytes_stored(), b.e.layout.payload_bytes());
  absl::StatusOr<uint64_t> ram = store->RamBytes(id);
  ASSERT_TRUE(ram.ok()) << ram.status();
  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(id);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ((*blob)->size_bytes(), *ram);
  const moe::ExpertWeights& w = (*blob)->weights();
  ASSERT_NE(w.gate_bias, nullptr);
  ASSERT_NE(w.up_bias, nullptr);
  ASSERT_NE(w.down_bias, nullptr);
  EXPECT_EQ(std::memcmp(w.gate_bias, b.gate_bias.data(), 64 * 4), 0);
  EXPECT_EQ(std::memcmp(w.up_bias, b.up_bias.data(), 64 * 4), 0);
  EXPECT_EQ(std::memcmp(w.down_bias, b.down_bias.data(), 32 * 4), 0);
  EXPECT_EQ(w.activation, moe::Activation::kSwigluOai);
  EXPECT_EQ(w.swiglu_alpha, 1.702f);
  EXPECT_EQ(w.swiglu_limit, 7.0f);

  const std::vector<float> x = Inputs(5, 32);
  for (ops::NumericPath path : {ops::NumericPath::kExact, ops::NumericPath::kFast}) {
    const std::vector<float> want = Ffn(b.Weights(), x, 5, path);
    const std::vector<float> got = Ffn(w, x, 5, path);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0);
    // The biases matter: without them the output differs.
    moe::ExpertWeights no_bias = b.Weights();
    no_bias.down_bias = nullptr;
    EXPECT_NE(Ffn(no_bias, x, 5, path), want);
  }
}

// A store written before version 2 existed: its records are put into RocksDB
// directly, in the version 1 format, and the store opens, lists and serves
// them (with SiLU, no biases).
TEST(ExpertRecordV2Test, AVersion1StoreStillOpensAndServes) {
  TempDir dir;
  const SyntheticExpert e = MakeExpert(16, 24, 8);
  const ExpertId id{kFp, 1, 3};
  const std::string header = HandMadeV1Header(id.layer, id.expert, e.layout);
  {
    // Create the store's database with the store's own options, then write
    // the version 1 records beside it.
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
  }
  {
    rocksdb::Options options;
    options.enable_blob_files = true;
    options.min_blob_size = 4096;
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(options, dir.path(), &raw);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string value = header;
    value.append(e.gate.begin(), e.gate.end());
    value.append(e.up.begin(), e.up.end());
    value.append(e.down.begin(), e.down.end());
    const std::string key_tail = std::string(kFp) + "/00001/00003";
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "x/" + key_tail, value).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "i/" + key_tail, header).ok());
    ASSERT_TRUE(db->Close().ok());
  }
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->experts_stored(), 1u);
  auto listed = store->ListHashed(kFp);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ((*listed)[kFp][1].size(), 1u);
  EXPECT_EQ((*listed)[kFp][1][0].expert, 3);
  EXPECT_EQ((*listed)[kFp][1][0].xxh64, e.layout.xxh64);
  absl::StatusOr<std::unique_ptr<ExpertBlob>> blob = store->Get(id);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const moe::ExpertWeights& w = (*blob)->weights();
  EXPECT_FALSE(w.has_bias());
  EXPECT_EQ(w.activation, moe::Activation::kSilu);
  EXPECT_EQ(std::memcmp(w.down.data, e.down.data(), e.down.size()), 0);
  // Offering the same expert again is recognised as already stored.
  EXPECT_TRUE(store->Put(id, e.layout, e.gate, e.up, e.down).ok());
  EXPECT_EQ(store->experts_stored(), 1u);
}

}  // namespace
}  // namespace colibri::expert_node
