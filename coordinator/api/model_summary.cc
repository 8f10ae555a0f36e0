#include "coordinator/api/model_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace colibri::coordinator {
namespace {

// Layer index of "blk.N.*", or -1.
int LayerOf(const std::string& name) {
  if (!absl::StartsWith(name, "blk.")) return -1;
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  int layer = -1;
  if (parts.size() < 3 || !absl::SimpleAtoi(parts[1], &layer)) return -1;
  return layer;
}

}  // namespace

bool IsRoutedExpertTensor(const std::string& name) {
  if (LayerOf(name) < 0) return false;
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  const std::string& role = parts[2];
  if (role == "ffn_gate_exps" || role == "ffn_up_exps" || role == "ffn_down_exps") return true;
  // Per-expert form: blk.N.ffn_gate.E.weight
  int expert = 0;
  return (role == "ffn_gate" || role == "ffn_up" || role == "ffn_down") && parts.size() == 5 &&
         absl::SimpleAtoi(parts[3], &expert);
}

ModelSummary SummarizeModel(const gguf::GgufFile& file, int experts_per_token) {
  ModelSummary s;
  std::map<int, uint64_t> expert_bytes_by_layer;  // all experts of the layer
  std::map<int, int64_t> experts_in_layer;
  uint64_t embd_bytes = 0, embd_row_bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    s.total_bytes += t.n_bytes;
    ++s.tensor_type_counts[ops::TypeName(t.type)];
    if (IsRoutedExpertTensor(t.name)) {
      const int layer = LayerOf(t.name);
      s.routed_expert_bytes += t.n_bytes;
      expert_bytes_by_layer[layer] += t.n_bytes;
      if (absl::StrContains(t.name, "_exps")) {
        const int64_t n = t.dims.size() == 3 ? t.dims[2] : 1;
        experts_in_layer[layer] = std::max(experts_in_layer[layer], n);
      } else {
        std::vector<std::string> parts = absl::StrSplit(t.name, '.');
        int64_t e = 0;
        if (absl::SimpleAtoi(parts[3], &e)) {
          experts_in_layer[layer] = std::max(experts_in_layer[layer], e + 1);
        }
      }
    } else {
      s.dense_bytes += t.n_bytes;
      if (t.name == "token_embd.weight") {
        embd_bytes = t.n_bytes;
        embd_row_bytes = t.dims.size() == 2 && t.dims[1] > 0 ? t.n_bytes / t.dims[1] : 0;
      }
    }
  }
  uint64_t active_expert_bytes = 0;
  for (const auto& [layer, bytes] : expert_bytes_by_layer) {
    const int64_t n = std::max<int64_t>(1, experts_in_layer[layer]);
    const uint64_t per_expert = bytes / n;
    s.n_routed_experts += n;
    s.bytes_per_expert = std::max(s.bytes_per_expert, per_expert);
    active_expert_bytes += per_expert * std::min<int64_t>(n, std::max(0, experts_per_token));
  }
  // A tied output head reads the embedding table in full every token.
  const bool tied = file.FindTensor("output.weight") == nullptr;
  const uint64_t embd_active = tied ? embd_bytes : embd_row_bytes;
  s.active_bytes_per_token = s.dense_bytes - embd_bytes + embd_active + active_expert_bytes;
  return s;
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace colibri::coordinator
