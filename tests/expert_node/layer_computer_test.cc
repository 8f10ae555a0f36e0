// LayerComputer on a store, no server: outputs bitwise the coordinator's on
// every fixture model and numeric path; malformed requests refused with the
// field named; a damaged stored expert reported, dropped and replaceable.
#include "expert_node/layer_computer.h"

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"
#include "tests/expert_node/node_fixture.h"
#include "tests/expert_node/node_test_client.h"

namespace colibri::expert_node {
namespace {

using testing::ExpectBitwiseEqual;
using testing::LoadedModel;
using testing::LocalOutputs;
using testing::NodeParts;
using testing::OpenFixture;
using testing::OpenNodeParts;
using testing::RandomRequest;
using testing::TempDir;

class ComputeMatchesLocalTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ComputeMatchesLocalTest, BitwiseEqualOnBothPaths) {
  std::string skip;
  LoadedModel m = OpenFixture(GetParam(), &skip);
  if (m.model == nullptr) GTEST_SKIP() << skip;
  TempDir dir;
  NodeParts parts = OpenNodeParts(dir.path());
  ASSERT_NE(parts.compute, nullptr);
  testing::ImportAll(m, &parts);
  const arch::ModelConfig& config = m.model->config();

  uint32_t seed = 1;
  for (v1::NumericPath path :
       {v1::NUMERIC_PATH_EXACT, v1::NUMERIC_PATH_FAST, v1::NUMERIC_PATH_UNSPECIFIED}) {
    for (int layer = 0; layer < config.n_layer; ++layer) {
      for (bool reduce : {false, true}) {
        v1::ComputeLayerRequest request =
            RandomRequest(*m.model, m.fingerprint, layer, 7, config.n_expert_used, seed++);
        request.set_path(path);
        request.set_reduce_per_token(reduce);
        v1::ComputeLayerReply reply;
        const absl::Status s = parts.compute->Compute(request, &reply);
        ASSERT_TRUE(s.ok()) << s;
        ExpectBitwiseEqual(reply, LocalOutputs(*m.model, request),
                           reduce ? 7 : request.routes_size(), config.n_embd);
      }
    }
  }
  // The path reaches the kernels: quantized weights give (slightly) different
  // bits on the two paths; float32 weights keep float32 activations on both.
  v1::ComputeLayerRequest request =
      RandomRequest(*m.model, m.fingerprint, 0, 3, config.n_expert_used, 1234);
  v1::ComputeLayerReply exact, fast;
  request.set_path(v1::NUMERIC_PATH_EXACT);
  ASSERT_TRUE(parts.compute->Compute(request, &exact).ok());
  request.set_path(v1::NUMERIC_PATH_FAST);
  ASSERT_TRUE(parts.compute->Compute(request, &fast).ok());
  const ops::TensorType type = m.model->experts()[0][0].gate.type;
  const bool float_weights = type == ops::TensorType::kF32 || type == ops::TensorType::kF16 ||
                             type == ops::TensorType::kBF16;
  EXPECT_EQ(exact.outputs().data() == fast.outputs().data(), float_weights);
  const LayerComputer::Counters counters = parts.compute->counters();
  EXPECT_EQ(counters.requests, static_cast<uint64_t>(3 * config.n_layer * 2 + 2));
  EXPECT_EQ(counters.in_flight, 0);
  EXPECT_EQ(parts.compute->seconds().snapshot().count, counters.requests);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ComputeMatchesLocalTest,
                         ::testing::Values("qwen3moe-tiny-f32.gguf", "mixtral-tiny-q4_k_m.gguf",
                                           "qwen2moe-tiny-q8_0.gguf", "olmoe-tiny-f16.gguf"));

// No RAM tier: every compute reads the store.
class LayerComputerTest : public testing::TinyNodeTest {
 protected:
  LayerComputerTest() : TinyNodeTest(0) {}
};

TEST_F(LayerComputerTest, MalformedRequestsAreRefusedAndTheNextOneComputes) {
  const arch::ModelConfig& config = m_.model->config();
  // Every expert but layer 0 expert 0.
  v1::ImportRequest most;
  most.set_gguf_path(m_.path);
  for (int l = 0; l < config.n_layer; ++l) {
    for (int e = 0; e < config.n_expert; ++e) {
      if (l != 0 || e != 0) *most.add_experts() = testing::Key(m_.fingerprint, l, e);
    }
  }
  v1::ImportReply imported;
  ASSERT_TRUE(parts_.importer->Import(most, &imported).ok());

  struct Case {
    const char* name;
    std::function<void(v1::ComputeLayerRequest*)> damage;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"unknown fingerprint", [](auto* r) { r->set_model_fingerprint("00ff"); },
       absl::StatusCode::kNotFound},
      {"bad fingerprint", [](auto* r) { r->set_model_fingerprint("../x"); },
       absl::StatusCode::kNotFound},
      {"layer out of range", [&](auto* r) { r->set_layer(config.n_layer); },
       absl::StatusCode::kInvalidArgument},
      {"negative layer", [](auto* r) { r->set_layer(-1); }, absl::StatusCode::kInvalidArgument},
      {"expert out of range", [&](auto* r) { r->mutable_routes(1)->set_expert(config.n_expert); },
       absl::StatusCode::kInvalidArgument},
      {"expert not held",
       [](auto* r) {
         r->set_layer(0);
         r->mutable_routes(0)->set_expert(0);
       },
       absl::StatusCode::kNotFound},
      {"wrong dtype", [](auto* r) { r->mutable_hidden()->set_dtype(v1::DTYPE_F16); },
       absl::StatusCode::kInvalidArgument},
      {"wrong byte count", [](auto* r) { r->mutable_hidden()->mutable_data()->pop_back(); },
       absl::StatusCode::kInvalidArgument},
      {"wrong width", [](auto* r) { r->mutable_hidden()->set_shape(1, 3); },
       absl::StatusCode::kInvalidArgument},
      {"one-dim shape", [](auto* r) { r->mutable_hidden()->mutable_shape()->RemoveLast(); },
       absl::StatusCode::kInvalidArgument},
      {"token out of range", [](auto* r) { r->mutable_routes(0)->set_token(4); },
       absl::StatusCode::kInvalidArgument},
      {"negative token", [](auto* r) { r->mutable_routes(0)->set_token(-1); },
       absl::StatusCode::kInvalidArgument},
      {"unknown path", [](auto* r) { r->set_path(static_cast<v1::NumericPath>(17)); },
       absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    v1::ComputeLayerRequest request = Valid(1);
    c.damage(&request);
    v1::ComputeLayerReply reply;
    const absl::Status s = parts_.compute->Compute(request, &reply);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s;
    EXPECT_FALSE(s.message().empty()) << c.name;
    const v1::ComputeLayerRequest good = Valid(1);
    v1::ComputeLayerReply good_reply;
    ASSERT_TRUE(parts_.compute->Compute(good, &good_reply).ok()) << "after " << c.name;
    ExpectBitwiseEqual(good_reply, LocalOutputs(*m_.model, good), good.routes_size(),
                       config.n_embd);
  }
  // An empty route list is valid and yields no rows.
  v1::ComputeLayerRequest empty = Valid(1);
  empty.clear_routes();
  v1::ComputeLayerReply empty_reply;
  ASSERT_TRUE(parts_.compute->Compute(empty, &empty_reply).ok());
  EXPECT_EQ(empty_reply.outputs().shape(0), 0);
}

// A request whose reply would exceed max_reply_bytes is refused by its shape,
// before any expert is looked up.
TEST_F(LayerComputerTest, AReplyTooLargeIsRefusedByShape) {
  testing::ImportAll(m_, &parts_);
  LayerComputer::Options options;
  options.threads = 1;
  options.max_reply_bytes = 1 << 20;
  LayerComputer compute(options, parts_.registry.get(), parts_.tier.get(), nullptr);
  const int64_t n_embd = m_.model->config().n_embd;
  v1::ComputeLayerRequest request = Valid(0);
  const int64_t routes = (int64_t{1} << 20) / (n_embd * 4) + 1;
  const v1::Route route = request.routes(0);
  request.clear_routes();
  for (int64_t i = 0; i < routes; ++i) *request.add_routes() = route;
  v1::ComputeLayerReply reply;
  const absl::Status s = compute.Compute(request, &reply);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("limit"), std::string::npos) << s;
  EXPECT_EQ(parts_.tier->counters().misses, 0u);  // no expert was even looked up
  request.set_reduce_per_token(true);             // reduced per token it fits
  ASSERT_TRUE(compute.Compute(request, &reply).ok());
}

TEST_F(LayerComputerTest, ADamagedStoredExpertIsReportedDroppedAndReplaceable) {
  testing::ImportAll(m_, &parts_);
  const v1::ComputeLayerRequest request = Valid(0);
  const int victim = request.routes(0).expert();
  const ExpertId id{m_.fingerprint, 0, victim};
  ASSERT_TRUE(parts_.store->PutRawValueForTesting(id, std::string(300, 'z')).ok());
  v1::ComputeLayerReply reply;
  EXPECT_TRUE(absl::IsDataLoss(parts_.compute->Compute(request, &reply)));
  EXPECT_EQ(parts_.store->checksum_failures(), 1u);
  EXPECT_FALSE(*parts_.store->Contains(id));
  EXPECT_TRUE(absl::IsNotFound(parts_.compute->Compute(request, &reply)));
  testing::ImportAll(m_, &parts_);  // puts back what is missing
  ASSERT_TRUE(parts_.compute->Compute(request, &reply).ok());
  ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                     m_.model->config().n_embd);
}

// A request's missing experts are read together: every load of the layer is
// in flight at once (the loader waits until all have arrived, or gives up
// after a while and the test fails), and the outputs stay bitwise the same.
TEST_F(LayerComputerTest, ALayersMissesAreLoadedTogether) {
  testing::ImportAll(m_, &parts_);
  v1::ComputeLayerRequest request =
      testing::RandomRequest(*m_.model, m_.fingerprint, 1, 6, m_.model->config().n_expert_used, 7);
  std::set<int32_t> distinct;
  for (const auto& route : request.routes()) distinct.insert(route.expert());
  ASSERT_GE(distinct.size(), 2u);
  const int want = static_cast<int>(distinct.size());

  struct Loads {
    absl::Mutex mu;
    int in_flight = 0;
    int most = 0;
    int want = 0;
  } loads;
  loads.want = want;
  ExpertStore* store = parts_.store.get();
  RamTier tier(RamTier::Options(), [&](const ExpertId& id) {
    {
      absl::MutexLock lock(&loads.mu);
      loads.most = std::max(loads.most, ++loads.in_flight);
      loads.mu.AwaitWithTimeout(
          absl::Condition(+[](Loads* l) { return l->most >= l->want; }, &loads),
          absl::Seconds(20));
      --loads.in_flight;
    }
    return store->Get(id);
  });
  LayerComputer::Options options;
  options.threads = 2;
  LayerComputer compute(options, parts_.registry.get(), &tier, nullptr);
  v1::ComputeLayerReply reply;
  ASSERT_TRUE(compute.Compute(request, &reply).ok());
  {
    absl::MutexLock lock(&loads.mu);
    EXPECT_EQ(loads.most, want);
  }
  EXPECT_EQ(reply.ram_misses(), want);
  EXPECT_EQ(reply.ram_hits(), 0);
  ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                     m_.model->config().n_embd);
  // Now resident: hits, no loads.
  ASSERT_TRUE(compute.Compute(request, &reply).ok());
  EXPECT_EQ(reply.ram_hits(), want);
  EXPECT_EQ(reply.disk_wait_micros(), 0);
}

}  // namespace
}  // namespace colibri::expert_node
