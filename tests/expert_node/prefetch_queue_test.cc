// PrefetchQueue over a store and RAM tier, no server: hints load experts into
// RAM, what cannot be loaded is ignored and counted, duplicates coalesce into
// one disk read, and prefetching never changes a computed output.
#include "expert_node/prefetch_queue.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/expert_node/expert_test_util.h"
#include "tests/expert_node/node_fixture.h"
#include "tests/expert_node/node_test_client.h"

namespace colibri::expert_node {
namespace {

using testing::Key;
using testing::NodeParts;
using testing::OpenNodeParts;
using testing::RequestFor;
using testing::TempDir;

// Waits (bounded) until done() holds.
template <typename Done>
void WaitFor(Done done) {
  for (int i = 0; i < 500 && !done(); ++i) absl::SleepFor(absl::Milliseconds(10));
}

class PrefetchQueueTest : public testing::TinyNodeTest {
 protected:
  void SetUp() override {
    TinyNodeTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    OpenQueue();
  }
  void OpenQueue() {
    queue_ = std::make_unique<PrefetchQueue>(PrefetchQueue::Options(), parts_.store.get(),
                                             parts_.tier.get(), parts_.registry.get());
  }

  std::unique_ptr<PrefetchQueue> queue_;  // destroyed first: its loads use the parts
};

TEST_F(PrefetchQueueTest, HintsLoadExpertsIntoRam) {
  testing::ImportAll(m_, &parts_);
  google::protobuf::RepeatedPtrField<v1::ExpertKey> keys;
  for (int e = 0; e < m_.model->config().n_expert; ++e) *keys.Add() = Key(m_.fingerprint, 1, e);
  const int32_t queued = queue_->HintAll(keys);
  EXPECT_EQ(queued, m_.model->config().n_expert);
  WaitFor([&] { return parts_.tier->resident_count() >= static_cast<uint64_t>(queued); });
  EXPECT_EQ(parts_.tier->resident_count(), static_cast<uint64_t>(queued));
  v1::ComputeLayerReply reply;
  ASSERT_TRUE(
      parts_.compute->Compute(RequestFor(*m_.model, m_.fingerprint, 1, {0, 5}, 4, 3), &reply).ok());
  EXPECT_EQ(reply.ram_misses(), 0);
  EXPECT_GT(reply.ram_hits(), 0);
}

// A hint for a resident expert reaches the RAM tier's policy, as the cache
// simulator replays it: of two residents used once each, the adaptive policy
// keeps the hinted one (the least recently used) and a demand load evicts the
// other.
TEST_F(PrefetchQueueTest, AHintForAResidentExpertKeepsItResident) {
  testing::ImportAll(m_, &parts_);
  const ExpertId a{m_.fingerprint, 1, 0}, b{m_.fingerprint, 1, 1}, c{m_.fingerprint, 1, 2};
  const absl::StatusOr<uint64_t> size = parts_.store->RamBytes(a);
  ASSERT_TRUE(size.ok()) << size.status();
  ASSERT_EQ(parts_.store->RamBytes(b).value_or(0), *size);
  ASSERT_EQ(parts_.store->RamBytes(c).value_or(0), *size);
  RamTier::Options options;
  options.budget_bytes = 2 * *size;
  options.policy = CachePolicyKind::kAdaptive;
  ExpertStore* store = parts_.store.get();
  RamTier tier(options, [store](const ExpertId& id) { return store->Get(id); });
  PrefetchQueue queue(PrefetchQueue::Options(), store, &tier, parts_.registry.get());
  ASSERT_TRUE(tier.Acquire(a).ok());
  ASSERT_TRUE(tier.Acquire(b).ok());
  EXPECT_FALSE(queue.Hint(Key(m_.fingerprint, 1, 0)));  // resident: nothing to load
  EXPECT_EQ(queue.counters().resident, 1u);
  ASSERT_TRUE(tier.Acquire(c).ok());
  EXPECT_TRUE(tier.Contains(a)) << "the hinted resident was evicted";
  EXPECT_FALSE(tier.Contains(b));
}

TEST_F(PrefetchQueueTest, HintsForWhatCannotBeLoadedAreIgnoredAndCounted) {
  const arch::ModelConfig& config = m_.model->config();
  v1::ImportRequest most;  // every expert but layer 0 expert 0
  most.set_gguf_path(m_.path);
  for (int l = 0; l < config.n_layer; ++l) {
    for (int e = 0; e < config.n_expert; ++e) {
      if (l != 0 || e != 0) *most.add_experts() = Key(m_.fingerprint, l, e);
    }
  }
  v1::ImportReply imported;
  ASSERT_TRUE(parts_.importer->Import(most, &imported).ok());
  google::protobuf::RepeatedPtrField<v1::ExpertKey> keys;
  *keys.Add() = Key("00ff", 0, 1);                        // unknown model
  *keys.Add() = Key("../x", 0, 1);                        // malformed
  *keys.Add() = Key(m_.fingerprint, config.n_layer, 0);   // layer out of range
  *keys.Add() = Key(m_.fingerprint, 0, config.n_expert);  // expert out of range
  *keys.Add() = Key(m_.fingerprint, -1, 0);               // negative
  *keys.Add() = Key(m_.fingerprint, 0, 0);                // not stored
  EXPECT_EQ(queue_->HintAll(keys), 1);  // only the not-stored one reaches the I/O pool
  WaitFor([&] { return queue_->counters().ignored >= 6; });
  const PrefetchQueue::Counters c = queue_->counters();
  EXPECT_EQ(c.hints, 6u);
  EXPECT_EQ(c.ignored, 6u);
  EXPECT_EQ(c.issued, 1u);
  EXPECT_EQ(c.queue_full, 0u);
  EXPECT_EQ(parts_.tier->counters().prefetch_loaded, 0u);
  EXPECT_FALSE(parts_.tier->Contains(ExpertId{m_.fingerprint, 0, 0}));
}

TEST_F(PrefetchQueueTest, DuplicateHintsCoalesceIntoOneDiskRead) {
  testing::ImportAll(m_, &parts_);
  google::protobuf::RepeatedPtrField<v1::ExpertKey> keys;
  for (int i = 0; i < 10; ++i) *keys.Add() = Key(m_.fingerprint, 1, 2);
  EXPECT_EQ(queue_->HintAll(keys), 1);
  EXPECT_EQ(queue_->HintAll(keys), 0);  // while (or after) it loads
  const ExpertId id{m_.fingerprint, 1, 2};
  WaitFor([&] { return parts_.tier->Contains(id); });
  ASSERT_TRUE(parts_.tier->Contains(id));
  const PrefetchQueue::Counters c = queue_->counters();
  const RamTier::Counters tier = parts_.tier->counters();
  EXPECT_EQ(tier.disk_bytes_read, m_.model->experts()[1][2].bytes());
  EXPECT_EQ(c.hints, 20u);
  EXPECT_EQ(c.issued, 1u);
  EXPECT_EQ(tier.prefetch_loaded, 1u);
  EXPECT_EQ(c.coalesced + c.resident + tier.prefetch_coalesced + tier.prefetch_resident, 19u);
  // The first use is a RAM hit and counts the prefetch as used.
  v1::ComputeLayerReply reply;
  ASSERT_TRUE(
      parts_.compute->Compute(RequestFor(*m_.model, m_.fingerprint, 1, {2}, 3, 6), &reply).ok());
  EXPECT_EQ(reply.ram_misses(), 0);
  EXPECT_EQ(parts_.tier->counters().prefetch_used, 1u);
}

// A RAM tier over the parts' store whose first load waits until Release, and
// a queue with one I/O thread on it: hints queued behind the first wait.
struct HeldQueue {
  explicit HeldQueue(testing::NodeParts* parts)
      : tier(TierOptions(),
             [this, store = parts->store.get()](const ExpertId& id) {
               if (loads.fetch_add(1) == 0) {
                 held.Notify();
                 release.WaitForNotification();
               }
               return store->Get(id);
             }),
        queue(QueueOptions(), parts->store.get(), &tier, parts->registry.get()) {}
  static RamTier::Options TierOptions() {
    RamTier::Options ram;
    ram.prefetch_cost = testing::kTestPrefetchCost;
    return ram;
  }
  static PrefetchQueue::Options QueueOptions() {
    PrefetchQueue::Options options;
    options.io_threads = 1;
    return options;
  }

  absl::Notification held, release;
  std::atomic<int> loads{0};
  RamTier tier;
  PrefetchQueue queue;  // last: destroyed first, while the tier is alive
};

// One I/O thread, held in its first load: the hints queued behind it that a
// layer's request proves wrong (an expert of that layer it does not route
// to, an earlier layer) are dropped unread; the routed one and a later
// layer's are loaded.
TEST_F(PrefetchQueueTest, StaleHintsAreDroppedUnread) {
  testing::ImportAll(m_, &parts_);
  HeldQueue h(&parts_);
  RamTier& tier = h.tier;
  PrefetchQueue& queue = h.queue;
  google::protobuf::RepeatedPtrField<v1::ExpertKey> keys;
  *keys.Add() = Key(m_.fingerprint, 1, 0);  // loading when the request comes
  *keys.Add() = Key(m_.fingerprint, 0, 4);  // an earlier layer: stale
  *keys.Add() = Key(m_.fingerprint, 1, 1);  // not routed: stale
  *keys.Add() = Key(m_.fingerprint, 1, 2);  // routed
  *keys.Add() = Key(m_.fingerprint, 2, 3);  // a later layer
  ASSERT_EQ(queue.HintAll(keys), 5);
  h.held.WaitForNotification();
  queue.LayerRequested(RequestFor(*m_.model, m_.fingerprint, 1, {2}, 2, 5));
  h.release.Notify();
  WaitFor([&] { return tier.counters().prefetch_loaded + queue.counters().stale >= 5; });
  EXPECT_EQ(queue.counters().stale, 2u);
  EXPECT_EQ(h.loads.load(), 3);
  EXPECT_TRUE(tier.Contains(ExpertId{m_.fingerprint, 1, 0}));
  EXPECT_FALSE(tier.Contains(ExpertId{m_.fingerprint, 0, 4}));
  EXPECT_FALSE(tier.Contains(ExpertId{m_.fingerprint, 1, 1}));
  EXPECT_TRUE(tier.Contains(ExpertId{m_.fingerprint, 1, 2}));
  EXPECT_TRUE(tier.Contains(ExpertId{m_.fingerprint, 2, 3}));
}

// Hinted again after its layer's request proved it wrong, a queued hint is
// wanted after all and is loaded.
TEST_F(PrefetchQueueTest, AStaleHintHintedAgainIsLoaded) {
  testing::ImportAll(m_, &parts_);
  HeldQueue h(&parts_);
  RamTier& tier = h.tier;
  PrefetchQueue& queue = h.queue;
  ASSERT_TRUE(queue.Hint(Key(m_.fingerprint, 2, 0)));
  ASSERT_TRUE(queue.Hint(Key(m_.fingerprint, 1, 1)));
  h.held.WaitForNotification();
  queue.LayerRequested(RequestFor(*m_.model, m_.fingerprint, 1, {2}, 1, 5));
  EXPECT_FALSE(queue.Hint(Key(m_.fingerprint, 1, 1)));  // coalesced: wanted again
  h.release.Notify();
  WaitFor([&] { return tier.counters().prefetch_loaded >= 2; });
  EXPECT_EQ(queue.counters().stale, 0u);
  EXPECT_TRUE(tier.Contains(ExpertId{m_.fingerprint, 1, 1}));
}

// The same requests, with and without next-layer hints, on a RAM tier that
// holds only three experts (so prefetches evict, are dropped or protected):
// the outputs are bitwise identical.
TEST_F(PrefetchQueueTest, PrefetchNeverChangesOutputs) {
  const arch::ModelConfig& config = m_.model->config();
  const uint64_t budget = 3 * testing::RamBytesOf(m_.model->experts()[0][0]);
  std::vector<std::string> outputs[2];
  for (const bool hints : {false, true}) {
    queue_.reset();
    { NodeParts closed = std::move(parts_); }
    TempDir dir;
    parts_ = OpenNodeParts(dir.path(), budget);
    ASSERT_NE(parts_.compute, nullptr);
    OpenQueue();
    testing::ImportAll(m_, &parts_);
    uint32_t seed = 7;
    for (int round = 0; round < 4; ++round) {
      for (int layer = 0; layer < config.n_layer; ++layer) {
        if (hints) {
          google::protobuf::RepeatedPtrField<v1::ExpertKey> keys;
          for (int e = 0; e < config.n_expert; e += 2) {
            *keys.Add() = Key(m_.fingerprint, (layer + 1) % config.n_layer, e);
          }
          queue_->HintAll(keys);
        }
        const v1::ComputeLayerRequest request = testing::RandomRequest(
            *m_.model, m_.fingerprint, layer, 3, config.n_expert_used, seed++);
        if (hints) queue_->LayerRequested(request);
        v1::ComputeLayerReply reply;
        ASSERT_TRUE(parts_.compute->Compute(request, &reply).ok());
        outputs[hints].push_back(reply.outputs().data());
      }
    }
    EXPECT_LE(parts_.tier->counters().peak_used_bytes, budget);
    EXPECT_EQ(queue_->counters().hints > 0, hints);
    queue_.reset();
    { NodeParts closed = std::move(parts_); }
  }
  ASSERT_EQ(outputs[0].size(), outputs[1].size());
  for (size_t i = 0; i < outputs[0].size(); ++i) {
    EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << "request " << i;
  }
}

}  // namespace
}  // namespace colibri::expert_node
