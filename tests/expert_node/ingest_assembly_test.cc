// IngestAssembly on a store, no server: chunks in, durable experts out;
// malformed streams refused, buffering bounded, stored experts immutable.
#include "expert_node/ingest_assembly.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"
#include "tests/expert_node/node_fixture.h"
#include "tests/expert_node/node_test_client.h"

namespace colibri::expert_node {
namespace {

using testing::BytesOfExpert;
using testing::IngestChunksOf;
using testing::LocalOutputs;
using testing::NodeParts;
using testing::OpenNodeParts;

// Adds `chunks` to `stream`, storing each expert once complete; the first
// error, or End's status.
absl::Status Feed(IngestAssembly::Stream* stream, const std::vector<v1::IngestChunk>& chunks,
                  v1::IngestReply* reply) {
  for (const v1::IngestChunk& chunk : chunks) {
    if (absl::Status s = stream->Add(chunk); !s.ok()) return s;
    if (stream->expert_complete()) {
      if (absl::Status s = stream->Store(reply); !s.ok()) return s;
    }
  }
  return stream->End();
}

// A header chunk carrying all of `bytes` as expert (layer, expert) with the
// shapes of `shape_of` but gate type `gate_type`, and the xxh64 of exactly
// these bytes (so only the store's immutability can refuse it).
v1::IngestChunk WholeExpert(const std::string& fingerprint, int layer, int expert,
                            const moe::ExpertWeights& shape_of, const std::string& bytes,
                            uint32_t gate_type) {
  v1::IngestChunk h;
  h.mutable_key()->set_model_fingerprint(fingerprint);
  h.mutable_key()->set_layer(layer);
  h.mutable_key()->set_expert(expert);
  for (auto [m, t] :
       {std::pair{&shape_of.gate, h.mutable_gate()}, std::pair{&shape_of.up, h.mutable_up()},
        std::pair{&shape_of.down, h.mutable_down()}}) {
    t->set_ggml_type(static_cast<uint32_t>(m->type));
    t->add_dims(m->cols);
    t->add_dims(m->rows);
  }
  h.mutable_gate()->set_ggml_type(gate_type);
  h.set_total_bytes(bytes.size());
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  h.set_xxh64(PayloadChecksum(absl::Span<const uint8_t>(p, bytes.size()), {}, {}));
  h.set_data(bytes);
  return h;
}

class IngestAssemblyTest : public testing::TinyNodeTest {
 protected:
  IngestAssembly MakeAssembly(uint64_t max_buffer_bytes = uint64_t{1} << 30) {
    IngestAssembly::Options options;
    options.max_buffer_bytes = max_buffer_bytes;
    return IngestAssembly(options, parts_.store.get(), parts_.registry.get());
  }
};

TEST_F(IngestAssemblyTest, ChunksBecomeDurableExpertsThatCompute) {
  const arch::ModelConfig& config = m_.model->config();
  IngestAssembly assembly = MakeAssembly();
  std::unique_ptr<IngestAssembly::Stream> stream = assembly.OpenStream();
  v1::IngestReply reply;
  std::vector<v1::IngestChunk> chunks;
  for (int l = 0; l < config.n_layer; ++l) {
    for (int e = 0; e < config.n_expert; ++e) {
      for (v1::IngestChunk& c : IngestChunksOf(*m_.model, m_.fingerprint, l, e, 1000)) {
        chunks.push_back(std::move(c));
      }
    }
  }
  ASSERT_TRUE(Feed(stream.get(), chunks, &reply).ok());
  EXPECT_EQ(reply.stored_size(), config.n_layer * config.n_expert);
  EXPECT_EQ(parts_.store->experts_stored(), static_cast<uint64_t>(reply.stored_size()));
  EXPECT_EQ(assembly.buffered_bytes(), 0u);
  absl::StatusOr<ModelInfo> model = parts_.registry->Find(m_.fingerprint);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->n_layer, config.n_layer);
  const v1::ComputeLayerRequest request =
      testing::RandomRequest(*m_.model, m_.fingerprint, 1, 5, 2, 7);
  v1::ComputeLayerReply computed;
  ASSERT_TRUE(parts_.compute->Compute(request, &computed).ok());
  testing::ExpectBitwiseEqual(computed, LocalOutputs(*m_.model, request), request.routes_size(),
                              config.n_embd);
}

TEST_F(IngestAssemblyTest, MalformedStreamsAreRefusedAndStoreNothing) {
  const moe::ExpertWeights& w = m_.model->experts()[0][0];
  auto header = [&] {
    v1::IngestChunk h =
        WholeExpert(m_.fingerprint, 0, 0, w, "", static_cast<uint32_t>(w.gate.type));
    h.clear_data();
    h.set_total_bytes(w.bytes());
    h.set_xxh64(0);
    return h;
  };
  IngestAssembly assembly = MakeAssembly();
  auto run = [&](const std::vector<v1::IngestChunk>& chunks) {
    v1::IngestReply reply;
    return Feed(assembly.OpenStream().get(), chunks, &reply).code();
  };
  const std::string zeros(w.bytes(), '\0');
  {
    v1::IngestChunk h = header();
    h.set_data(zeros);  // xxh64 0 does not match
    EXPECT_EQ(run({h}), absl::StatusCode::kDataLoss);
  }
  {
    v1::IngestChunk h = header();
    h.set_total_bytes(w.bytes() + 1);
    EXPECT_EQ(run({h}), absl::StatusCode::kInvalidArgument);
  }
  {
    v1::IngestChunk data;
    *data.mutable_key() = header().key();
    data.set_data("abc");
    EXPECT_EQ(run({data}), absl::StatusCode::kInvalidArgument);
  }
  {
    v1::IngestChunk h = header();
    h.mutable_gate()->set_ggml_type(99);
    EXPECT_EQ(run({h}), absl::StatusCode::kInvalidArgument);
  }
  {
    v1::IngestChunk h = header();
    h.set_data(zeros.substr(0, 10));  // the stream ends inside the expert
    EXPECT_EQ(run({h}), absl::StatusCode::kInvalidArgument);
  }
  {
    v1::IngestChunk h = header();
    h.set_offset(5);
    h.set_data("x");
    EXPECT_EQ(run({h}), absl::StatusCode::kInvalidArgument);
  }
  {
    v1::IngestChunk h = header();
    EXPECT_EQ(run({h, h}), absl::StatusCode::kInvalidArgument);  // a header mid-expert
  }
  EXPECT_EQ(parts_.store->experts_stored(), 0u);
  EXPECT_EQ(assembly.buffered_bytes(), 0u);
}

// All streams together hold at most max_buffer_bytes; beyond, the expert is
// refused (ResourceExhausted, counted); a released stream gives its share back.
TEST_F(IngestAssemblyTest, BufferingIsBoundedAcrossStreams) {
  const moe::ExpertWeights& w = m_.model->experts()[0][0];
  const std::string bytes = BytesOfExpert(w);
  IngestAssembly assembly = MakeAssembly(bytes.size() * 3 / 2);
  auto start_of = [&](int expert) {
    v1::IngestChunk h =
        WholeExpert(m_.fingerprint, 0, expert, w, bytes, static_cast<uint32_t>(w.gate.type));
    h.set_data(bytes.substr(0, 16));  // then the stream stalls
    return h;
  };
  std::unique_ptr<IngestAssembly::Stream> a = assembly.OpenStream();
  ASSERT_TRUE(a->Add(start_of(0)).ok());
  EXPECT_EQ(assembly.buffered_bytes(), bytes.size());
  std::unique_ptr<IngestAssembly::Stream> b = assembly.OpenStream();
  const absl::Status refused = b->Add(start_of(1));
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_EQ(assembly.refused(), 1u);
  EXPECT_TRUE(absl::IsInvalidArgument(a->End()));
  a.reset();
  EXPECT_EQ(assembly.buffered_bytes(), 0u);
  v1::IngestReply reply;
  EXPECT_TRUE(
      Feed(assembly.OpenStream().get(), IngestChunksOf(*m_.model, m_.fingerprint, 0, 1), &reply)
          .ok());
  EXPECT_EQ(reply.stored_size(), 1);
}

// Replacement bytes (with their own valid xxh64) or another tensor type for a
// stored expert are refused; the same bytes again are acknowledged; the store
// keeps the original bytes and their hash.
TEST_F(IngestAssemblyTest, StoredExpertsCannotBePoisoned) {
  testing::ImportAll(m_, &parts_);
  const moe::ExpertWeights& w = m_.model->experts()[0][3];
  const uint32_t type = static_cast<uint32_t>(w.gate.type);
  IngestAssembly assembly = MakeAssembly();
  auto ingest = [&](const std::string& bytes, uint32_t gate_type) {
    v1::IngestReply reply;
    return Feed(assembly.OpenStream().get(),
                {WholeExpert(m_.fingerprint, 0, 3, w, bytes, gate_type)}, &reply);
  };
  std::string poison = BytesOfExpert(w);
  for (size_t i = 0; i < poison.size(); i += 4) poison[i] ^= 0x40;
  const absl::Status s = ingest(poison, type);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_FALSE(ingest(BytesOfExpert(w), static_cast<uint32_t>(ops::TensorType::kF16)).ok());
  EXPECT_TRUE(ingest(BytesOfExpert(w), type).ok());

  { NodeParts closed = std::move(parts_); }
  NodeParts disk_only = OpenNodeParts(dir_.path(), 0);  // no RAM tier: read the disk
  ASSERT_NE(disk_only.compute, nullptr);
  const v1::ComputeLayerRequest request =
      testing::RequestFor(*m_.model, m_.fingerprint, 0, {3}, 2, 5);
  v1::ComputeLayerReply reply;
  ASSERT_TRUE(disk_only.compute->Compute(request, &reply).ok());
  testing::ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                              m_.model->config().n_embd);
  auto hashed = disk_only.store->ListHashed(m_.fingerprint);
  ASSERT_TRUE(hashed.ok()) << hashed.status();
  const std::string bytes = BytesOfExpert(w);
  const uint64_t expected = PayloadChecksum(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), {},
      {});
  bool found = false;
  for (const ExpertStore::HashedExpert& e : hashed->at(m_.fingerprint).at(0)) {
    if (e.expert != 3) continue;
    found = true;
    EXPECT_EQ(e.xxh64, expected);
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace colibri::expert_node
