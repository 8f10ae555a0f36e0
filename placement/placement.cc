#include "placement/placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"

namespace colibri::placement {
namespace {

// SplitMix64's finaliser: a bijective mix with full avalanche.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// FNV-1a over the id, then mixed: stable across processes and platforms
// (unlike absl::Hash, which is seeded per process).
uint64_t HashId(const std::string& id) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : id) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return Mix64(h);
}

double Score(uint64_t id_hash, double weight, int layer, int expert) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert);
  const uint64_t h = Mix64(id_hash ^ Mix64(key + 0x9e3779b97f4a7c15ULL));
  // u in (0, 1): the top 53 bits, offset by half a step so that it is never 0 or 1.
  const double u = (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return -weight / std::log(u);
}

}  // namespace

double RendezvousScore(const PlacementNode& node, int layer, int expert) {
  return Score(HashId(node.id), node.weight, layer, expert);
}

absl::StatusOr<Placement> Placement::Compute(const std::vector<PlacementNode>& nodes,
                                             const std::vector<int>& experts_per_layer,
                                             int replicas) {
  return Compute(nodes, experts_per_layer, replicas, std::vector<bool>(nodes.size(), true));
}

absl::StatusOr<Placement> Placement::Compute(const std::vector<PlacementNode>& nodes,
                                             const std::vector<int>& experts_per_layer,
                                             int replicas, const std::vector<bool>& available) {
  if (nodes.empty()) return absl::InvalidArgumentError("placement needs at least one node");
  if (available.size() != nodes.size()) {
    return absl::InvalidArgumentError("placement: one availability flag per node expected");
  }
  const int n_available = static_cast<int>(std::count(available.begin(), available.end(), true));
  if (replicas < 1 || replicas > n_available) {
    return absl::InvalidArgumentError(absl::StrCat("replicas must be in [1, ", n_available,
                                                   "] (the available nodes), got ", replicas));
  }
  std::set<std::string> ids;
  std::vector<uint64_t> hashes;
  for (const PlacementNode& n : nodes) {
    if (!ids.insert(n.id).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate node id '", n.id, "'"));
    }
    if (!(n.weight > 0) || !std::isfinite(n.weight)) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", n.id, "': weight ", n.weight, " is not a positive number"));
    }
    hashes.push_back(HashId(n.id));
  }
  Placement p;
  p.replicas_ = replicas;
  p.n_nodes_ = static_cast<int>(nodes.size());
  p.max_copies_ = replicas;
  p.owners_.resize(experts_per_layer.size());
  p.offsets_.resize(experts_per_layer.size());
  std::vector<std::pair<double, int>> scored(n_available);
  for (size_t l = 0; l < experts_per_layer.size(); ++l) {
    const int n_expert = experts_per_layer[l];
    p.owners_[l].resize(static_cast<size_t>(n_expert) * replicas);
    p.offsets_[l].resize(static_cast<size_t>(n_expert) + 1);
    for (int e = 0; e <= n_expert; ++e) p.offsets_[l][e] = static_cast<size_t>(e) * replicas;
    for (int e = 0; e < n_expert; ++e) {
      size_t j = 0;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (!available[i]) continue;
        scored[j++] = {Score(hashes[i], nodes[i].weight, static_cast<int>(l), e),
                       static_cast<int>(i)};
      }
      // Highest score first; ties (practically impossible) by node index.
      std::partial_sort(scored.begin(), scored.begin() + replicas, scored.end(),
                        [](const auto& a, const auto& b) {
                          return a.first != b.first ? a.first > b.first : a.second < b.second;
                        });
      for (int r = 0; r < replicas; ++r) {
        p.owners_[l][static_cast<size_t>(e) * replicas + r] = scored[r].second;
      }
    }
  }
  return p;
}

absl::StatusOr<Placement> Placement::WithExtraCopies(const std::vector<ExtraCopy>& extras) const {
  // [layer][expert]: the extra nodes in the order given.
  std::vector<std::vector<std::vector<int>>> added(n_layer());
  for (const ExtraCopy& x : extras) {
    if (x.layer < 0 || x.layer >= n_layer() || x.expert < 0 || x.expert >= n_expert(x.layer) ||
        x.node < 0 || x.node >= n_nodes_) {
      return absl::InvalidArgumentError(absl::StrCat("extra copy of layer ", x.layer, " expert ",
                                                     x.expert, " on node ", x.node,
                                                     ": out of range"));
    }
    std::vector<std::vector<int>>& layer = added[x.layer];
    layer.resize(n_expert(x.layer));
    std::vector<int>& nodes = layer[x.expert];
    absl::Span<const int> owners = Owners(x.layer, x.expert);
    if (std::find(owners.begin(), owners.end(), x.node) != owners.end() ||
        std::find(nodes.begin(), nodes.end(), x.node) != nodes.end()) {
      return absl::InvalidArgumentError(absl::StrCat("extra copy of layer ", x.layer, " expert ",
                                                     x.expert, " on node ", x.node,
                                                     ": the node holds it already"));
    }
    nodes.push_back(x.node);
  }
  Placement p;
  p.replicas_ = replicas_;
  p.max_copies_ = 1;
  p.n_nodes_ = n_nodes_;
  p.owners_.resize(n_layer());
  p.offsets_.resize(n_layer());
  for (int l = 0; l < n_layer(); ++l) {
    p.offsets_[l].push_back(0);
    for (int e = 0; e < n_expert(l); ++e) {
      absl::Span<const int> owners = Owners(l, e);
      p.owners_[l].insert(p.owners_[l].end(), owners.begin(), owners.end());
      if (!added[l].empty()) {
        p.owners_[l].insert(p.owners_[l].end(), added[l][e].begin(), added[l][e].end());
      }
      p.offsets_[l].push_back(p.owners_[l].size());
      p.max_copies_ =
          std::max(p.max_copies_, static_cast<int>(p.offsets_[l][e + 1] - p.offsets_[l][e]));
    }
  }
  return p;
}

std::vector<ExtraCopy> Placement::AllExtras() const {
  std::vector<ExtraCopy> out;
  for (int l = 0; l < n_layer(); ++l) {
    for (int e = 0; e < n_expert(l); ++e) {
      for (int node : Extras(l, e)) out.push_back({l, e, node});
    }
  }
  return out;
}

std::vector<std::pair<int, int>> Placement::ExpertsOf(int node) const {
  std::vector<std::pair<int, int>> out;
  for (int l = 0; l < n_layer(); ++l) {
    for (int e = 0; e < n_expert(l); ++e) {
      for (int owner : Owners(l, e)) {
        if (owner == node) out.emplace_back(l, e);
      }
    }
  }
  return out;
}

std::vector<int> BalanceReplicas(const Placement& placement, int layer,
                                 absl::Span<const int64_t> cost, const std::vector<bool>& healthy) {
  const int n_expert = placement.n_expert(layer);
  std::vector<int> chosen(n_expert, 0);
  if (placement.max_copies() == 1) return chosen;
  auto owner = [&](int e, int i) { return placement.Owners(layer, e)[i]; };
  auto copies = [&](int e) { return static_cast<int>(placement.Owners(layer, e).size()); };
  // The batch's experts with a healthy replica; `primary` holds the first.
  std::vector<int> in_batch;
  std::vector<int> primary(n_expert, 0);
  std::vector<int> open;  // experts with more than one healthy replica
  for (int e = 0; e < n_expert && e < static_cast<int>(cost.size()); ++e) {
    if (cost[e] <= 0) continue;
    int n_healthy = 0;
    for (int i = copies(e) - 1; i >= 0; --i) {
      if (!healthy[owner(e, i)]) continue;
      ++n_healthy;
      primary[e] = i;
    }
    if (n_healthy == 0) continue;
    in_batch.push_back(e);
    if (n_healthy > 1) open.push_back(e);
  }
  auto max_load = [&](const std::vector<int>& choice, std::vector<int64_t>* load) {
    load->assign(placement.n_nodes(), 0);
    for (int e : in_batch) (*load)[owner(e, choice[e])] += cost[e];
    return *std::max_element(load->begin(), load->end());
  };

  // Greedy: the experts without a choice first, then the others by
  // decreasing cost, each to its least loaded healthy replica.
  std::vector<int64_t> load(placement.n_nodes(), 0);
  std::vector<bool> is_open(n_expert, false);
  for (int e : open) is_open[e] = true;
  for (int e : in_batch) {
    chosen[e] = primary[e];
    if (!is_open[e]) load[owner(e, chosen[e])] += cost[e];
  }
  std::stable_sort(open.begin(), open.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  for (int e : open) {
    int best = -1;
    for (int i = 0; i < copies(e); ++i) {
      if (!healthy[owner(e, i)]) continue;
      if (best < 0 || load[owner(e, i)] < load[owner(e, best)]) best = i;
    }
    chosen[e] = best;
    load[owner(e, best)] += cost[e];
  }
  // Then move single experts off the busiest node while that lowers the pair's
  // maximum (greedy order can leave a node that one move relieves).
  for (size_t step = 0; step < open.size(); ++step) {
    const int busiest = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    int move_e = -1, move_i = -1;
    int64_t move_peak = load[busiest];
    for (int e : open) {
      if (owner(e, chosen[e]) != busiest) continue;
      for (int i = 0; i < copies(e); ++i) {
        const int to = owner(e, i);
        if (to == busiest || !healthy[to]) continue;
        const int64_t peak = std::max(load[busiest] - cost[e], load[to] + cost[e]);
        if (peak < move_peak) {
          move_peak = peak;
          move_e = e;
          move_i = i;
        }
      }
    }
    if (move_e < 0) break;
    load[busiest] -= cost[move_e];
    load[owner(move_e, move_i)] += cost[move_e];
    chosen[move_e] = move_i;
  }
  // Never busier than the primaries alone; on a tie they win (their RAM
  // tiers hold the experts already).
  std::vector<int64_t> scratch;
  if (max_load(primary, &scratch) <= max_load(chosen, &scratch)) return primary;
  return chosen;
}

}  // namespace colibri::placement
