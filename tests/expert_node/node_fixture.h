// What the expert node's tests share: the fixture models, the node's domain
// classes without a server (NodeParts), an in-process NodeServer, and checks
// of ComputeLayer outputs against the coordinator's local computation.
#ifndef COLIBRI_TESTS_EXPERT_NODE_NODE_FIXTURE_H_
#define COLIBRI_TESTS_EXPERT_NODE_NODE_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "colibri/v1/expert.grpc.pb.h"
#include "expert_node/expert_import.h"
#include "expert_node/expert_store.h"
#include "expert_node/layer_computer.h"
#include "expert_node/model_registry.h"
#include "expert_node/node_server.h"
#include "expert_node/ram_tier.h"
#include "gtest/gtest.h"
#include "model/arch/model.h"
#include "tests/expert_node/expert_test_util.h"

namespace colibri::expert_node::testing {

struct LoadedModel {
  std::unique_ptr<arch::Model> model;
  std::string fingerprint;
  std::string path;
};

// Opens a fixture model (models/<name>), or sets *skip when the fixtures are
// absent.
LoadedModel OpenFixture(const std::string& name, std::string* skip);

// The prefetch rule's cost in the tiers below: low enough that a fresh
// node's prior hint precision (0.5) passes it, so hints are loaded.
inline constexpr double kTestPrefetchCost = 0.25;

// The node's domain over a store in `data_dir`, no gRPC: what a test builds
// the class under test on.
struct NodeParts {
  std::unique_ptr<ExpertStore> store;
  std::unique_ptr<RamTier> tier;  // a RAM budget of ram_budget bytes over the store
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<ExpertImporter> importer;
  std::unique_ptr<LayerComputer> compute;  // 2 threads, no usage counting
};
// Fails the test (and returns parts with nulls) when the store cannot open.
NodeParts OpenNodeParts(const std::string& data_dir, uint64_t ram_budget = 64 << 20);

// Imports every expert of `m` into `parts` (fails the test otherwise).
void ImportAll(const LoadedModel& m, NodeParts* parts);

// A node serving on 127.0.0.1:0 with node id "test-node" and 2 compute
// threads; null (test failed) when it cannot start.
std::unique_ptr<NodeServer> StartNode(const std::string& data_dir, const std::string& token = "",
                                      uint64_t ram_budget = 64 << 20, uint64_t pin_budget = 0);

// ComputeLayer over a stub.
grpc::Status Compute(v1::ExpertService::Stub* stub, const v1::ComputeLayerRequest& request,
                     v1::ComputeLayerReply* reply, const std::string& token = "");
v1::InventoryReply GetInventory(v1::ExpertService::Stub* stub);
v1::NodeStatsReply GetStats(v1::ExpertService::Stub* stub);

// Expects the reply's outputs to be F32 [rows, n_embd] and bitwise `expected`.
void ExpectBitwiseEqual(const v1::ComputeLayerReply& reply, const std::vector<float>& expected,
                        int64_t rows, int64_t n_embd);

// gate | up | down of an expert, as they are in the GGUF.
std::string BytesOfExpert(const moe::ExpertWeights& w);
// The bytes the RAM tier charges for it.
uint64_t RamBytesOf(const moe::ExpertWeights& w);

v1::ExpertKey Key(const std::string& fingerprint, int layer, int expert);

// A request of n_tokens tokens, token t routed to experts[t % size] alone.
v1::ComputeLayerRequest RequestFor(const arch::Model& model, const std::string& fingerprint,
                                   int layer, const std::vector<int>& experts, int n_tokens,
                                   uint32_t seed);

// A test on the tiny Qwen3-MoE fixture (skipped when the fixtures are
// absent), with a temporary folder.
class TinyModelTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // A request of 4 tokens on `layer`, each routed to 2 experts.
  v1::ComputeLayerRequest Valid(int layer = 0) const;

  LoadedModel m_;
  TempDir dir_;
};

// TinyModelTest with the node's domain over a store in dir_ (parts_), a RAM
// tier of ram_budget bytes, nothing stored yet.
class TinyNodeTest : public TinyModelTest {
 protected:
  explicit TinyNodeTest(uint64_t ram_budget = 64 << 20) : ram_budget_(ram_budget) {}
  void SetUp() override;

  const uint64_t ram_budget_;
  NodeParts parts_;
};

}  // namespace colibri::expert_node::testing

#endif  // COLIBRI_TESTS_EXPERT_NODE_NODE_FIXTURE_H_
