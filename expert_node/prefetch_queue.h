// Prefetch hints: "these experts will probably be needed soon", loaded from
// the disk tier into the RAM tier by a pool of I/O threads ahead of use.
//
// Hints are advice and never fail nor block their caller: Hint checks the key
// against the known models (in memory) and queues it unless the expert is
// resident (then the RAM tier's policy hears of the hint: RamTier::HintResident)
// or already queued / being loaded (coalesced); a full queue drops it. An I/O thread looks the expert's size up in the store's index (not
// stored: ignored) and asks the RAM tier to prefetch it, which drops it under
// memory pressure (ram_tier.h). Prefetch never changes results: outputs
// depend only on the expert bytes, whichever tier they come from. The
// NodeStatsReply comment (expert.proto) defines each counter.
//
// Stale hints: a ComputeLayer request proves wrong the hints of its model for
// its layer whose expert it does not route to, and those for earlier layers
// (LayerRequested; written for one stream of layer requests per model: with
// several interleaved, a hint may be dropped that another stream needed, which
// costs that stream a demand read, never a result). A stale hint still queued
// is dropped unread when its turn comes (counted in stale); the RAM tier is
// told of one whose load runs or ran (RamTier::PrefetchStale: an unstarted
// read is cancelled, an unused prefetched expert loses its protection).
//
// Thread-safety: every method is thread-safe.
#ifndef COLIBRI_EXPERT_NODE_PREFETCH_QUEUE_H_
#define COLIBRI_EXPERT_NODE_PREFETCH_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "colibri/v1/expert.pb.h"
#include "expert_node/expert_record.h"
#include "expert_node/expert_store.h"
#include "expert_node/model_registry.h"
#include "expert_node/ram_tier.h"
#include "expert_node/task_queue.h"
#include "google/protobuf/repeated_ptr_field.h"

namespace colibri::expert_node {

class PrefetchQueue {
 public:
  struct Options {
    // Threads loading hinted experts; each waits on one read in the store's
    // read queue, so this many loads are in flight together. Default: 8.
    int io_threads = 8;
    // Loads waiting at most; more are dropped. Default: 256.
    size_t queue_limit = 256;
  };

  // The queue's counters of hints (the RAM tier counts what the loads do).
  struct Counters {
    uint64_t hints = 0;       // every hint received
    uint64_t issued = 0;      // queued for loading
    uint64_t ignored = 0;     // malformed, unknown model, outside it, or not stored
    uint64_t resident = 0;    // resident when hinted
    uint64_t coalesced = 0;   // already queued or loading
    uint64_t queue_full = 0;  // dropped: the queue was full
    uint64_t stale = 0;       // of the issued, dropped unread: stale before their turn
  };

  // store, tier and registry are borrowed and must outlive the queue.
  PrefetchQueue(const Options& options, ExpertStore* store, RamTier* tier,
                const ModelRegistry* registry);
  // Runs the loads already queued, then joins the I/O threads.
  ~PrefetchQueue();
  PrefetchQueue(const PrefetchQueue&) = delete;
  PrefetchQueue& operator=(const PrefetchQueue&) = delete;

  // Counts a hint and queues its load unless it is ignored, resident,
  // coalesced or dropped; true when queued.
  bool Hint(const v1::ExpertKey& key);
  // Hint for each key; how many were queued.
  int32_t HintAll(const google::protobuf::RepeatedPtrField<v1::ExpertKey>& keys);
  // A ComputeLayer request arrived (call before its own hints are given):
  // marks the hints it proves wrong stale (see the file comment). Never fails;
  // a malformed request marks nothing.
  void LayerRequested(const v1::ComputeLayerRequest& request);

  Counters counters() const;

 private:
  // An I/O thread's work for one queued hint.
  void Load(const ExpertId& id);

  // A hint the queue still tracks: queued, loading, or loaded and not yet
  // confirmed or proven wrong by its layer's request.
  enum class Stage { kQueued, kLoading, kLoaded };
  struct Tracked {
    Stage stage = Stage::kQueued;
    bool stale = false;  // kQueued only: drop it when its turn comes
  };

  ExpertStore* const store_;
  RamTier* const tier_;
  const ModelRegistry* const registry_;
  // Loaded hints tracked at most; beyond it the loaded ones are forgotten.
  const size_t track_limit_;

  absl::Mutex mu_;
  absl::flat_hash_map<ExpertId, Tracked> tracked_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> hints_{0};
  std::atomic<uint64_t> issued_{0};
  std::atomic<uint64_t> ignored_{0};
  std::atomic<uint64_t> resident_{0};
  std::atomic<uint64_t> coalesced_{0};
  std::atomic<uint64_t> queue_full_{0};
  std::atomic<uint64_t> stale_{0};

  // Last: drained and joined first, while everything its tasks use is alive.
  std::unique_ptr<TaskQueue> loads_;
};

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_PREFETCH_QUEUE_H_
