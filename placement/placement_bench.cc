// colibri_placement_bench: how much of a layer's expert work the busiest node
// carries, with every expert on its primary and with BalanceReplicas.
//
//   colibri_placement_bench [--nodes=3,4,6] [--replicas=2] [--experts=128]
//                           [--top-k=8] [--tokens=1,4] [--layers=20000] [--seed=1]
//
// For each node count and token count it routes every token of a layer to
// top-k distinct experts drawn uniformly (real routers are skewed, which
// makes balancing matter more), costs each expert ExpertWork(its tokens) and
// prints the mean over --layers layers of the busiest node's work: on the
// primaries, balanced, and the even split (total / nodes, the floor). A layer
// ends when its slowest node replies, so on nodes with their own cores the
// busiest node's work is the layer's node time.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "placement/placement.h"

namespace colibri::placement {
namespace {

struct Options {
  std::vector<int> nodes = {3, 4, 6};
  int replicas = 2;
  int experts = 128;
  int top_k = 8;
  std::vector<int> tokens = {1, 4};
  int layers = 20000;
  uint32_t seed = 1;
};

bool ParseList(const std::string& text, std::vector<int>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) return false;
    out->push_back(v);
  }
  return !out->empty();
}

bool ParseFlags(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    int v = 0;
    bool ok = true;
    if (key == "--nodes") {
      ok = ParseList(value, &o->nodes);
    } else if (key == "--tokens") {
      ok = ParseList(value, &o->tokens);
    } else if (key == "--replicas" || key == "--experts" || key == "--top-k" || key == "--layers" ||
               key == "--seed") {
      ok = absl::SimpleAtoi(value, &v) && v >= 1;
      if (key == "--replicas") o->replicas = v;
      if (key == "--experts") o->experts = v;
      if (key == "--top-k") o->top_k = v;
      if (key == "--layers") o->layers = v;
      if (key == "--seed") o->seed = static_cast<uint32_t>(v);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad flag %s (see the header of placement/placement_bench.cc)\n",
                   arg.c_str());
      return false;
    }
  }
  if (o->top_k > o->experts) {
    std::fprintf(stderr, "--top-k must not exceed --experts\n");
    return false;
  }
  return true;
}

int Run(const Options& o) {
  std::printf(
      "busiest node's expert work per layer (ExpertWork units: 4 per expert read + 3 "
      "per token), mean of %d layers; %d experts, top-%d, %d replicas\n",
      o.layers, o.experts, o.top_k, o.replicas);
  std::printf("%6s %7s %10s %10s %8s %10s\n", "nodes", "tokens", "primary", "balanced", "less",
              "even split");
  for (int n_nodes : o.nodes) {
    if (o.replicas > n_nodes) continue;
    std::vector<PlacementNode> nodes;
    for (int i = 0; i < n_nodes; ++i) nodes.push_back({"node-" + std::to_string(i), 1.0});
    absl::StatusOr<Placement> placement = Placement::Compute(nodes, {o.experts}, o.replicas);
    if (!placement.ok()) {
      std::fprintf(stderr, "%s\n", std::string(placement.status().message()).c_str());
      return 1;
    }
    const std::vector<bool> healthy(n_nodes, true);
    for (int n_tokens : o.tokens) {
      std::mt19937 rng(o.seed);
      std::vector<int> ids(o.experts);
      double on_primaries = 0, balanced = 0, even = 0;
      for (int layer = 0; layer < o.layers; ++layer) {
        std::vector<int64_t> tokens(o.experts, 0);
        for (int t = 0; t < n_tokens; ++t) {
          std::iota(ids.begin(), ids.end(), 0);
          // The first top_k of a partial Fisher-Yates shuffle.
          for (int j = 0; j < o.top_k; ++j) {
            std::swap(ids[j], ids[j + rng() % (o.experts - j)]);
            ++tokens[ids[j]];
          }
        }
        std::vector<int64_t> cost(o.experts);
        int64_t total = 0;
        for (int e = 0; e < o.experts; ++e) {
          cost[e] = ExpertWork(tokens[e]);
          total += cost[e];
        }
        const std::vector<int> chosen = BalanceReplicas(*placement, 0, cost, healthy);
        std::vector<int64_t> primary_load(n_nodes, 0), balanced_load(n_nodes, 0);
        for (int e = 0; e < o.experts; ++e) {
          if (cost[e] == 0) continue;
          primary_load[placement->Primary(0, e)] += cost[e];
          balanced_load[placement->Owners(0, e)[chosen[e]]] += cost[e];
        }
        on_primaries += *std::max_element(primary_load.begin(), primary_load.end());
        balanced += *std::max_element(balanced_load.begin(), balanced_load.end());
        even += static_cast<double>(total) / n_nodes;
      }
      std::printf("%6d %7d %10.1f %10.1f %7.0f%% %10.1f\n", n_nodes, n_tokens,
                  on_primaries / o.layers, balanced / o.layers,
                  100.0 * (1.0 - balanced / on_primaries), even / o.layers);
    }
  }
  return 0;
}

}  // namespace
}  // namespace colibri::placement

int main(int argc, char** argv) {
  colibri::placement::Options options;
  if (!colibri::placement::ParseFlags(argc, argv, &options)) return 2;
  return colibri::placement::Run(options);
}
