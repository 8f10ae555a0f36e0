#include "coordinator/cluster/projection.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace colibri::coordinator {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;
constexpr const char* kShapeKeys[] = {"layers",     "moe_layers", "experts",  "experts_used",
                                      "embd",       "expert_mib", "dense_gib"};

// Distinct items hit when `draws` uniform choices of `per_draw` distinct
// items each are made among `n`.
double DistinctHit(double n, double per_draw, double draws) {
  if (n <= 0) return 0;
  return n * (1.0 - std::pow(1.0 - std::min(per_draw, n) / n, draws));
}

// The rate for a product of `tokens` rows on `threads` threads: measured at
// 1 and 8 tokens, interpolated in between and held beyond (more rows cost
// more compute but the same weight bytes); threads scale linearly up to
// `ceiling` bytes/s, or when it is 0 the machine's measured all-thread rate.
double Rate(const MachineRates& r, int threads, double tokens, double ceiling = 0) {
  const double t = std::clamp((tokens - 1.0) / 7.0, 0.0, 1.0);
  const double one = r.bytes_per_s_1tok_1thread + t * (r.bytes_per_s_8tok_1thread -
                                                      r.bytes_per_s_1tok_1thread);
  const double all = r.bytes_per_s_1tok + t * (r.bytes_per_s_8tok - r.bytes_per_s_1tok);
  return std::min(one * std::max(threads, 1), ceiling > 0 ? ceiling : std::max(all, one));
}

}  // namespace

std::vector<ModelShape> ShapePresets() {
  // Parameters from the published configs; bytes at 4.85 bits per weight
  // (Q4_K_M's average). dense: attention, shared experts, dense FFN layers,
  // routers and the output head.
  auto at = [](double params) { return params * 4.85 / 8.0; };
  std::vector<ModelShape> p;
  p.push_back({"deepseek-v3", 61, 58, 256, 8, 7168, at(3.0 * 7168 * 2048), at(16.1e9)});
  p.push_back({"kimi-k2", 61, 60, 384, 8, 7168, at(3.0 * 7168 * 2048), at(10.4e9)});
  p.push_back({"qwen3-235b", 94, 94, 128, 8, 4096, at(3.0 * 4096 * 1536), at(7.8e9)});
  p.push_back({"glm-4.5", 92, 89, 160, 8, 5120, at(3.0 * 5120 * 1536), at(16.0e9)});
  p.push_back({"qwen3-30b", 48, 48, 128, 8, 2048, at(3.0 * 2048 * 768), at(1.2e9)});
  return p;
}

absl::StatusOr<ModelShape> ParseModelShape(absl::string_view spec) {
  for (const ModelShape& preset : ShapePresets()) {
    if (spec == preset.name) return preset;
  }
  if (spec.find('=') == absl::string_view::npos) {
    std::string names;
    for (const ModelShape& preset : ShapePresets()) absl::StrAppend(&names, " ", preset.name);
    return absl::InvalidArgumentError(absl::StrCat("model shape \"", spec,
                                                   "\": not one of the presets (", names,
                                                   " ) and not key=value,..."));
  }
  ModelShape s;
  s.name = "custom";
  bool seen[7] = {};
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (key == "name") {
      s.name = std::string(value);
      continue;
    }
    int which = -1;
    for (int i = 0; i < 7; ++i) {
      if (key == kShapeKeys[i]) which = i;
    }
    if (which < 0) {
      return absl::InvalidArgumentError(absl::StrCat("model shape: unknown key \"", key, "\""));
    }
    double v = 0;
    if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v <= 0 || v > 1e9) {
      return absl::InvalidArgumentError(
          absl::StrCat("model shape: ", key, "=", value, " is not a positive number"));
    }
    seen[which] = true;
    switch (which) {
      case 0: s.layers = static_cast<int>(v); break;
      case 1: s.moe_layers = static_cast<int>(v); break;
      case 2: s.experts = static_cast<int>(v); break;
      case 3: s.experts_used = static_cast<int>(v); break;
      case 4: s.embd = static_cast<int>(v); break;
      case 5: s.expert_bytes = v * kMiB; break;
      case 6: s.dense_bytes = v * kGiB; break;
    }
  }
  for (int i = 0; i < 7; ++i) {
    if (!seen[i]) {
      return absl::InvalidArgumentError(absl::StrCat("model shape: ", kShapeKeys[i], " missing"));
    }
  }
  return s;
}

absl::StatusOr<Projection> Project(const ModelShape& m, const ClusterShape& c,
                                   const MachineRates& r, const StepShape& step) {
  if (m.layers <= 0 || m.moe_layers < 0 || m.moe_layers > m.layers || m.experts <= 0 ||
      m.experts_used <= 0 || m.experts_used > m.experts || m.embd <= 0 || m.expert_bytes <= 0 ||
      m.dense_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("model shape ", m.name, " cannot be projected"));
  }
  if (c.nodes < 0 || c.rtt_seconds < 0 || c.link_gbit <= 0 || c.node_threads < 1 ||
      c.node_ram_bytes < 0 || c.disk_gbs <= 0 || c.replicas < 1 || c.node_mem_gbs < 0 || c.coordinator_threads < 0 ||
      c.coordinator_mem_gbs < 0 ||
      (c.nodes > 0 && c.replicas > c.nodes) || c.wire_bytes <= 0) {
    return absl::InvalidArgumentError("the described cluster cannot be projected");
  }
  if (r.threads < 1 || r.bytes_per_s_1tok_1thread <= 0 || r.bytes_per_s_1tok <= 0 ||
      r.bytes_per_s_8tok_1thread <= 0 || r.bytes_per_s_8tok <= 0 || r.call_overhead_seconds < 0) {
    return absl::InvalidArgumentError("the machine rates must be positive");
  }
  if (step.streams < 1 || step.drafts < 0 || step.acceptance < 0 || step.acceptance > 1) {
    return absl::InvalidArgumentError("streams >= 1, drafts >= 0 and acceptance in [0, 1]");
  }
  Projection p;
  const double rows = static_cast<double>(step.streams) * (1 + step.drafts);
  double accepted = 1;  // 1 + a + ... + a^drafts
  for (int i = 1; i <= step.drafts; ++i) accepted += std::pow(step.acceptance, i);
  p.tokens_per_step = step.streams * accepted;

  const int coordinator_threads = c.coordinator_threads > 0 ? c.coordinator_threads : r.threads;
  const double coordinator_ceiling = c.coordinator_mem_gbs * 1e9;
  p.coordinator = m.dense_bytes / Rate(r, coordinator_threads, rows, coordinator_ceiling);
  const double distinct = DistinctHit(m.experts, m.experts_used, rows);
  const double routes = rows * m.experts_used;
  // Tokens each expert of the step sees on average.
  const double tokens_per_expert = routes / std::max(distinct, 1.0);
  if (c.nodes == 0) {
    p.node_compute = m.moe_layers * distinct * m.expert_bytes /
                     Rate(r, coordinator_threads, tokens_per_expert, coordinator_ceiling);
  } else {
    const double per_node = distinct / c.nodes;
    p.node_compute = m.moe_layers * per_node * m.expert_bytes /
                     Rate(r, c.node_threads, tokens_per_expert, c.node_mem_gbs * 1e9);
    const double share = static_cast<double>(m.moe_layers) * m.experts * m.expert_bytes *
                         c.replicas / c.nodes;
    p.miss_rate = c.node_ram_bytes > 0 ? std::clamp(1.0 - c.node_ram_bytes / share, 0.0, 1.0) : 0.0;
    p.disk = m.moe_layers * per_node * p.miss_rate * m.expert_bytes / (c.disk_gbs * 1e9);
    p.disk_bytes_per_token = m.moe_layers * distinct * p.miss_rate * m.expert_bytes /
                             std::max(p.tokens_per_step, 1e-9);
    // Every route's hidden row goes out and its output row comes back
    // through the coordinator's link.
    const double wire_bytes = 2.0 * routes * m.embd * c.wire_bytes;
    p.transfer = m.moe_layers * wire_bytes / (c.link_gbit * 1e9 / 8.0);
    p.network = m.moe_layers * (c.rtt_seconds + r.call_overhead_seconds) + p.transfer;
  }
  p.step = p.coordinator + p.network + p.node_compute + p.disk;
  p.tokens_per_second = p.tokens_per_step / p.step;
  const std::pair<double, const char*> parts[] = {
      {p.coordinator, "coordinator compute"},
      {p.network - p.transfer, "network latency"},
      {p.transfer, "link bandwidth"},
      {p.node_compute, "node compute"},
      {p.disk, "disk"}};
  const auto* top = std::max_element(std::begin(parts), std::end(parts),
                                     [](const auto& a, const auto& b) { return a.first < b.first; });
  p.binding = top->second;
  return p;
}

}  // namespace colibri::coordinator
