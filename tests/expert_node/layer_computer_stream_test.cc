// LayerComputer streams behind the disk: the resident experts of a request
// are computed while its misses are read, each miss as it lands; the reply is
// bitwise the non-streamed one whatever the order the reads land in, and a
// failed read fails the request with the expert named and nothing in the
// reply.
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "expert_node/layer_computer.h"
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

std::vector<int32_t> DistinctExperts(const v1::ComputeLayerRequest& request) {
  std::set<int32_t> distinct;
  for (const auto& route : request.routes()) distinct.insert(route.expert());
  return {distinct.begin(), distinct.end()};
}

// Makes `experts` of `layer` resident in `tier` (handles dropped at once).
void MakeResident(RamTier* tier, const std::string& fingerprint, int layer,
                  const std::vector<int32_t>& experts) {
  for (const int32_t e : experts) ASSERT_TRUE(tier->Acquire(ExpertId{fingerprint, layer, e}).ok());
}

// No RAM tier in parts_: each test builds its own over the store, with a
// loader that holds reads.
class StreamTest : public testing::TinyNodeTest {
 protected:
  StreamTest() : TinyNodeTest(0) {}
};

// One miss's read is held until the request has computed its resident
// experts: the first part computed is the residents, before the held read
// has returned (were compute to wait for every read, the held read would
// give up after its safety timeout, land first, and the test fail).
TEST_F(StreamTest, ResidentExpertsAreComputedWhileAMissIsRead) {
  testing::ImportAll(m_, &parts_);
  const v1::ComputeLayerRequest request =
      testing::RandomRequest(*m_.model, m_.fingerprint, 1, 6, m_.model->config().n_expert_used, 3);
  const std::vector<int32_t> experts = DistinctExperts(request);
  ASSERT_GE(experts.size(), 3u);
  const int32_t held = experts[1];
  std::vector<int32_t> residents;
  for (const int32_t e : experts) {
    if (e != held) residents.push_back(e);
  }

  absl::Notification release;
  absl::Mutex mu;
  bool held_returned = false;
  ExpertStore* store = parts_.store.get();
  RamTier tier(RamTier::Options(), [&](const ExpertId& id) {
    if (id.layer == 1 && id.expert == held) {
      release.WaitForNotificationWithTimeout(absl::Seconds(20));  // a safety net only
      absl::MutexLock lock(&mu);
      held_returned = true;
    }
    return store->Get(id);
  });
  MakeResident(&tier, m_.fingerprint, 1, residents);

  struct Part {
    std::vector<int32_t> experts;
    bool held_returned;
  };
  std::vector<Part> parts;
  LayerComputer::Options options;
  options.threads = 2;
  options.on_part_computed = [&](int32_t layer, const std::vector<int32_t>& part) {
    EXPECT_EQ(layer, 1);
    {
      absl::MutexLock lock(&mu);
      parts.push_back(Part{part, held_returned});
    }
    if (!release.HasBeenNotified()) release.Notify();
  };
  LayerComputer compute(options, parts_.registry.get(), &tier, nullptr);
  v1::ComputeLayerReply reply;
  ASSERT_TRUE(compute.Compute(request, &reply).ok());

  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].experts, residents);
  EXPECT_FALSE(parts[0].held_returned) << "residents computed only after every read";
  EXPECT_EQ(parts[1].experts, std::vector<int32_t>{held});
  EXPECT_EQ(compute.counters().overlapped_experts, residents.size());
  EXPECT_EQ(compute.counters().disk_wait_micros, static_cast<uint64_t>(reply.disk_wait_micros()));
  EXPECT_EQ(reply.ram_hits(), static_cast<int32_t>(residents.size()));
  EXPECT_EQ(reply.ram_misses(), 1);
  ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                     m_.model->config().n_embd);
}

// A failed read fails the request (the expert named) while the residents are
// computed, and leaves the reply untouched; the next request computes.
TEST_F(StreamTest, AFailedReadFailsTheRequestCleanly) {
  testing::ImportAll(m_, &parts_);
  const v1::ComputeLayerRequest request =
      testing::RandomRequest(*m_.model, m_.fingerprint, 0, 6, m_.model->config().n_expert_used, 5);
  const std::vector<int32_t> experts = DistinctExperts(request);
  ASSERT_GE(experts.size(), 2u);
  const int32_t bad = experts.back();
  ExpertStore* store = parts_.store.get();
  bool fail = true;
  RamTier tier(RamTier::Options(),
               [&](const ExpertId& id) -> absl::StatusOr<std::unique_ptr<ExpertBlob>> {
                 if (fail && id.expert == bad)
                   return absl::DataLossError(ToString(id) + ": damaged");
                 return store->Get(id);
               });
  MakeResident(&tier, m_.fingerprint, 0, {experts.front()});
  LayerComputer::Options options;
  options.threads = 2;
  LayerComputer compute(options, parts_.registry.get(), &tier, nullptr);
  v1::ComputeLayerReply reply;
  const absl::Status s = compute.Compute(request, &reply);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find(ToString(ExpertId{m_.fingerprint, 0, bad})), std::string::npos) << s;
  EXPECT_FALSE(reply.has_outputs());
  EXPECT_EQ(reply.ram_hits() + reply.ram_misses(), 0);
  EXPECT_EQ(compute.counters().requests, 0u);
  EXPECT_EQ(tier.counters().pinned_experts, 0u);
  fail = false;
  ASSERT_TRUE(compute.Compute(request, &reply).ok());
  ExpectBitwiseEqual(reply, LocalOutputs(*m_.model, request), request.routes_size(),
                     m_.model->config().n_embd);
}

class StreamMatchesLocalTest : public ::testing::TestWithParam<const char*> {};

// For several seeds and miss patterns (which experts are resident, the order
// the reads land in), on both paths, reduced or not: the streamed reply is
// bitwise the one computed without streaming and the coordinator's.
TEST_P(StreamMatchesLocalTest, BitwiseWhateverTheMissesAndTheirOrder) {
  std::string skip;
  LoadedModel m = testing::OpenFixture(GetParam(), &skip);
  if (m.model == nullptr) GTEST_SKIP() << skip;
  testing::TempDir dir;
  NodeParts parts = testing::OpenNodeParts(dir.path(), 0);
  ASSERT_NE(parts.compute, nullptr);
  testing::ImportAll(m, &parts);
  const arch::ModelConfig& config = m.model->config();
  const int layer = config.n_layer - 1;

  for (uint32_t seed = 1; seed <= 6; ++seed) {
    v1::ComputeLayerRequest request =
        testing::RandomRequest(*m.model, m.fingerprint, layer, 5, config.n_expert_used, seed);
    request.set_reduce_per_token(seed % 2 == 0);
    request.set_path(seed % 3 == 0 ? v1::NUMERIC_PATH_EXACT : v1::NUMERIC_PATH_FAST);
    std::vector<int32_t> experts = DistinctExperts(request);
    std::mt19937 rng(seed);
    std::shuffle(experts.begin(), experts.end(), rng);
    // Seed 1: every expert missing; otherwise a random share resident.
    const size_t n_resident = seed == 1 ? 0 : rng() % experts.size();
    const std::vector<int32_t> residents(experts.begin(), experts.begin() + n_resident);
    // The misses land one at a time, in the shuffled order: each read waits
    // for its turn (all are in flight together: a loader per expert).
    const std::vector<int32_t> order(experts.begin() + n_resident, experts.end());
    struct Turns {
      absl::Mutex mu;
      size_t landed = 0;  // misses read so far
    } turns;
    ExpertStore* store = parts.store.get();
    RamTier tier(RamTier::Options(), [&](const ExpertId& id) {
      const auto at = std::find(order.begin(), order.end(), id.expert);
      if (id.layer != layer || at == order.end()) return store->Get(id);
      struct Wait {
        Turns* turns;
        size_t mine;
      } wait{&turns, static_cast<size_t>(at - order.begin())};
      absl::MutexLock lock(&turns.mu);
      turns.mu.AwaitWithTimeout(
          absl::Condition(
              +[](Wait* w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->turns->landed == w->mine; },
              &wait),
          absl::Seconds(20));  // a safety net only
      ++turns.landed;
      return store->Get(id);  // under the lock: the next read starts after this one
    });
    MakeResident(&tier, m.fingerprint, layer, residents);
    LayerComputer::Options options;
    options.threads = 2;
    options.miss_loaders = config.n_expert;
    LayerComputer streamed(options, parts.registry.get(), &tier, nullptr);
    v1::ComputeLayerReply reply;
    ASSERT_TRUE(streamed.Compute(request, &reply).ok()) << "seed " << seed;
    EXPECT_EQ(reply.ram_misses(), static_cast<int32_t>(order.size())) << "seed " << seed;

    options.miss_loaders = 0;  // every expert looked up as compute asks: no parts
    LayerComputer whole(options, parts.registry.get(), parts.tier.get(), nullptr);
    v1::ComputeLayerReply whole_reply;
    ASSERT_TRUE(whole.Compute(request, &whole_reply).ok()) << "seed " << seed;
    EXPECT_EQ(reply.outputs().data(), whole_reply.outputs().data()) << "seed " << seed;
    const int64_t rows = request.reduce_per_token() ? 5 : request.routes_size();
    ExpectBitwiseEqual(reply, LocalOutputs(*m.model, request), rows, config.n_embd);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamMatchesLocalTest,
                         ::testing::Values("qwen3moe-tiny-f32.gguf", "mixtral-tiny-q4_k_m.gguf",
                                           "qwen2moe-tiny-q8_0.gguf"));

}  // namespace
}  // namespace colibri::expert_node
