#include "coordinator/api/cluster_view.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/generation/expert_use.h"
#include "coordinator/generation/generation_scheduler.h"
#include "coordinator/generation/step_timeline.h"
#include "model/arch/model.h"
#include "nlohmann/json.hpp"

namespace colibri::coordinator {
namespace {

using Json = nlohmann::ordered_json;

double Ms(double seconds) { return 1e3 * seconds; }

Json ModelJson(const arch::Model& model) {
  const arch::ModelConfig& c = model.config();
  Json experts = Json::array();
  for (const auto& layer : model.experts()) experts.push_back(layer.size());
  return Json{{"arch", c.arch},
              {"name", c.name},
              {"layers", c.n_layer},
              {"experts", c.n_expert},
              {"experts_used", c.n_expert_used},
              {"experts_per_layer", std::move(experts)}};
}

Json TierJson(const v1::NodeStatsReply& s) {
  const uint64_t acquisitions = s.ram_hits() + s.ram_misses();
  return Json{{"ram_budget_bytes", s.ram_budget_bytes()},
              {"ram_used_bytes", s.ram_used_bytes()},
              {"experts_stored", s.experts_stored()},
              {"bytes_stored", s.bytes_stored()},
              {"experts_in_ram", s.experts_in_ram()},
              {"ram_hits", s.ram_hits()},
              {"ram_misses", s.ram_misses()},
              {"hit_rate", acquisitions > 0 ? static_cast<double>(s.ram_hits()) /
                                                  static_cast<double>(acquisitions)
                                            : 0.0},
              {"disk_bytes_read", s.disk_bytes_read()},
              {"disk_wait_s", 1e-6 * static_cast<double>(s.disk_wait_micros())},
              {"prefetch_issued", s.prefetch_issued()},
              {"prefetch_used", s.prefetch_used()},
              {"prefetch_wasted", s.prefetch_wasted()},
              {"in_flight", s.in_flight()}};
}

Json PlacementJson(const Placement& p) {
  Json layers = Json::array();
  for (int l = 0; l < p.n_layer(); ++l) {
    Json experts = Json::array();
    for (int e = 0; e < p.n_expert(l); ++e) {
      const absl::Span<const int> owners = p.Owners(l, e);
      experts.push_back(Json(std::vector<int>(owners.begin(), owners.end())));
    }
    layers.push_back(std::move(experts));
  }
  return Json{{"replicas", p.replicas()}, {"owners", std::move(layers)}};
}

Json StepJson(const StepRecord& s, absl::Time now) {
  const double wait = std::clamp(s.expert_wait_seconds, 0.0, s.seconds);
  const double compute = std::clamp(s.node_compute_seconds, 0.0, wait);
  const double disk = std::clamp(s.node_disk_seconds, 0.0, wait - compute);
  return Json{{"age_ms", Ms(absl::ToDoubleSeconds(now - s.end))},
              {"ms", Ms(s.seconds)},
              {"tokens", s.tokens},
              {"generations", s.generations},
              {"prompt", s.prompt},
              {"coordinator_ms", Ms(s.seconds - wait)},
              {"network_ms", Ms(wait - compute - disk)},
              {"node_compute_ms", Ms(compute)},
              {"disk_ms", Ms(disk)}};
}

}  // namespace

ClusterView::ClusterView(Sources sources, Options options)
    : sources_(sources), options_(std::move(options)) {
  if (sources_.cluster != nullptr) stats_thread_ = std::thread([this] { StatsLoop(); });
}

ClusterView::~ClusterView() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (stats_thread_.joinable()) stats_thread_.join();
}

absl::Time ClusterView::Now() const { return options_.clock ? options_.clock() : absl::Now(); }

void ClusterView::StatsLoop() {
  Cluster& cluster = *sources_.cluster;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ClusterView* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(v->mu_) {
            return v->stop_ || v->wanted_;
          },
          this));
      if (stop_) return;
      wanted_ = false;
      reading_ = true;
    }
    const int n = cluster.n_nodes();
    for (int i = 0; i < n; ++i) {
      if (!cluster.healthy(i) || cluster.retired(i)) continue;
      std::shared_ptr<NodeClient> client = cluster.client(i);
      if (client == nullptr) continue;
      absl::StatusOr<v1::NodeStatsReply> stats = client->NodeStats();
      absl::MutexLock lock(&mu_);
      if (static_cast<int>(figures_.size()) <= i) figures_.resize(i + 1);
      figures_[i].read = Now();
      figures_[i].stats = std::move(stats);
      if (stop_) break;
    }
    absl::MutexLock lock(&mu_);
    last_read_ = Now();
    reading_ = false;
  }
}

std::string ClusterView::Render() {
  const absl::Time now = Now();
  Json out;
  out["time"] = absl::ToDoubleSeconds(now - absl::UnixEpoch());
  out["model"] = sources_.model != nullptr ? ModelJson(*sources_.model) : Json(nullptr);
  if (sources_.scheduler != nullptr) {
    out["scheduler"] = Json{{"sessions", sources_.scheduler->sessions()},
                            {"active", sources_.scheduler->active_generations()},
                            {"queued", sources_.scheduler->queued()},
                            {"context", sources_.scheduler->n_ctx()}};
  }
  Json nodes = Json::array();
  if (sources_.cluster != nullptr) {
    Cluster& cluster = *sources_.cluster;
    std::vector<NodeFigures> figures;
    {
      absl::MutexLock lock(&mu_);
      if (!reading_ && now - last_read_ >= options_.stats_max_age) wanted_ = true;
      figures = figures_;
    }
    for (int i = 0; i < cluster.n_nodes(); ++i) {
      const Cluster::Node& node = cluster.node(i);
      const LatencyEstimate latency = cluster.latency(i);
      const NodeCounters c = cluster.counters(i);
      Json j{{"index", i},
             {"address", node.address},
             {"node_id", node.node_id},
             {"healthy", cluster.healthy(i)},
             {"excluded", cluster.excluded(i)},
             {"retired", cluster.retired(i)},
             {"reply_ms", Json{{"samples", latency.samples},
                               {"mean", Ms(latency.wait_ewma)},
                               {"p95", Ms(latency.wait_high)},
                               {"network_mean", Ms(latency.network_ewma)}}},
             {"requests", c.requests},
             {"failures", c.failures},
             {"deadline_misses", c.deadline_misses},
             {"failovers", c.failovers},
             {"bytes_sent", c.bytes_sent},
             {"bytes_received", c.bytes_received}};
      if (i < static_cast<int>(figures.size()) && figures[i].stats.ok()) {
        j["tiers"] = TierJson(*figures[i].stats);
        j["stats_age_s"] = absl::ToDoubleSeconds(now - figures[i].read);
      } else {
        j["tiers"] = nullptr;
        if (i < static_cast<int>(figures.size())) {
          j["stats_error"] = std::string(figures[i].stats.status().message());
        }
      }
      nodes.push_back(std::move(j));
    }
    out["placement"] = PlacementJson(cluster.placement());
  } else {
    out["placement"] = nullptr;
  }
  out["nodes"] = std::move(nodes);
  if (sources_.expert_use != nullptr) {
    out["expert_use"] = Json{{"token_layers", sources_.expert_use->token_layers()},
                             {"routes", sources_.expert_use->Snapshot()}};
  }
  if (sources_.timeline != nullptr) {
    Json steps = Json::array();
    for (const StepRecord& s : sources_.timeline->Recent()) steps.push_back(StepJson(s, now));
    out["steps"] = std::move(steps);
    out["steps_total"] = sources_.timeline->total();
  }
  return out.dump();
}

}  // namespace colibri::coordinator
