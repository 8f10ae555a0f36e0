#include "coordinator/cli/project_command.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "model/arch/model.h"
#include "model/moe/expert_ffn.h"
#include "model/ops/matmul.h"

namespace colibri::coordinator {
namespace {

// `w`'s bytes copied to `at` (interleaved when the RAM tier would keep it so).
ops::WeightMatrix CopyMatrix(const ops::WeightMatrix& w, uint8_t* at) {
  if (w.layout == ops::WeightLayout::kRows && ops::PrefersInterleaved(w)) {
    return ops::InterleaveMatrix(w, at);
  }
  std::memcpy(at, w.data, w.rows * w.row_bytes);
  ops::WeightMatrix copy = w;
  copy.data = at;
  return copy;
}

// Seconds of one pass of ExpertFfn over every copy with `tokens` rows.
double Pass(const std::vector<moe::ExpertWeights>& copies, int tokens, int embd, ThreadPool* pool) {
  std::vector<float> x(static_cast<size_t>(tokens) * embd, 0.01f);
  std::vector<float> y(static_cast<size_t>(tokens) * embd);
  moe::ExpertFfnScratch scratch;
  const auto start = std::chrono::steady_clock::now();
  for (const moe::ExpertWeights& w : copies) {
    moe::ExpertFfn(w, x.data(), tokens, y.data(), ops::NumericPath::kFast, pool, &scratch);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string Ms(double seconds) { return absl::StrFormat("%.2f", 1e3 * seconds); }

}  // namespace

ModelShape ShapeOf(const arch::Model& model) {
  const arch::ModelConfig& c = model.config();
  ModelShape s;
  s.name = c.name.empty() ? c.arch : c.name;
  s.layers = c.n_layer;
  s.experts = c.n_expert;
  s.experts_used = c.n_expert_used;
  s.embd = c.n_embd;
  double expert_bytes = 0;
  int64_t n_experts = 0;
  for (const auto& layer : model.experts()) {
    if (!layer.empty()) ++s.moe_layers;
    for (const moe::ExpertWeights& w : layer) {
      expert_bytes += static_cast<double>(w.bytes());
      ++n_experts;
    }
  }
  s.expert_bytes = n_experts > 0 ? expert_bytes / n_experts : 0;
  double all = 0;
  for (const gguf::TensorInfo& t : model.file().tensors()) {
    if (t.name != "token_embd.weight") all += static_cast<double>(t.n_bytes);
  }
  s.dense_bytes = std::max(0.0, all - expert_bytes);
  return s;
}

absl::StatusOr<MachineRates> MeasureRates(const arch::Model& model, int threads,
                                          size_t buffer_bytes) {
  const moe::ExpertWeights* source = nullptr;
  for (const auto& layer : model.experts()) {
    if (!layer.empty()) {
      source = &layer[0];
      break;
    }
  }
  if (source == nullptr) {
    return absl::InvalidArgumentError("the model has no routed experts to calibrate on");
  }
  const size_t one = source->bytes();
  const size_t stride = (one + 4095) / 4096 * 4096 + 4096;
  const size_t n_copies = std::max<size_t>(4, buffer_bytes / stride);
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[n_copies * stride + 64]);
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buffer.get()) + 63) &
                                             ~uintptr_t{63});
  std::vector<moe::ExpertWeights> copies;
  for (size_t i = 0; i < n_copies; ++i) {
    uint8_t* at = base + i * stride;
    moe::ExpertWeights w = *source;
    w.gate = CopyMatrix(source->gate, at);
    at += source->gate.rows * source->gate.row_bytes;
    w.up = CopyMatrix(source->up, at);
    at += source->up.rows * source->up.row_bytes;
    w.down = CopyMatrix(source->down, at);
    copies.push_back(w);
  }
  const int embd = model.config().n_embd;
  ThreadPool pool(std::max(threads, 1));
  auto best = [&](int tokens, ThreadPool* p) {
    double t = Pass(copies, tokens, embd, p);  // the first pass also warms up
    for (int i = 0; i < 3; ++i) t = std::min(t, Pass(copies, tokens, embd, p));
    return static_cast<double>(one) * n_copies / t;
  };
  MachineRates r;
  r.threads = std::max(threads, 1);
  r.bytes_per_s_1tok_1thread = best(1, nullptr);
  r.bytes_per_s_8tok_1thread = best(8, nullptr);
  r.bytes_per_s_1tok = threads > 1 ? best(1, &pool) : r.bytes_per_s_1tok_1thread;
  r.bytes_per_s_8tok = threads > 1 ? best(8, &pool) : r.bytes_per_s_8tok_1thread;
  return r;
}

absl::Status RunProject(const ProjectOptions& options, std::ostream& out, std::ostream& err) {
  COLIBRI_ASSIGN_OR_RETURN(std::unique_ptr<arch::Model> model,
                           arch::Model::Open(options.model_path));
  ModelShape shape = ShapeOf(*model);
  if (!options.shape.empty()) {
    COLIBRI_ASSIGN_OR_RETURN(shape, ParseModelShape(options.shape));
  }
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ClusterShape cluster = options.cluster;
  if (cluster.node_threads <= 0) cluster.node_threads = threads;
  err << "project: timing this machine's kernels on " << options.model_path << "'s experts\n";
  COLIBRI_ASSIGN_OR_RETURN(MachineRates rates, MeasureRates(*model, threads, size_t{512} << 20));
  rates.call_overhead_seconds = options.call_overhead_seconds;

  out << absl::StrFormat(
      "model: %s, %d layers (%d MoE), %d experts top-%d, %.2f MiB per expert, %.2f GiB dense\n",
      shape.name, shape.layers, shape.moe_layers, shape.experts, shape.experts_used,
      shape.expert_bytes / (1 << 20), shape.dense_bytes / (1 << 30));
  out << absl::StrFormat(
      "cluster: %d nodes, RTT %s ms, %.1f Gbit/s, %d threads, %s RAM, %.1f GB/s disk per node, "
      "%d replica(s)%s\n",
      cluster.nodes, Ms(cluster.rtt_seconds), cluster.link_gbit, cluster.node_threads,
      cluster.node_ram_bytes > 0 ? absl::StrFormat("%.0f GiB", cluster.node_ram_bytes / (1 << 30))
                                 : std::string("unbounded"),
      cluster.disk_gbs, cluster.replicas,
      cluster.node_mem_gbs > 0 ? absl::StrFormat(", %.0f GB/s memory", cluster.node_mem_gbs)
                               : std::string());
  out << absl::StrFormat(
      "machine: weights at %.1f GB/s (1 token, %d threads), %.1f GB/s (1 thread), %.1f GB/s "
      "(8 tokens); call overhead %s ms\n",
      rates.bytes_per_s_1tok / 1e9, rates.threads, rates.bytes_per_s_1tok_1thread / 1e9,
      rates.bytes_per_s_8tok / 1e9, Ms(rates.call_overhead_seconds));
  if (options.grid) {
    out << "nodes  gbit   1-stream tok/s  binds                8-stream tok/s  disk_MiB/tok\n";
    for (int nodes : {3, 5, 8}) {
      for (double gbit : {1.0, 2.5, 10.0}) {
        ClusterShape c = cluster;
        c.nodes = nodes;
        c.link_gbit = gbit;
        StepShape one;
        StepShape eight;
        eight.streams = 8;
        COLIBRI_ASSIGN_OR_RETURN(Projection p1, Project(shape, c, rates, one));
        COLIBRI_ASSIGN_OR_RETURN(Projection p8, Project(shape, c, rates, eight));
        out << absl::StrFormat("%-6d %-6.1f %-15.2f %-20s %-15.2f %.1f\n", nodes, gbit,
                               p1.tokens_per_second, p1.binding, p8.tokens_per_second,
                               p1.disk_bytes_per_token / (1 << 20));
      }
    }
    return absl::OkStatus();
  }
  out << "streams drafts  tok/s    step_ms  coordinator  network  transfer  node_compute  disk"
         "     disk_MiB/tok  binds\n";
  double single = 0;
  for (int drafts : {0, options.drafts}) {
    for (int streams : {1, 4, 8, 16}) {
      StepShape step;
      step.streams = streams;
      step.drafts = drafts;
      step.acceptance = options.acceptance;
      COLIBRI_ASSIGN_OR_RETURN(Projection p, Project(shape, cluster, rates, step));
      if (streams == 1 && drafts == 0) single = p.tokens_per_second;
      out << absl::StrFormat("%-7d %-7d %-8.2f %-8s %-12s %-8s %-9s %-13s %-8s %-13.1f %s\n",
                             streams, drafts, p.tokens_per_second, Ms(p.step), Ms(p.coordinator),
                             Ms(p.network), Ms(p.transfer), Ms(p.node_compute), Ms(p.disk),
                             p.disk_bytes_per_token / (1 << 20), p.binding);
    }
    if (options.drafts == 0) break;
  }
  out << absl::StrFormat("speculation rows: acceptance %.2f\n", options.acceptance);
  out << absl::StrFormat("projected single-stream decode: %.2f tok/s\n", single);
  return absl::OkStatus();
}

}  // namespace colibri::coordinator
