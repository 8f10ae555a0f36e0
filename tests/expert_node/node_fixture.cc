#include "tests/expert_node/node_fixture.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf_fingerprint.h"
#include "tests/expert_node/node_test_client.h"
#include "tests/support/paths.h"

namespace colibri::expert_node::testing {

LoadedModel OpenFixture(const std::string& name, std::string* skip) {
  LoadedModel m;
  const std::string dir = colibri::testing::FixturesDir();
  if (dir.empty()) {
    *skip = "fixtures dir not found (set COLIBRI_FIXTURES_DIR)";
    return m;
  }
  m.path = dir + "/models/" + name;
  absl::StatusOr<std::unique_ptr<arch::Model>> model = arch::Model::Open(m.path);
  if (!model.ok()) {
    *skip = absl::StrCat("cannot open ", m.path, ": ", model.status().message());
    return m;
  }
  m.model = std::move(*model);
  m.fingerprint = *gguf::ModelFingerprint(m.model->file());
  return m;
}

NodeParts OpenNodeParts(const std::string& data_dir, uint64_t ram_budget) {
  NodeParts parts;
  ExpertStore::Options store_options;
  store_options.data_dir = data_dir;
  absl::StatusOr<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(store_options);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return parts;
  parts.store = std::move(*store);
  ExpertStore* raw_store = parts.store.get();
  RamTier::Options ram;
  ram.budget_bytes = ram_budget;
  ram.prefetch_cost = kTestPrefetchCost;
  parts.tier = std::make_unique<RamTier>(
      ram, [raw_store](const ExpertId& id) { return raw_store->Get(id); },
      [raw_store](const ExpertId& id, const ReadControl* control) {
        return raw_store->Get(id, control);
      });
  absl::StatusOr<std::unique_ptr<ModelRegistry>> registry = ModelRegistry::Load(raw_store);
  EXPECT_TRUE(registry.ok()) << registry.status();
  if (!registry.ok()) return parts;
  parts.registry = std::move(*registry);
  parts.importer =
      std::make_unique<ExpertImporter>(ExpertImporter::Options(), raw_store, parts.registry.get());
  LayerComputer::Options compute;
  compute.threads = 2;
  parts.compute =
      std::make_unique<LayerComputer>(compute, parts.registry.get(), parts.tier.get(), nullptr);
  return parts;
}

void ImportAll(const LoadedModel& m, NodeParts* parts) {
  v1::ImportRequest request;
  request.set_gguf_path(m.path);
  v1::ImportReply reply;
  const absl::Status s = parts->importer->Import(request, &reply);
  EXPECT_TRUE(s.ok()) << s;
}

std::unique_ptr<NodeServer> StartNode(const std::string& data_dir, const std::string& token,
                                      uint64_t ram_budget, uint64_t pin_budget) {
  NodeServer::Options options;
  options.pin_budget_bytes = pin_budget;
  options.listen = "127.0.0.1:0";
  options.store.data_dir = data_dir;
  options.ram.budget_bytes = ram_budget;
  options.ram.prefetch_cost = kTestPrefetchCost;
  options.service.auth_token = token;
  options.service.node_id = "test-node";
  options.service.compute_threads = 2;
  absl::StatusOr<std::unique_ptr<NodeServer>> node = NodeServer::Start(options);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(*node) : nullptr;
}

grpc::Status Compute(v1::ExpertService::Stub* stub, const v1::ComputeLayerRequest& request,
                     v1::ComputeLayerReply* reply, const std::string& token) {
  auto context = MakeContext(token);
  return stub->ComputeLayer(context.get(), request, reply);
}

v1::InventoryReply GetInventory(v1::ExpertService::Stub* stub) {
  v1::InventoryReply inventory;
  auto context = MakeContext();
  EXPECT_TRUE(stub->Inventory(context.get(), v1::InventoryRequest(), &inventory).ok());
  return inventory;
}

v1::NodeStatsReply GetStats(v1::ExpertService::Stub* stub) {
  v1::NodeStatsReply stats;
  auto context = MakeContext();
  EXPECT_TRUE(stub->NodeStats(context.get(), v1::NodeStatsRequest(), &stats).ok());
  return stats;
}

void ExpectBitwiseEqual(const v1::ComputeLayerReply& reply, const std::vector<float>& expected,
                        int64_t rows, int64_t n_embd) {
  ASSERT_EQ(reply.outputs().dtype(), v1::DTYPE_F32);
  ASSERT_EQ(reply.outputs().shape_size(), 2);
  EXPECT_EQ(reply.outputs().shape(0), rows);
  EXPECT_EQ(reply.outputs().shape(1), n_embd);
  ASSERT_EQ(reply.outputs().data().size(), expected.size() * sizeof(float));
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(
      std::memcmp(reply.outputs().data().data(), expected.data(), expected.size() * sizeof(float)),
      0);
}

std::string BytesOfExpert(const moe::ExpertWeights& w) {
  std::string bytes;
  for (const ops::WeightMatrix* m : {&w.gate, &w.up, &w.down}) {
    bytes.append(reinterpret_cast<const char*>(m->data), m->rows * m->row_bytes);
  }
  return bytes;
}

uint64_t RamBytesOf(const moe::ExpertWeights& w) { return ExpertBlob::SizeFor(LayoutOf(w)); }

v1::ExpertKey Key(const std::string& fingerprint, int layer, int expert) {
  v1::ExpertKey key;
  key.set_model_fingerprint(fingerprint);
  key.set_layer(layer);
  key.set_expert(expert);
  return key;
}

v1::ComputeLayerRequest RequestFor(const arch::Model& model, const std::string& fingerprint,
                                   int layer, const std::vector<int>& experts, int n_tokens,
                                   uint32_t seed) {
  v1::ComputeLayerRequest request = RandomRequest(model, fingerprint, layer, n_tokens, 1, seed);
  for (v1::Route& r : *request.mutable_routes()) r.set_expert(experts[r.token() % experts.size()]);
  return request;
}

void TinyModelTest::SetUp() {
  std::string skip;
  m_ = OpenFixture("qwen3moe-tiny-f32.gguf", &skip);
  if (m_.model == nullptr) GTEST_SKIP() << skip;
}

v1::ComputeLayerRequest TinyModelTest::Valid(int layer) const {
  return RandomRequest(*m_.model, m_.fingerprint, layer, 4, 2, 99);
}

void TinyNodeTest::SetUp() {
  TinyModelTest::SetUp();
  if (IsSkipped()) return;
  parts_ = OpenNodeParts(dir_.path(), ram_budget_);
  ASSERT_NE(parts_.compute, nullptr);
}

}  // namespace colibri::expert_node::testing
