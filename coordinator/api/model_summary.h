// The numbers that plan a cluster, computed from a GGUF file's tensor table:
// what the coordinator keeps (the dense part) and what expert nodes hold.
#ifndef COLIBRI_COORDINATOR_API_MODEL_SUMMARY_H_
#define COLIBRI_COORDINATOR_API_MODEL_SUMMARY_H_

#include <cstdint>
#include <map>
#include <string>

#include "model/gguf/gguf_file.h"

namespace colibri::coordinator {

struct ModelSummary {
  uint64_t total_bytes = 0;          // all tensor data
  uint64_t dense_bytes = 0;          // everything except routed experts
  uint64_t routed_expert_bytes = 0;  // all routed experts of all layers
  int64_t n_routed_experts = 0;      // layers × experts per layer
  uint64_t bytes_per_expert = 0;     // gate + up + down of one expert (largest layer)
  // Weight bytes read per decoded token: dense part without the embedding table
  // (one row of it instead) plus top-k experts in each MoE layer.
  uint64_t active_bytes_per_token = 0;
  std::map<std::string, int> tensor_type_counts;  // "Q4_K" -> number of tensors
};

// experts_per_token: the model's top-k (0 if unknown: active bytes then count
// dense only).
ModelSummary SummarizeModel(const gguf::GgufFile& file, int experts_per_token);

// True for tensors holding routed experts (blk.N.ffn_{gate,up,down}_exps and the
// per-expert blk.N.ffn_{gate,up,down}.E forms), not shared experts.
bool IsRoutedExpertTensor(const std::string& name);

// "1.23 GiB" style.
std::string FormatBytes(uint64_t bytes);

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_MODEL_SUMMARY_H_
