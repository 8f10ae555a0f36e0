// colibri-cache-sim: replays routing traces (run/serve --trace-routing)
// against one node's RAM tier under LRU, the adaptive policy, LFU told the
// trace's counts (an online policy's ceiling on near-uniform routing) and
// Belady's optimum at several budgets, and prints hit rates and prefetch
// outcomes.
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/cache_sim/cache_sim.h"

namespace {

using colibri::cache_sim::NodeEvent;
using colibri::cache_sim::SimOptions;
using colibri::cache_sim::SimResult;
using colibri::expert_node::CachePolicyKind;

struct Trace {
  std::string name;
  std::vector<colibri::moe::TraceRecord> records;
};

std::string Rate(const SimResult& r) { return absl::StrFormat("%.3f", r.hit_rate()); }

int Main(int argc, char** argv) {
  CLI::App app{
      "Replays routing traces against one expert node's RAM tier: LRU, the adaptive policy "
      "and Belady's optimum at each budget (a share of the node's experts)"};
  std::vector<std::string> paths;
  int nodes = 1;
  int replicas = 1;
  int only_node = -1;
  std::vector<int> budgets = {10, 20, 30, 40, 50};
  double prefetch_cost = 0.25;
  double half_life = 4096;
  double fast_half_life = 64;
  app.add_option("traces", paths, "routing traces (several: each, then all in sequence)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--nodes", nodes, "nodes of the placement")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--replicas", replicas, "copies of each expert")->capture_default_str();
  app.add_option("--node", only_node, "simulate this node only (default: each node)");
  app.add_option("--budgets", budgets, "RAM budgets, percent of the node's share")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--prefetch-cost", prefetch_cost,
                 "a background read's cost relative to a demand miss (prefetch rule)")
      ->capture_default_str();
  app.add_option("--half-life", half_life, "requests for a use count to halve")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--fast-half-life", fast_half_life,
                 "requests for a recent use count to halve (adaptive)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<Trace> traces;
  for (const std::string& path : paths) {
    absl::StatusOr<std::vector<colibri::moe::TraceRecord>> records =
        colibri::moe::ReadRoutingTrace(path);
    if (!records.ok()) {
      std::fprintf(stderr, "colibri-cache-sim: %s\n", records.status().ToString().c_str());
      return 1;
    }
    traces.push_back(Trace{path, *std::move(records)});
  }
  if (traces.size() > 1) {
    Trace all{"all", {}};
    for (const Trace& t : traces) {
      all.records.insert(all.records.end(), t.records.begin(), t.records.end());
    }
    traces.push_back(std::move(all));
  }

  std::printf(
      "trace\tnode\tshare\tbudget\texperts\trequests\tlru\tadaptive\tbelady\tadaptive/belady\t"
      "oracle_lfu\toracle_lfu/belady\t"
      "prefetch_all_wasted\tprefetch_rule_issued\tprefetch_rule_wasted\tadaptive+prefetch\t"
      "lru+prefetch\n");
  for (const Trace& trace : traces) {
    std::vector<int> experts = colibri::cache_sim::ExpertsPerLayer(trace.records);
    std::vector<colibri::placement::PlacementNode> placement_nodes;
    for (int n = 0; n < nodes; ++n) placement_nodes.push_back({absl::StrCat("node", n), 1.0});
    absl::StatusOr<colibri::placement::Placement> placement =
        colibri::placement::Placement::Compute(placement_nodes, experts, replicas);
    if (!placement.ok()) {
      std::fprintf(stderr, "colibri-cache-sim: %s\n", placement.status().ToString().c_str());
      return 1;
    }
    for (int node = 0; node < nodes; ++node) {
      if (only_node >= 0 && node != only_node) continue;
      absl::StatusOr<std::vector<NodeEvent>> events =
          colibri::cache_sim::NodeWorkload(trace.records, *placement, node);
      if (!events.ok()) {
        std::fprintf(stderr, "colibri-cache-sim: %s: %s\n", trace.name.c_str(),
                     events.status().ToString().c_str());
        return 1;
      }
      const int share = static_cast<int>(placement->ExpertsOf(node).size());
      for (int budget : budgets) {
        SimOptions options;
        options.capacity = std::max(1, (share * budget + 50) / 100);
        options.prefetch_cost = prefetch_cost;
        options.policy.half_life_ticks = half_life;
        options.policy.fast_half_life_ticks = fast_half_life;
        const SimResult lru = SimulatePolicy(*events, CachePolicyKind::kLru, options);
        const SimResult adaptive = SimulatePolicy(*events, CachePolicyKind::kAdaptive, options);
        const SimResult belady = colibri::cache_sim::SimulateBelady(*events, options.capacity);
        const SimResult oracle =
            colibri::cache_sim::SimulateOracleFrequency(*events, options.capacity);
        SimOptions all = options;
        all.prefetch_all = true;
        const SimResult with_all = SimulatePolicy(*events, CachePolicyKind::kAdaptive, all);
        SimOptions rule = options;
        rule.prefetch = true;
        const SimResult with_rule = SimulatePolicy(*events, CachePolicyKind::kAdaptive, rule);
        const SimResult lru_rule = SimulatePolicy(*events, CachePolicyKind::kLru, rule);
        auto of_belady = [&](const SimResult& r) {
          return belady.hits == 0 ? 1.0 : static_cast<double>(r.hits) / belady.hits;
        };
        std::printf(
            "%s\t%d\t%d\t%d%%\t%d\t%llu\t%s\t%s\t%s\t%.3f\t%s\t%.3f\t%llu/"
            "%llu\t%llu\t%llu\t%s\t%s\n",
            trace.name.c_str(), node, share, budget, options.capacity,
            static_cast<unsigned long long>(lru.requests), Rate(lru).c_str(),
            Rate(adaptive).c_str(), Rate(belady).c_str(), of_belady(adaptive), Rate(oracle).c_str(),
            of_belady(oracle), static_cast<unsigned long long>(with_all.prefetch_wasted),
            static_cast<unsigned long long>(with_all.prefetch_issued),
            static_cast<unsigned long long>(with_rule.prefetch_issued),
            static_cast<unsigned long long>(with_rule.prefetch_wasted), Rate(with_rule).c_str(),
            Rate(lru_rule).c_str());
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
