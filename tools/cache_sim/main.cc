// colibri-cache-sim: replays routing traces (run/serve --trace-routing)
// against one node's RAM tier at several budgets and prints, per trace, node
// and budget, the hit rates and disk reads per step of LRU (demand loads),
// LRU with the prefetch rule, the node's policy as a node runs it (adaptive,
// with the prefetch rule) and Belady's optimum (demand loads), the prefetches
// wasted and issued, the adaptive policy without prefetching and LFU told
// the trace's counts (an online policy's ceiling on near-uniform routing);
// then a summary of the rows ("# " lines).
#include <algorithm>
#include <cstdint>
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

// One trace x node x budget.
struct Row {
  SimResult lru;              // demand loads only
  SimResult lru_prefetch;     // LRU with the prefetch rule
  SimResult policy;           // the node's policy (adaptive) with the prefetch rule
  SimResult belady;           // demand loads only
  SimResult adaptive_demand;  // the node's policy without prefetching
  double OfBelady() const {
    return belady.hits == 0 ? 1.0 : static_cast<double>(policy.hits) / belady.hits;
  }
};

// Counts over the rows printed: where the policy falls short of its marks.
class Summary {
 public:
  void Add(const Row& row) {
    ++rows_;
    Below(row.policy, row.lru_prefetch, &below_lru_prefetch_);
    Below(row.policy, row.lru, &below_lru_);
    Below(row.adaptive_demand, row.lru, &demand_below_lru_);
    if (row.belady.hits > 0) {
      min_of_belady_ = std::min(min_of_belady_, row.OfBelady());
      if (row.OfBelady() < 0.9) ++under_09_;
    }
    if (row.policy.reads() > row.lru_prefetch.reads()) ++more_reads_than_lru_prefetch_;
    issued_ += row.policy.prefetch_issued;
    wasted_ += row.policy.prefetch_wasted;
  }
  void Print() const {
    std::printf("# rows: %d\n", rows_);
    Print("policy below lru+prefetch", below_lru_prefetch_);
    Print("policy below lru", below_lru_);
    Print("adaptive_demand below lru", demand_below_lru_);
    std::printf("# policy/belady: min %.3f, rows under 0.9: %d\n", min_of_belady_, under_09_);
    std::printf("# policy reads more than lru+prefetch: %d rows\n",
                more_reads_than_lru_prefetch_);
    std::printf("# policy prefetches wasted: %llu of %llu (%.1f%%)\n",
                static_cast<unsigned long long>(wasted_), static_cast<unsigned long long>(issued_),
                issued_ == 0 ? 0.0 : 100.0 * static_cast<double>(wasted_) / issued_);
  }

 private:
  struct Shortfall {
    int rows = 0;
    double most = 0;  // the largest hit-rate gap
  };
  static void Below(const SimResult& a, const SimResult& b, Shortfall* s) {
    if (a.hits >= b.hits) return;
    ++s->rows;
    s->most = std::max(s->most, b.hit_rate() - a.hit_rate());
  }
  static void Print(const char* what, const Shortfall& s) {
    std::printf("# %s: %d rows (most %.3f)\n", what, s.rows, s.most);
  }
  int rows_ = 0;
  Shortfall below_lru_prefetch_;
  Shortfall below_lru_;
  Shortfall demand_below_lru_;
  double min_of_belady_ = 1e9;
  int under_09_ = 0;
  int more_reads_than_lru_prefetch_ = 0;
  uint64_t issued_ = 0;
  uint64_t wasted_ = 0;
};

int Main(int argc, char** argv) {
  CLI::App app{
      "Replays routing traces against one expert node's RAM tier at each budget (a share of "
      "the node's experts): hit rates and disk reads per step of LRU, LRU with the prefetch "
      "rule, the node's policy with the rule and Belady's optimum"};
  std::vector<std::string> paths;
  int nodes = 1;
  int replicas = 1;
  int only_node = -1;
  std::vector<int> budgets = {10, 20, 30, 40, 50};
  double prefetch_cost = SimOptions().prefetch_cost;
  double half_life = 4096;
  double fast_half_life = 64;
  int64_t hint_horizon = 64;
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
  app.add_option("--hint-horizon", hint_horizon,
                 "requests a hint protects its expert for at most when it is not used")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
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
      "trace\tnode\tshare\tbudget\texperts\trequests\tsteps\t"
      "lru\tlru+prefetch\tpolicy\tbelady\tpolicy/belady\t"
      "reads/step:lru\tlru+prefetch\tpolicy\tbelady\t"
      "wasted/issued:lru+prefetch\tpolicy\t"
      "adaptive_demand\toracle_lfu\n");
  Summary summary;
  for (const Trace& trace : traces) {
    std::vector<int> experts = colibri::cache_sim::ExpertsPerLayer(trace.records);
    const int64_t steps = std::max<int64_t>(colibri::cache_sim::CountSteps(trace.records), 1);
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
        SimOptions demand;
        demand.capacity = std::max(1, (share * budget + 50) / 100);
        demand.prefetch_cost = prefetch_cost;
        demand.policy.half_life_ticks = half_life;
        demand.policy.fast_half_life_ticks = fast_half_life;
        demand.policy.hint_horizon = static_cast<uint64_t>(hint_horizon);
        SimOptions rule = demand;
        rule.prefetch = true;
        Row row;
        row.lru = SimulatePolicy(*events, CachePolicyKind::kLru, demand);
        row.lru_prefetch = SimulatePolicy(*events, CachePolicyKind::kLru, rule);
        row.policy = SimulatePolicy(*events, CachePolicyKind::kAdaptive, rule);
        row.belady = colibri::cache_sim::SimulateBelady(*events, demand.capacity);
        row.adaptive_demand = SimulatePolicy(*events, CachePolicyKind::kAdaptive, demand);
        const SimResult oracle =
            colibri::cache_sim::SimulateOracleFrequency(*events, demand.capacity);
        auto per_step = [&](const SimResult& r) {
          return absl::StrFormat("%.2f", static_cast<double>(r.reads()) / steps);
        };
        auto wasted = [](const SimResult& r) {
          return absl::StrFormat("%llu/%llu", static_cast<unsigned long long>(r.prefetch_wasted),
                                 static_cast<unsigned long long>(r.prefetch_issued));
        };
        std::printf("%s\t%d\t%d\t%d%%\t%d\t%llu\t%lld\t%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
                    trace.name.c_str(), node, share, budget, demand.capacity,
                    static_cast<unsigned long long>(row.lru.requests),
                    static_cast<long long>(steps), Rate(row.lru).c_str(),
                    Rate(row.lru_prefetch).c_str(), Rate(row.policy).c_str(),
                    Rate(row.belady).c_str(), row.OfBelady(), per_step(row.lru).c_str(),
                    per_step(row.lru_prefetch).c_str(), per_step(row.policy).c_str(),
                    per_step(row.belady).c_str(), wasted(row.lru_prefetch).c_str(),
                    wasted(row.policy).c_str(), Rate(row.adaptive_demand).c_str(),
                    Rate(oracle).c_str());
        summary.Add(row);
      }
    }
  }
  summary.Print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
