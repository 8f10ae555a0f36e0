#include "expert_node/cache_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <list>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace colibri::expert_node {

absl::StatusOr<CachePolicyKind> ParseCachePolicyKind(absl::string_view name) {
  if (name == "lru") return CachePolicyKind::kLru;
  if (name == "adaptive") return CachePolicyKind::kAdaptive;
  return absl::InvalidArgumentError(
      absl::StrCat("cache policy \"", name, "\" is not one of: lru, adaptive"));
}

absl::string_view CachePolicyName(CachePolicyKind kind) {
  return kind == CachePolicyKind::kLru ? "lru" : "adaptive";
}

namespace {

// A count that halves every half_life ticks without additions.
struct Decayed {
  double value = 0;
  uint64_t tick = 0;  // when value was last brought up to date

  double At(uint64_t now, double half_life) const {
    return value * std::exp2(-static_cast<double>(now - tick) / half_life);
  }
  void Add(double amount, uint64_t now, double half_life) {
    value = At(now, half_life) + amount;
    tick = now;
  }
};

using LayerKey = std::pair<std::string, int32_t>;

// Visits of one layer: how often they come.
struct LayerVisits {
  Decayed slow;              // visits, decayed like slow use counts
  Decayed fast;              // visits, decayed like fast use counts
  uint64_t last_start = 0;   // tick of the latest visit's first use
  double period = 0;         // mean ticks between visit starts (0: unknown)
};

// What both policies know: use counts, layer visits, hint outcomes, the tick.
class UsageModel : public CachePolicy {
 public:
  explicit UsageModel(const Options& options) : options_(options) {}

  void Used(const ExpertId& id, bool hit) override {
    ++tick_;
    LayerKey layer{id.fingerprint, id.layer};
    if (!(last_layer_ == layer)) {
      LayerVisits& v = visits_[layer];
      if (v.last_start > 0) {
        const double gap = static_cast<double>(tick_ - v.last_start);
        v.period = v.period == 0 ? gap : v.period + (gap - v.period) / 8;
      }
      v.last_start = tick_;
      v.slow.Add(1, tick_, options_.half_life_ticks);
      v.fast.Add(1, tick_, options_.fast_half_life_ticks);
      last_layer_ = std::move(layer);
    }
    Uses& u = uses_[id];
    u.slow.Add(1, tick_, options_.half_life_ticks);
    u.fast.Add(1, tick_, options_.fast_half_life_ticks);
    auto hint = hints_.find(id);
    if (hint != hints_.end()) {
      HintOutcome(id, hint->second >= tick_);
      hints_.erase(hint);
    }
    if (tick_ % std::max<uint64_t>(options_.hint_horizon, 1) == 0) ExpireHints();
    OnUsed(id, hit);
  }

  void Hinted(const ExpertId& id) override {
    auto [it, inserted] = hints_.try_emplace(id, 0);
    if (!inserted && it->second < tick_) HintOutcome(id, false);
    it->second = tick_ + HintHorizon(id);
  }

  void Evicted(const ExpertId& id) override {
    auto hint = hints_.find(id);
    if (hint != hints_.end()) {
      HintOutcome(id, false);
      hints_.erase(hint);
    }
    OnEvicted(id);
  }

  double UseProbability(const ExpertId& id) const override { return Probability(id, false); }

  double HintPrecision() const override {
    const double used = hints_used_.At(tick_, options_.half_life_ticks);
    const double wasted = hints_wasted_.At(tick_, options_.half_life_ticks);
    return (used + 0.5) / (used + wasted + 1);
  }

  double HintPrecision(const ExpertId& id) const override {
    const double prior = HintPrecision();
    auto it = expert_hints_.find(id);
    if (it == expert_hints_.end()) return prior;
    const double used = it->second.used.At(tick_, options_.half_life_ticks);
    const double wasted = it->second.wasted.At(tick_, options_.half_life_ticks);
    // The node's precision weighs as two outcomes of this expert's own.
    return (used + 2 * prior) / (used + wasted + 2);
  }

 protected:
  virtual void OnUsed(const ExpertId& id, bool hit) = 0;
  virtual void OnEvicted(const ExpertId& id) = 0;

  // UseProbability by the fast (recent) or slow (long-run) counts.
  double Probability(const ExpertId& id, bool fast) const {
    auto use = uses_.find(id);
    if (use == uses_.end()) return 0;
    auto visits = visits_.find(LayerKey{id.fingerprint, id.layer});
    if (visits == visits_.end()) return 0;
    const double h = fast ? options_.fast_half_life_ticks : options_.half_life_ticks;
    const double v = (fast ? visits->second.fast : visits->second.slow).At(tick_, h);
    if (v <= 0) return 0;
    return std::min(1.0, (fast ? use->second.fast : use->second.slow).At(tick_, h) / v);
  }
  // Expected ticks until `id` is used again, if it is used with probability
  // p at each visit of its layer: the wait for the layer's next visit, then
  // a geometric number of whole periods.
  double ExpectedTicksToUse(const ExpertId& id, double p) const {
    auto it = visits_.find(LayerKey{id.fingerprint, id.layer});
    if (it == visits_.end() || p <= 0) return std::numeric_limits<double>::infinity();
    const LayerVisits& v = it->second;
    const double next = static_cast<double>(v.last_start) + v.period;
    const double wait = std::max(0.0, next - static_cast<double>(tick_));
    return wait + v.period * (1 / p - 1);
  }
  // Ticks a hint of `id` protects it for: two visit periods of its layer
  // (the hinted visit, and one more in case the hint came early), at most
  // Options::hint_horizon; Options::hint_horizon while the period is unknown.
  uint64_t HintHorizon(const ExpertId& id) const {
    constexpr double kHintPeriods = 2;
    auto it = visits_.find(LayerKey{id.fingerprint, id.layer});
    if (it == visits_.end() || it->second.period <= 0) return options_.hint_horizon;
    const double ticks = std::ceil(kHintPeriods * it->second.period);
    return std::min<uint64_t>(options_.hint_horizon, static_cast<uint64_t>(std::max(1.0, ticks)));
  }
  // Whether a hint on `id` still protects it.
  bool HintActive(const ExpertId& id) const {
    auto it = hints_.find(id);
    return it != hints_.end() && it->second >= tick_;
  }
  const Options options_;

 private:
  struct Uses {
    Decayed slow;
    Decayed fast;
  };
  void HintOutcome(const ExpertId& id, bool used) {
    (used ? hints_used_ : hints_wasted_).Add(1, tick_, options_.half_life_ticks);
    HintCounts& c = expert_hints_[id];
    (used ? c.used : c.wasted).Add(1, tick_, options_.half_life_ticks);
  }
  void ExpireHints() {
    for (auto it = hints_.begin(); it != hints_.end();) {
      if (it->second < tick_) {
        HintOutcome(it->first, false);
        hints_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  uint64_t tick_ = 0;
  LayerKey last_layer_{"", -1};
  absl::flat_hash_map<ExpertId, Uses> uses_;
  absl::flat_hash_map<LayerKey, LayerVisits> visits_;
  absl::flat_hash_map<ExpertId, uint64_t> hints_;  // expiry tick
  struct HintCounts {
    Decayed used;
    Decayed wasted;
  };
  Decayed hints_used_;
  Decayed hints_wasted_;
  absl::flat_hash_map<ExpertId, HintCounts> expert_hints_;
};

// Least recently used at the front; bounded by the owner.
class RecencyList {
 public:
  void PushFront(const ExpertId& id) {
    Erase(id);
    pos_[id] = list_.insert(list_.begin(), id);
  }
  void PushBack(const ExpertId& id) {
    Erase(id);
    pos_[id] = list_.insert(list_.end(), id);
  }
  void Touch(const ExpertId& id) {
    auto it = pos_.find(id);
    if (it != pos_.end()) list_.splice(list_.begin(), list_, it->second);
  }
  bool Contains(const ExpertId& id) const { return pos_.contains(id); }
  void Erase(const ExpertId& id) {
    auto it = pos_.find(id);
    if (it == pos_.end()) return;
    list_.erase(it->second);
    pos_.erase(it);
  }
  void PopBack() {
    const ExpertId last = list_.back();
    Erase(last);
  }
  size_t size() const { return list_.size(); }
  const std::list<ExpertId>& items() const { return list_; }  // most recent first

 private:
  std::list<ExpertId> list_;
  absl::flat_hash_map<ExpertId, std::list<ExpertId>::iterator> pos_;
};

class LruPolicy final : public UsageModel {
 public:
  using UsageModel::UsageModel;

  void Admitted(const ExpertId& id, AdmitKind kind) override {
    if (kind == AdmitKind::kWarm) {
      order_.PushBack(id);
    } else {
      order_.PushFront(id);
    }
  }
  std::vector<ExpertId> VictimOrder() const override {
    return std::vector<ExpertId>(order_.items().rbegin(), order_.items().rend());
  }

 private:
  void OnUsed(const ExpertId& id, bool hit) override {
    (void)hit;
    order_.Touch(id);
  }
  void OnEvicted(const ExpertId& id) override { order_.Erase(id); }

  RecencyList order_;
};

class AdaptivePolicy final : public UsageModel {
 public:
  using UsageModel::UsageModel;

  void Admitted(const ExpertId& id, AdmitKind kind) override {
    ghost_recent_.Erase(id);
    ghost_frequent_.Erase(id);
    if (kind == AdmitKind::kWarm) {
      order_.PushBack(id);
    } else {
      order_.PushFront(id);
    }
  }

  double UseProbability(const ExpertId& id) const override {
    return recent_weight_ * Probability(id, true) + (1 - recent_weight_) * Probability(id, false);
  }

  std::vector<ExpertId> VictimOrder() const override {
    struct Ranked {
      double ticks;    // expected ticks to the next use
      size_t recency;  // 0: least recently used
      const ExpertId* id;
    };
    std::vector<Ranked> ranked;
    std::vector<const ExpertId*> hinted;
    ranked.reserve(order_.size());
    size_t recency = 0;
    for (auto it = order_.items().rbegin(); it != order_.items().rend(); ++it, ++recency) {
      if (HintActive(*it)) {
        hinted.push_back(&*it);
      } else {
        ranked.push_back(Ranked{ExpectedTicksToUse(*it, UseProbability(*it)), recency, &*it});
      }
    }
    // Farthest expected use first, then least recently used.
    std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
      return a.ticks != b.ticks ? a.ticks > b.ticks : a.recency < b.recency;
    });
    std::vector<ExpertId> order;
    order.reserve(order_.size());
    for (const Ranked& r : ranked) order.push_back(*r.id);
    for (const ExpertId* id : hinted) order.push_back(*id);
    return order;
  }

 private:
  void OnUsed(const ExpertId& id, bool hit) override {
    if (hit) {
      order_.Touch(id);
      return;
    }
    // A miss on a ghost: the estimate that wanted to keep it was right.
    constexpr double kStep = 0.05;
    if (ghost_recent_.Contains(id)) {
      recent_weight_ = std::min(1.0, recent_weight_ + kStep);
      ghost_recent_.Erase(id);
    } else if (ghost_frequent_.Contains(id)) {
      recent_weight_ = std::max(0.0, recent_weight_ - kStep);
      ghost_frequent_.Erase(id);
    }
  }

  void OnEvicted(const ExpertId& id) override {
    if (!order_.Contains(id)) return;
    order_.Erase(id);
    // Remembered by the estimate that rated it higher: the recent counts or
    // the long-run ones.
    RecencyList& ghost =
        Probability(id, true) > Probability(id, false) ? ghost_recent_ : ghost_frequent_;
    ghost.PushFront(id);
    // Each ghost list remembers as many experts as are resident (ARC's c).
    const size_t bound = std::max<size_t>(order_.size(), 1);
    while (ghost_recent_.size() > bound) ghost_recent_.PopBack();
    while (ghost_frequent_.size() > bound) ghost_frequent_.PopBack();
  }

  RecencyList order_;           // residents, most recently used first
  RecencyList ghost_recent_;    // evicted although the recent counts rated them higher
  RecencyList ghost_frequent_;  // evicted although the long-run counts rated them higher
  double recent_weight_ = 0.5;  // weight of the recent counts in UseProbability
};

}  // namespace

bool PrefetchPays(double precision, double cost, double p_victim) {
  return precision > cost + p_victim;
}

std::unique_ptr<CachePolicy> MakeCachePolicy(CachePolicyKind kind,
                                             const CachePolicy::Options& options) {
  if (kind == CachePolicyKind::kLru) return std::make_unique<LruPolicy>(options);
  return std::make_unique<AdaptivePolicy>(options);
}

}  // namespace colibri::expert_node
