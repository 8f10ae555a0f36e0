// Which resident experts a cache of experts evicts first: the RAM tier's
// replacement policy (ram_tier.h), shared with the cache simulator
// (tools/cache_sim/) so that what the simulator measures is what the node runs.
//
// The owner of the cache reports every event (Used, Admitted, Hinted,
// Evicted) and asks for the residents in eviction order (VictimOrder); it
// skips the residents it may not evict (pinned, protected) itself. Time is
// logical: one tick per Used call, so decisions depend on the order of
// events only, never on the clock.
//
// Policies:
//   kLru       least recently used (or admitted) first; warmed experts first
//              of all. Hints are ignored.
//   kAdaptive  the resident whose next use is expected farthest away goes
//              first: the wait until its layer's next visit (visits of a
//              layer recur with a measured period) plus a geometric number
//              of whole periods by its UseProbability, which mixes a recent
//              (Options::fast_half_life_ticks) and a long-run
//              (Options::half_life_ticks) estimate. The mixing weight adapts
//              as ARC adapts its split between recent and frequent: an
//              evicted expert is remembered in the ghost list of the
//              estimate that rated it higher, and a miss on a ghost moves
//              the weight towards that estimate. Ties go to the least
//              recently used; warmed, never-used experts go first; a hinted
//              resident (a prefetch, or a hint for a resident expert) goes
//              last until it is used or its hint expires (two visit periods
//              of its layer, at most Options::hint_horizon ticks).
//
// Thread-safety: none; the owner serialises all calls (RamTier under its lock).
#ifndef COLIBRI_EXPERT_NODE_CACHE_POLICY_H_
#define COLIBRI_EXPERT_NODE_CACHE_POLICY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "expert_node/expert_record.h"

namespace colibri::expert_node {

enum class CachePolicyKind { kLru, kAdaptive };

// "lru" or "adaptive"; InvalidArgument naming the accepted values otherwise.
absl::StatusOr<CachePolicyKind> ParseCachePolicyKind(absl::string_view name);
absl::string_view CachePolicyName(CachePolicyKind kind);

// How an expert became resident.
enum class AdmitKind {
  kDemand,    // a request needed it (after Used(id, false))
  kPrefetch,  // a hint loaded it ahead of use
  kWarm,      // background warm-up: never used, the first to go
};

class CachePolicy {
 public:
  struct Options {
    // Ticks (Used calls) for a long-run use count to halve. Default: 4096.
    double half_life_ticks = 4096;
    // Ticks for a recent use count to halve (kAdaptive). Default: 64.
    double fast_half_life_ticks = 64;
    // Ticks a hint protects its expert for when it is not used, at most: a
    // hint lasts two visit periods of its expert's layer once that period is
    // measured, this long before. Default: 64.
    uint64_t hint_horizon = 64;
  };

  virtual ~CachePolicy() = default;

  // A request for `id`: `hit` when it was resident. One tick.
  virtual void Used(const ExpertId& id, bool hit) = 0;
  // `id` became resident (never while it already is).
  virtual void Admitted(const ExpertId& id, AdmitKind kind) = 0;
  // A hint that `id` will probably be used soon (resident or not).
  virtual void Hinted(const ExpertId& id) = 0;
  // `id` stopped being resident.
  virtual void Evicted(const ExpertId& id) = 0;
  // Every resident, the first to evict first.
  virtual std::vector<ExpertId> VictimOrder() const = 0;
  // Estimated probability that `id` is used at the next visit of its layer:
  // its decayed use count over its layer's decayed visit count (a visit: a
  // run of Used calls on one layer), in [0, 1]; 0 for an unknown expert.
  virtual double UseProbability(const ExpertId& id) const = 0;
  // Fraction of hints whose expert was used before it was evicted or the
  // hint expired, decayed like use counts; 0.5 before any outcome.
  virtual double HintPrecision() const = 0;
  // The same for hints of `id`: its own outcomes, with HintPrecision() as
  // the prior (weighing as two outcomes).
  virtual double HintPrecision(const ExpertId& id) const = 0;
};

// The prefetch rule: a hinted expert is worth loading when the hint's
// expected benefit beats its cost, in units of one demand miss:
//   precision > cost + p_victim
// precision: the policy's HintPrecision(id) (the chance the load is used);
// cost: a background read relative to a demand miss; p_victim: the
// UseProbability of the resident the load would evict (0 with free room).
bool PrefetchPays(double precision, double cost, double p_victim);
// The node's default cost (RamTier::Options::prefetch_cost), which the cache
// simulator replays too. Where the nodes share the disk's bandwidth, a
// prefetch's read costs about what the miss it may save does: only hints
// right well over half the time pay.
inline constexpr double kDefaultPrefetchCost = 0.5;

std::unique_ptr<CachePolicy> MakeCachePolicy(CachePolicyKind kind,
                                             const CachePolicy::Options& options = {});

}  // namespace colibri::expert_node

#endif  // COLIBRI_EXPERT_NODE_CACHE_POLICY_H_
